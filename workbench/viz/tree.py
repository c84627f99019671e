"""The draft tree of one step: every candidate the draft grew, what the rerank kept, what the
accept walk did with it.

Node statuses (``style.NODE``): the **root** (last step's bonus, verified again as node 0);
**accepted** drafts (on the accepted path); drafts **tried and missed** by the walk; kept drafts
the walk **never reached** (their parent was not accepted, or a sibling matched first); candidates
**dropped at rerank** (not among the best ``num_draft_tokens - 1`` path scores: drafted, never
verified). The **bonus** hangs under the last accepted node: the target's own token there.

Layout: a tidy tree over the ``networkx`` graph: one column per depth (root on the left, text
reads left to right); leaves in depth-first order top to bottom, siblings in descending draft
probability; a parent sits at the mean height of its children.
"""

from __future__ import annotations

import networkx as nx
import plotly.graph_objects as go

from workbench.viz.style import NODE, base_layout, empty_figure
from workbench.viz.tokens import num, show


def node_status(trace: dict) -> list[str]:
    """Status of each verified node (index = node): root / accepted / missed / unreached."""
    accept = trace["accept"]
    on_path = set(accept["path"])
    missed = {m["child"] for m in accept["moves"] if not m["match"]}
    return ["root" if i == 0 else "accepted" if i in on_path else "missed" if i in missed else "unreached"
            for i in range(len(trace["tree"]["nodes"]))]


def tree_graph(trace: dict, show_dropped: bool = True) -> nx.DiGraph:
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
        if isinstance(key, str) and not show_dropped:
            continue
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


def tidy_layout(g: nx.DiGraph, root=0) -> dict:
    """{key: (x, y)}: x = depth, y = leaf order (depth-first; a dropped leaf takes less room than a
    labelled one), each parent at the mean y of its children. Row 0 is at the top (y descending)."""
    y, next_y = {}, 0.0
    for key in nx.dfs_preorder_nodes(g, root):
        if g.out_degree(key) == 0:
            room = 0.45 if g.nodes[key]["status"] == "dropped" else 1.5
            y[key] = -(next_y + room / 2)
            next_y += room
    for key in nx.dfs_postorder_nodes(g, root):
        if key not in y:
            y[key] = sum(y[c] for c in g.successors(key)) / g.out_degree(key)
    return {k: (g.nodes[k]["depth"], y[k]) for k in g.nodes}


def _hover(key, a: dict) -> str:
    lines = [f"<b>{show(a['text'], 40)}</b> — {NODE[a['status']].label}"]
    if a["node"] is not None:
        lines.append(f"node {a['node']}, depth {a['depth']}, position {a['position']}")
    elif a["status"] == "dropped":
        lines.append(f"candidate {a['candidate']} (flat index), depth {a['depth']}: never verified")
    if a["prob"] is not None and key != 0:
        lines.append(f"draft probability {a['prob']:.4f}<br>path score {a['score']:.6f}")
    if a["note"]:
        lines.append(a["note"])
    return "<br>".join(lines)


def _label(key, a: dict, compact: bool) -> str:
    """Text beside a node: token, and for drafts the draft probability p and path score s."""
    if a["status"] == "dropped":
        return ""
    if compact or a["status"] in ("root", "bonus"):
        return f"<b>{show(a['text'])}</b>"
    return f"<b>{show(a['text'])}</b><br><span style='font-size:10px'>p {num(a['prob'])} · s {num(a['score'])}</span>"


def _edges(g: nx.DiGraph, pos: dict, path_edges: set) -> list[go.Scatter]:
    """Grey edges, the accepted path in the 'accepted' colour, the bonus edge dashed orange."""
    groups = {"edge": ([], [], dict(color="#BBBBBB", width=1)),
              "path": ([], [], dict(color=NODE["accepted"].colour, width=3)),
              "bonus": ([], [], dict(color=NODE["bonus"].colour, width=2, dash="dot"))}
    for u, v in g.edges:
        kind = "bonus" if v == "bonus" else "path" if (u, v) in path_edges else "edge"
        xs, ys, _ = groups[kind]
        xs += [pos[u][0], pos[v][0], None]
        ys += [pos[u][1], pos[v][1], None]
    return [go.Scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", showlegend=False, name=kind)
            for kind, (xs, ys, line) in groups.items() if xs]


def tree_figure(trace: dict, show_dropped: bool = True, height: int = 460, compact: bool = False) -> go.Figure:
    """The draft tree of a spec step (an explanatory empty figure for prefill / vanilla steps).
    One marker trace per status, named by its legend label, so the legend explains the glyphs.
    ``compact``: token text only beside the nodes (p and s on hover) and a short title, for a
    half-width figure."""
    if trace["kind"] != "spec":
        return empty_figure(_no_tree(trace), height=220)
    g = tree_graph(trace, show_dropped)
    pos = tidy_layout(g)
    path = trace["accept"]["path"]
    fig = go.Figure(_edges(g, pos, set(zip(path, path[1:]))))
    for status, look in NODE.items():
        keys = [k for k, a in g.nodes(data=True) if a["status"] == status]
        if not keys:
            continue
        attrs = [g.nodes[k] for k in keys]
        big = status in ("root", "bonus")
        fig.add_trace(go.Scatter(
            x=[pos[k][0] for k in keys], y=[pos[k][1] for k in keys], mode="markers+text", name=look.label,
            marker=dict(symbol=look.symbol, color=look.colour, size=16 if big else 7 if status == "dropped" else 12,
                        line=dict(width=2, color=look.colour)),
            text=[_label(k, a, compact) for k, a in zip(keys, attrs)], textposition="middle right",
            textfont=dict(size=11), hovertext=[_hover(k, a) for k, a in zip(keys, attrs)], hoverinfo="text",
            customdata=[str(k) for k in keys], meta=status))
    n = len(trace["tree"]["nodes"])
    accepted = " → ".join(show(trace["tree"]["nodes"][i]["text"]) for i in path[1:]) or "none"
    bonus = show(trace["accept"]["bonus"]["text"])
    title = (f"Step {trace['step']}: {n} nodes · accepted: {accepted} · bonus: {bonus}" if compact else
             f"Step {trace['step']}: {n} verified nodes (root + {n - 1} drafts) of "
             f"{len(trace['draft']['candidates'])} candidates · accepted: {accepted} · bonus: {bonus}")
    fig.update_layout(**base_layout(title, height, axes=False))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _no_tree(trace: dict) -> str:
    if trace["kind"] == "prefill":
        return (f"Step {trace['step']} is the prefill: one target forward over the {trace['prompt_len']}-token "
                "prompt.<br>Its first token comes from the target alone; drafting starts at the next step.")
    return f"Step {trace['step']}: vanilla decoding, one target forward per token, no draft tree."
