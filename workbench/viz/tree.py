"""The draft tree of one step: every candidate the draft grew, what the rerank kept, what the
accept walk did with it.

Node statuses (``style.NODE``): the **root** (last step's bonus, verified again as node 0);
**accepted** drafts (on the accepted path); drafts **tried and missed** by the walk; kept drafts
the walk **never reached** (their parent was not accepted, or a sibling matched first); candidates
**dropped at rerank** (not among the best ``num_draft_tokens - 1`` path scores: drafted, never
verified). The **bonus** hangs under the last accepted node: the target's own token there. A
ring marks the **stop** node, where the walk ended, named in the legend by why it stopped (the
trace's ``stop``, ``engine/stops.py``).

Layout (``layout.tree_layout``): one column per depth, root on the left, siblings in descending
draft probability. Every kept node and the bonus carry their token in the picture; the candidates
dropped at rerank under one parent fold into one "+n dropped" mark (listed on hover). A long
token is cut with "…" (whole on hover), never below ``layout.MIN_LABEL``: a tree too deep for the
width is drawn wider instead.
"""

from __future__ import annotations

import networkx as nx
import plotly.graph_objects as go

from workbench.engine.drafts.registry import source_named
from workbench.viz.layout import Line, TreeLayout, legend_rows, tree_layout
from workbench.viz.style import LEGEND_ROW, NODE, base_layout, empty_figure, title_height
from workbench.viz.tokens import num, plotly_text, show

WIDTH, COMPACT_WIDTH = 900, 480  # px: the notebooks' PNG width; half of it, for two trees side by side
MARGIN = 10  # px left, right and below the plot area
DROPPED_LISTED = 8  # dropped candidates named in a fold's hover


def node_status(trace: dict) -> list[str]:
    """Status of each verified node (index = node): root / accepted / missed / unreached."""
    accept = trace["accept"]
    on_path = set(accept["path"])
    missed = {m["child"] for m in accept["moves"] if not m["match"]}
    return ["root" if i == 0 else "accepted" if i in on_path else "missed" if i in missed else "unreached"
            for i in range(len(trace["tree"]["nodes"]))]


def tree_graph(trace: dict) -> nx.DiGraph:
    """Directed graph root -> children. Keys: node index (int) for verified nodes, ``"c<flat>"``
    for candidates dropped at rerank, ``"bonus"`` for the bonus. Attributes: status, text, prob,
    score, depth, node, candidate, position."""
    nodes, status = trace["tree"]["nodes"], node_status(trace)
    node_of = {n["candidate"]: n["node"] for n in nodes[1:]}  # flat candidate index -> node
    tie_dropped = set(trace["draft"]["dropped"])
    g = nx.DiGraph()
    root = nodes[0]
    g.add_node(0, status="root", text=root["text"], prob=1.0, score=1.0, depth=0, node=0, candidate=-1,
               position=root["position"], note="")
    for c in trace["draft"]["candidates"]:  # flat order: a parent always precedes its children
        key = node_of.get(c["index"], f"c{c['index']}")
        verified = isinstance(key, int)
        note = "among the best scores, but its parent was not (a tie): dropped" if c["index"] in tie_dropped else ""
        g.add_node(key, status=status[key] if verified else "dropped", text=c["text"], prob=c["prob"],
                   score=c["score"], depth=c["level"], node=key if verified else None, candidate=c["index"],
                   position=nodes[key]["position"] if verified else None, note=note)
        g.add_edge(0 if c["parent"] == -1 else node_of.get(c["parent"], f"c{c['parent']}"), key)
    bonus = trace["accept"]["bonus"]
    after = bonus["after_node"]
    g.add_node("bonus", status="bonus", text=bonus["text"], prob=None, score=None,
               depth=nodes[after]["depth"] + 1, node=None, candidate=None, position=None,
               note=f"from the {trace['accept']['bonus_from']} at node {after}")
    g.add_edge(after, "bonus")
    return g


def collapse_dropped(g: nx.DiGraph) -> nx.DiGraph:
    """``g`` with the candidates dropped at rerank folded into one node per parent: key
    ``"+<parent key>"``, status "dropped", ``count`` = the dropped candidates under that parent
    (its dropped children and all their descendants), ``members`` = their (key, text, score),
    best score first, ``score`` = the best of their path scores. Kept nodes keep their order; the fold is
    the parent's last child."""
    out = nx.DiGraph()
    for key in nx.dfs_preorder_nodes(g, 0):
        a = g.nodes[key]
        if a["status"] == "dropped":
            continue
        out.add_node(key, **a)
        if key != 0:
            out.add_edge(next(g.predecessors(key)), key)
    for key in list(out.nodes):
        members = [m for c in g.successors(key) if g.nodes[c]["status"] == "dropped"
                   for m in nx.dfs_preorder_nodes(g, c)]
        if not members:
            continue
        members = sorted(((m, g.nodes[m]["text"], g.nodes[m]["score"]) for m in members), key=lambda m: -m[2])
        out.add_node(f"+{key}", status="dropped", text="", prob=None, score=members[0][2],
                     depth=out.nodes[key]["depth"] + 1, node=None, candidate=None, position=None, note="",
                     count=len(members), members=members)
        out.add_edge(key, f"+{key}")
    return out


def cutoff(trace: dict) -> float:
    """The rerank's cut-off: the lowest path score among the kept drafts (1.0 with none kept)."""
    return min((n["score"] for n in trace["tree"]["nodes"][1:]), default=1.0)


def node_lines(a: dict, compact: bool) -> list[Line]:
    """A node's label, name first: the token (bold), then for a draft its p and path score s
    (unless ``compact``); a fold of dropped candidates: "+n dropped"."""
    if a["status"] == "dropped":
        return [Line(f"+{a['count']} dropped", 10, short=f"+{a['count']}")]
    name = Line(show(a["text"], 48), 11, bold=True)
    if compact or a["prob"] is None or a["status"] == "root":
        return [name]
    return [name, Line(f"p {num(a['prob'])} · s {num(a['score'])}", 10)]


def _hover(key, a: dict) -> str:
    if a["status"] == "dropped":
        listed = ", ".join(f"{plotly_text(show(t))} (s {num(s)})" for _, t, s in a["members"][:DROPPED_LISTED])
        more = f", … {a['count'] - DROPPED_LISTED} more" if a["count"] > DROPPED_LISTED else ""
        return (f"<b>{a['count']} candidate(s) dropped at rerank</b> under this node: drafted, never verified"
                f"<br>best first: {listed}{more}")
    lines = [f"<b>{plotly_text(show(a['text'], 40))}</b> — {NODE[a['status']].label}"]
    if a["node"] is not None:
        lines.append(f"node {a['node']}, depth {a['depth']}, position {a['position']}")
    if a["prob"] is not None and key != 0:
        lines.append(f"draft probability {a['prob']:.4f}<br>path score {a['score']:.6f}")
    if a["note"]:
        lines.append(a["note"])
    return "<br>".join(lines)


def _label_html(lines: list[Line]) -> str:
    """A label's lines as plotly text: the token as written (``plotly_text``, never an HTML
    entity such as &quot; that plotly would print), the first line bold when it is a name."""
    first, rest = lines[0], lines[1:]
    text = f"<b>{plotly_text(first.text)}</b>" if first.bold else plotly_text(first.text)
    return "<br>".join([text] + [f"<span style='font-size:{line.size}px'>{plotly_text(line.text)}</span>"
                                 for line in rest])


def _edges(g: nx.DiGraph, lay: TreeLayout, path_edges: set) -> list[go.Scatter]:
    """Grey edges, the accepted path in the 'accepted' colour, the bonus edge dashed orange; each
    edge runs from the end of its parent's label, never through a label."""
    groups = {"edge": ([], [], dict(color="#BBBBBB", width=1)),
              "path": ([], [], dict(color=NODE["accepted"].colour, width=3)),
              "bonus": ([], [], dict(color=NODE["bonus"].colour, width=2, dash="dot"))}
    for u, v in g.edges:
        kind = "bonus" if v == "bonus" else "path" if (u, v) in path_edges else "edge"
        xs, ys, _ = groups[kind]
        xs += [x for x, _ in lay.edges[u, v]] + [None]
        ys += [y for _, y in lay.edges[u, v]] + [None]
    return [go.Scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", showlegend=False, name=kind)
            for kind, (xs, ys, line) in groups.items() if xs]


def layout_tree(g: nx.DiGraph, compact: bool, width: int) -> TreeLayout:
    """``g`` laid out in a figure ``width`` px wide (``MARGIN`` on each side)."""
    return tree_layout(g, 0, {k: node_lines(a, compact) for k, a in g.nodes(data=True)}, width - 2 * MARGIN)


def draw_tree(g: nx.DiGraph, lay: TreeLayout, path: list[int]) -> go.Figure:
    """The laid-out tree, unframed: edges, one marker trace per status (``meta`` = the status,
    ``customdata`` = the keys, named by its legend label), every label an annotation in its box."""
    fig = go.Figure(_edges(g, lay, set(zip(path, path[1:]))))
    for status, look in NODE.items():
        keys = [k for k, a in g.nodes(data=True) if a["status"] == status]
        if not keys:
            continue
        big = status in ("root", "bonus")
        fig.add_trace(go.Scatter(
            x=[lay.xy[k][0] for k in keys], y=[lay.xy[k][1] for k in keys], mode="markers",
            name="+n dropped at rerank" if status == "dropped" else look.label,
            marker=dict(symbol=look.symbol, color=look.colour, size=16 if big else 10 if status == "dropped" else 12,
                        line=dict(width=2, color=look.colour)),
            hovertext=[_hover(k, g.nodes[k]) for k in keys], hoverinfo="text",
            customdata=[str(k) for k in keys], meta=status))
    for k, box in lay.boxes.items():
        fig.add_annotation(x=box.x0, y=(box.y0 + box.y1) / 2, text=_label_html(lay.lines[k]), showarrow=False,
                           xanchor="left", yanchor="middle", align="left", borderpad=0,
                           font=dict(size=11, color="#555" if g.nodes[k]["status"] == "dropped" else "#222"))
    return fig


def frame(fig: go.Figure, title: str, *, width: int, plot_height: float, legend: list[str],
          min_height: int | None = None) -> None:
    """Axes in px (y down) over a plot area exactly ``width`` - 2 ``MARGIN`` wide and at least
    ``plot_height`` tall (more if the figure must be ``min_height``), the title wrapped and the
    legend above the plot, both in a top margin sized to hold them (at least the 100 px a
    labelled Gradio plot reserves there, so the app draws the same picture)."""
    top = round(max(100, title_height(title, width) + legend_rows(legend, width - 2 * MARGIN) * LEGEND_ROW))
    plot_height = max(plot_height, (min_height or 0) - top - MARGIN)
    fig.update_layout(**base_layout(title, round(plot_height + top + MARGIN), axes=False, width=width))
    fig.update_layout(width=width, margin=dict(l=MARGIN, r=MARGIN, t=top, b=MARGIN, autoexpand=False),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
                      hovermode="closest")
    fig.update_xaxes(visible=False, range=[0, width - 2 * MARGIN], fixedrange=True)
    fig.update_yaxes(visible=False, range=[plot_height, 0], fixedrange=True)


def tree_figure(trace: dict, compact: bool = False, width: int | None = None,
                height: int | None = None, label: str = "") -> go.Figure:
    """The draft tree of a spec step (an explanatory empty figure for prefill / vanilla steps).
    Every verified node and the bonus carry their token in the picture, the candidates dropped
    at rerank one "+n dropped" mark per parent (listed on hover), the rerank's cut-off in the
    legend. ``compact``: token text only (p and s on hover) and a short title, for a half-width
    figure. ``width`` px (default 900, compact 480); ``height``: at least this tall; ``label``: put
    in front of the title (which run the step is from), wrapped with it."""
    if trace["kind"] != "spec":
        return empty_figure(_no_tree(trace), height=220)
    width = width or (COMPACT_WIDTH if compact else WIDTH)
    g = collapse_dropped(tree_graph(trace))
    lay = layout_tree(g, compact, width)
    fig = draw_tree(g, lay, trace["accept"]["path"])
    width = max(width, round(lay.width) + 2 * MARGIN)  # a very deep tree: wider, never squeezed
    title = f"{plotly_text(label)}: {_title(trace, compact)}" if label else _title(trace, compact)
    if "stop" in trace:
        fig.add_trace(stop_marker(trace, lay))
    frame(fig, title, width=width, plot_height=lay.height, legend=[t.name for t in fig.data if t.meta],
          min_height=height)
    return fig


STOP_COLOUR = "#D55E00"  # vermillion (Okabe-Ito), as a miss


def stop_marker(trace: dict, lay: TreeLayout) -> go.Scatter:
    """A ring around the node where the walk stopped, named in the legend by its cause."""
    stop = trace["stop"]
    x, y = lay.xy[stop["node"]]
    rank = "" if stop["rank"] is None else f"<br>draft rank #{stop['rank'] + 1}, p = {num(stop['prob'])}"
    hover = (f"the walk stopped here: {stop['cause']}<br>the target's token: {plotly_text(show(stop['text']))}{rank}")
    return go.Scatter(x=[x], y=[y], mode="markers", name=f"stop: {stop['cause']}", hovertext=[hover],
                      hoverinfo="text", customdata=["stop"], meta="stop",
                      marker=dict(symbol="circle-open", size=26, color=STOP_COLOUR,
                                  line=dict(width=3, color=STOP_COLOUR)))


def no_draft_note(trace: dict) -> str:
    """Why a spec step verifies the root alone, in its draft source's words
    (``DraftSource.nothing_drafted``: the n-gram draft found no earlier occurrence)."""
    source = source_named(trace.get("draft_source", ""))
    why = source.nothing_drafted if source is not None else "no candidate"
    return f"{why}: nothing drafted, this step decodes one token"


def tree_kind(trace: dict) -> str:
    """How a step's tree was chosen: "static" (a fixed shape), "chain" (``linear``: one draft
    per level) or "dynamic" (``eagle2``: grown by path score, then reranked)."""
    if trace["tree"].get("shape") == "static":
        return "static"
    return "chain" if trace.get("policy", {}).get("choice", "").startswith("linear") else "dynamic"


def rerank_line(trace: dict) -> str:
    """Where the rerank cut: how many candidates, how many kept, the lowest kept path score (or
    why there was nothing to cut); a static shape and a chain have no rerank, and say what
    decided their drafts instead."""
    c, n = len(trace["draft"]["candidates"]), len(trace["tree"]["nodes"])
    if not c:
        return no_draft_note(trace)
    kind = tree_kind(trace)
    if kind == "static":
        return f"a fixed shape: its {n - 1} rank paths verified, no rerank"
    if kind == "chain":
        return f"a chain: each of the {n - 1} drafts is the top-1 below the last, no rerank"
    return (f"rerank: the best D − 1 = {n - 1} of {c} candidates kept (path score s ≥ {num(cutoff(trace))}), "
            f"{c - n + 1} dropped")


def _title(trace: dict, compact: bool) -> str:
    n, path = len(trace["tree"]["nodes"]), trace["accept"]["path"]
    accepted = " → ".join(plotly_text(show(trace["tree"]["nodes"][i]["text"])) for i in path[1:]) or "none"
    bonus = plotly_text(show(trace["accept"]["bonus"]["text"]))
    if compact:
        return f"Step {trace['step']}: {n} nodes · accepted: {accepted} · bonus: {bonus}"
    return (f"Step {trace['step']}: {n} verified nodes (root + {n - 1} drafts) · accepted: {accepted} · "
            f"bonus: {bonus} · {rerank_line(trace)}")


def _no_tree(trace: dict) -> str:
    if trace["kind"] == "prefill":
        return (f"Step {trace['step']} is the prefill: one target forward over the {trace['prompt_len']}-token "
                "prompt.<br>Its first token comes from the target alone; drafting starts at the next step.")
    return f"Step {trace['step']}: vanilla decoding, one target forward per token, no draft tree."
