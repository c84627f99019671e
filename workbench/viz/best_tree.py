"""What the best tree would have been, for one step, from what the step already has.

The verify forward gave the target's next-token distribution after every verified node
(``verify.top``), so the target's own **greedy continuation** can be followed down the tree: from
the root, the target's argmax after it; if that token is a child in the tree the tree
**covered** it, and the argmax after that node is known too; the first token that is not a
child is where the continuation **left** the tree. Beyond it nothing is known: the target never
ran on a token that was not drafted (so a tree that had covered it could only be judged by
another forward). The left token is either a candidate **dropped at the rerank** (drafted, never
verified: a budget of ``needed_D`` would have kept it) or **not drafted** at all.

Both replay the engine: the greedy walk (``accept.greedy_walk``) with the target's argmax after
each node, and, for τ per budget, the rerank (``tree.rerank``) of this tree's nodes to each
D' <= D, built (``tree.build_tree``) and walked again with the same argmaxes. At temperature 0
that is exactly the τ a run with that budget would have had on this step (given the same tree
growth); when sampling it is the greedy reference, not the sampled walk.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from workbench.engine.accept import greedy_walk
from workbench.engine.tree import Candidates, budget_keeping, build_tree, rerank
from workbench.viz.html import note, table
from workbench.viz.layout import Line, tree_layout
from workbench.viz.style import NODE, OKABE_ITO, base_layout, empty_figure
from workbench.viz.tokens import num, plotly_text, show, show_html
from workbench.viz.tree import (MARGIN, WIDTH, collapse_dropped, cutoff, draw_tree, frame, no_draft_note, node_lines,
                                rerank_line, tree_graph, tree_kind)


def greedy_continuation(trace: dict) -> list[dict]:
    """The target's argmax continuation over the tree: one row per token, ``status`` "covered"
    (node, prob, score) until the one that left the tree: "dropped" (candidate, score,
    needed_D) or "not drafted"."""
    nodes, drafts = trace["tree"]["nodes"], _tree_drafts(trace)
    path = _argmax_walk(trace, drafts, list(range(len(drafts.tokens))))
    rows = []
    for node, child in zip(path, path[1:]):
        n = nodes[child]
        rows.append({**_argmax_row(trace, node), "status": "covered", "node": child, "prob": n["prob"],
                     "score": n["score"], "rank_path": n.get("rank_path")})
    row = _argmax_row(trace, path[-1])
    kept = {n["candidate"] for n in nodes[1:]}
    cands, parent_cand = trace["draft"]["candidates"], nodes[path[-1]]["candidate"]
    dropped = next((c for c in cands if c["parent"] == parent_cand and c["token"] == row["token"]
                    and c["index"] not in kept), None)
    if dropped is None:
        return rows + [{**row, "status": "not drafted"}]
    needed = budget_keeping([c["score"] for c in cands], dropped["index"])
    return rows + [{**row, "status": "dropped", "candidate": dropped["index"], "prob": dropped["prob"],
                    "score": dropped["score"], "needed_D": needed}]


def budget_taus(trace: dict) -> list[dict]:
    """[{D, tau}] for D = 2..this tree's size: the greedy walk on the nodes of this tree that the
    rerank keeps at budget D."""
    drafts = _tree_drafts(trace)
    return [{"D": d, "tau": len(_argmax_walk(trace, drafts, rerank(drafts, d)[0]))}
            for d in range(2, len(drafts.tokens) + 2)]


def _tree_drafts(trace: dict) -> Candidates:
    """The drafts of the step's tree as candidates, node i + 1 as candidate i (the tree holds them
    in flat order, so parents still come first), for the engine's rerank and build to rerun on."""
    nodes = trace["tree"]["nodes"][1:]
    return Candidates(tokens=[n["token"] for n in nodes], probs=[n["prob"] for n in nodes],
                      scores=[n["score"] for n in nodes], parents=[n["parent"] - 1 for n in nodes],
                      depths=[n["depth"] for n in nodes], ranks=[-1] * len(nodes))


def _argmax_walk(trace: dict, drafts: Candidates, kept: list[int]) -> list[int]:
    """The engine's greedy walk on the target's argmax after each node, over the tree that
    ``build_tree`` makes of the ``kept`` drafts (``_tree_drafts`` indices); returns its path as
    node indices of the step's tree."""
    top = trace["verify"]["top"]
    tree = build_tree(trace["tree"]["nodes"][0]["token"], drafts, kept, prefix_len=0)  # positions unread
    node_of = [0] + [k + 1 for k in kept]  # this tree's node -> the step's
    walk = greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling,
                       [top[n][0]["token"] for n in node_of])
    return [node_of[i] for i in walk.path]


def _argmax_row(trace: dict, node: int) -> dict:
    """The target's argmax after ``node``: the continuation's next token."""
    want = trace["verify"]["top"][node][0]
    return {"depth": trace["tree"]["nodes"][node]["depth"] + 1, "token": want["token"], "text": want["text"],
            "target_prob": want["prob"], "after_node": node}


def best_tree_figure(trace: dict, height: int | None = None, width: int = WIDTH) -> go.Figure:
    """The step's tree (compact labels) with the target's greedy continuation drawn on it: a thick
    line along the edges through the covered nodes, and the token where it left the tree,
    labelled with why (not drafted, or dropped at rerank and from which budget it is kept).
    When that token is the bonus (always, at temperature 0) the bonus mark carries it. Both are
    drawn under the tree's nodes, so the band and the ring never cover a node's mark."""
    if trace["kind"] != "spec":
        return empty_figure("The greedy continuation is drawn on the tree of a speculative step.", 220)
    rows = greedy_continuation(trace)
    left = rows[-1]
    g = collapse_dropped(tree_graph(trace))
    key = _add_left(g, trace, left)
    lines = {k: node_lines(a, compact=True) for k, a in g.nodes(data=True)}
    why = "not drafted" if left["status"] == "not drafted" else f"dropped at rerank, kept from D = {left['needed_D']}"
    lines[key] = [lines[key][0], Line("left the tree", 10)]
    lay = tree_layout(g, 0, lines, width - 2 * MARGIN)
    covered = [0] + [r["node"] for r in rows if r["status"] == "covered"]
    fig = draw_tree(g, lay, trace["accept"]["path"])
    xs, ys = [], []
    for u, v in zip(covered, covered[1:] + [key]):
        xs += [x for x, _ in lay.edges[u, v]] + [None]
        ys += [y for _, y in lay.edges[u, v]] + [None]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="target's greedy continuation",
                             line=dict(color=OKABE_ITO["reddish_purple"], width=7), opacity=0.45,
                             hoverinfo="skip", meta="continuation"))
    ring = dict(symbol="circle-open", size=28) if key == "bonus" else dict(symbol="hexagram-open", size=20)
    fig.add_trace(go.Scatter(  # around the bonus star a ring, not a second star printed over it
        x=[lay.xy[key][0]], y=[lay.xy[key][1]], mode="markers", name=f"left the tree ({left['status']})",
        meta="left", marker=dict(**ring, color=OKABE_ITO["reddish_purple"], line=dict(width=2)),
        customdata=[left["status"]], hoverinfo="text",
        hovertext=[f"the target's argmax after node {left['after_node']}; beyond it: unknown"]))
    fig.data = fig.data[-2:] + fig.data[:-2]  # under the nodes: the band and the ring never hide the bonus star
    n, width = len(covered) - 1, max(width, round(lay.width) + 2 * MARGIN)
    frame(fig, f"Step {trace['step']}: the tree covered {n} token{'s' * (n != 1)} of the target's greedy "
               f"continuation; it left at “{plotly_text(show(left['text']))}” ({why}) · {_kept(trace)}",
          width=width, plot_height=lay.height, legend=[t.name for t in fig.data if t.meta], min_height=height)
    return fig


def _kept(trace: dict) -> str:
    """The rerank in a few words, for a title that holds two lines: kept of drafted, and the cut."""
    c, n = len(trace["draft"]["candidates"]), len(trace["tree"]["nodes"])
    dynamic = c and tree_kind(trace) == "dynamic"  # a static shape or a chain has no rerank to tell
    return f"kept {n - 1} of {c} candidates (s ≥ {num(cutoff(trace))})" if dynamic else rerank_line(trace)


def _add_left(g, trace: dict, left: dict):
    """The key of the token where the continuation left the tree, added to ``g`` if it is not
    the bonus already; a left token dropped at rerank leaves its parent's "+n dropped" fold."""
    bonus = trace["accept"]["bonus"]
    if bonus["after_node"] == left["after_node"] and bonus["token"] == left["token"]:
        key = "bonus"
    else:
        key = "left"
        g.add_node(key, status="left", text=left["text"], prob=None, score=None, node=None, candidate=None,
                   depth=g.nodes[left["after_node"]]["depth"] + 1, position=None, note="")
        g.add_edge(left["after_node"], key)
    fold = f"+{left['after_node']}"
    if left["status"] == "dropped" and fold in g:
        a = g.nodes[fold]
        a["members"] = [m for m in a["members"] if m[0] != f"c{left['candidate']}"]
        a["count"] = len(a["members"])
        if not a["members"]:
            g.remove_node(fold)
    return key


def budget_figure(trace: dict, height: int = 280) -> go.Figure:
    """τ this step would have had with each smaller budget (best-scored prefix of the tree)."""
    if trace["kind"] != "spec":
        return empty_figure("No tree at this step.", 200)
    if len(trace["tree"]["nodes"]) == 1:
        return empty_figure(f"Step {trace['step']}: {no_draft_note(trace)}; no smaller budget to try.", 200)
    taus = budget_taus(trace)
    fig = go.Figure(go.Bar(x=[t["D"] for t in taus], y=[t["tau"] for t in taus], name="τ",
                           marker_color=NODE["accepted"].colour,
                           hovertemplate="num_draft_tokens %{x}: τ %{y}<extra></extra>"))
    fig.update_layout(**base_layout("τ on this step with the best-scored D − 1 nodes of its tree", height))
    fig.update_xaxes(title="num_draft_tokens D (incl. the root)", dtick=max(1, len(taus) // 12))
    fig.update_yaxes(title="τ", rangemode="tozero", dtick=1)
    return fig


def continuation_html(trace: dict) -> str:
    """The continuation token by token, and the smallest budget reaching this step's best τ."""
    if trace["kind"] != "spec":
        return ""
    rows, cells, attrs = greedy_continuation(trace), [], []
    for r in rows:
        where = {"covered": f"node {r.get('node')}, p {r.get('prob', 0):.3f}, s {r.get('score', 0):.4f}",
                 "dropped": f"candidate {r.get('candidate')} dropped at rerank (s {r.get('score', 0):.4f}); "
                            f"kept from D = {r.get('needed_D')}",
                 "not drafted": "not among the draft's candidates"}[r["status"]]
        cells.append([str(r["depth"]), f"<code>{show_html(r['text'])}</code>", f"{r['target_prob']:.3f}",
                      r["status"], html.escape(where)])
        attrs.append({"depth": r["depth"], "status": r["status"]})
    cells.append([str(rows[-1]["depth"] + 1) + "…", "?", "–", "unknown",
                  "the target never ran after a token that was not verified"])
    attrs.append({"depth": rows[-1]["depth"] + 1, "status": "unknown"})
    out = table(["depth", "target's argmax", "target p", "tree", "where"], cells, attrs, name="continuation")
    taus = budget_taus(trace)
    if not taus:  # the root alone: nothing was drafted
        return out + note(f"This step had no draft tree ({no_draft_note(trace)}): τ = 1.")
    best = max(t["tau"] for t in taus)
    smallest = min(t["D"] for t in taus if t["tau"] == best)
    return out + note(f"This tree gave τ = {best}; the best-scored {smallest - 1} draft(s) (num_draft_tokens = "
                      f"{smallest}) would have given the same. A tree covering the whole continuation would reach "
                      f"τ = D, but past depth {rows[-1]['depth']} the continuation is unknown.")
