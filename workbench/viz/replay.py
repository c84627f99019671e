"""The draft tree of one step replayed on the tree itself: its growth level by level (the
candidates each draft forward proposed, and the frontier the next one expands), the rerank's cut,
then the accept walk move by move; the last stage is the step's whole tree (``tree.tree_figure``).

Every stage is drawn on the final tree's layout, so a node never moves between stages: only what
is shown and how it is marked changes. All of it comes from the trace: the candidates' ``level``,
``draft.levels`` (each forward's frontier), the tree the rerank kept and ``accept.moves``. So a
``frontier`` stop (the node was left out of its level's frontier) and a ``budget`` stop (the rerank
dropped the target's token) are seen where they happen, not only named.

Stages (``replay_stages``): ``("grow", d)`` for each depth d of the candidates, ``("rerank", 0)``,
``("walk", m)`` after the first m moves of the walk (``walk.walk_moves``, the last one the stop).
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx
import plotly.graph_objects as go

from workbench.viz.layout import TreeLayout
from workbench.viz.tokens import plotly_text, show
from workbench.viz.tree import (WIDTH, collapse_dropped, draw_tree, frame, layout_tree, rerank_line, tree_figure,
                                tree_graph, tree_kind)
from workbench.viz.walk import walk_moves

RING = "#0072B2"  # blue (Okabe-Ito): the frontier, and where the walk stands


def replay_stages(trace: dict) -> list[tuple[str, int]]:
    """The replay's stages of a spec step, in order (none for another step, or a step that
    drafted nothing); the last, ``("walk", len(moves))``, is the whole tree."""
    if trace["kind"] != "spec" or not trace["draft"]["candidates"]:
        return []
    depths = sorted({c["level"] for c in trace["draft"]["candidates"]})
    return ([("grow", d) for d in depths] + [("rerank", 0)]
            + [("walk", m) for m in range(len(walk_moves(trace)) + 1)])


def _frontier_keys(trace: dict, g: nx.DiGraph, depth: int) -> tuple[list, int]:
    """(keys drawn, of the candidates the next forward expanded from ``depth``; how many there
    were): kept nodes by their key, dropped ones by their parent's fold."""
    level = next((lv for lv in trace["draft"]["levels"] if lv["level"] == depth), None)
    if depth == 0:
        return [0], 1
    if level is None:
        return [], 0
    node_of = {n["candidate"]: n["node"] for n in trace["tree"]["nodes"][1:]}
    fold_of = {m: key for key, a in g.nodes(data=True) if a["status"] == "dropped" for m, _, _ in a["members"]}
    keys = [node_of[c] if c in node_of else fold_of.get(f"c{c}") for c in level["frontier"]]
    return list(dict.fromkeys(k for k in keys if k is not None)), len(level["frontier"])


def _subtree(g: nx.DiGraph, keep, status) -> nx.DiGraph:
    """``g`` cut to the nodes ``keep(key, attrs)`` accepts, each with ``status(key, attrs)``."""
    out = nx.DiGraph()
    for k, a in g.nodes(data=True):
        if keep(k, a):
            out.add_node(k, **dict(a, status=status(k, a)))
    out.add_edges_from((u, v) for u, v in g.edges if u in out and v in out)
    return out


def _shown(lay: TreeLayout, g: nx.DiGraph, folds: dict) -> TreeLayout:
    """``lay`` with only the labels of ``g``'s nodes, a fold's count as ``folds`` says."""
    lines = {k: lay.lines[k] for k in g}
    for k, n in folds.items():
        lines[k] = [replace(lay.lines[k][0], text=f"+{n} dropped", short=f"+{n}")]
    return replace(lay, boxes={k: b for k, b in lay.boxes.items() if k in g}, lines=lines)


def _ring(lay: TreeLayout, keys: list, name: str) -> go.Scatter:
    return go.Scatter(x=[lay.xy[k][0] for k in keys], y=[lay.xy[k][1] for k in keys], mode="markers", name=name,
                      meta="ring", hoverinfo="skip",
                      marker=dict(symbol="circle-open", size=24, color=RING, line=dict(width=3, color=RING)))


def replay_figure(trace: dict, k: int, width: int = WIDTH) -> go.Figure:
    """Stage ``k`` (0-based, clamped) of ``replay_stages``: the tree as it stood then, on the whole
    tree's layout; the last stage is ``tree_figure``."""
    stages = replay_stages(trace)
    if not stages:
        return tree_figure(trace)
    kind, n = stages[max(0, min(int(k), len(stages) - 1))]
    if kind == "walk" and n == len(walk_moves(trace)):
        return tree_figure(trace)
    full = tree_graph(trace)
    g = collapse_dropped(full)
    lay = layout_tree(g, False, width)
    level = {k: a["depth"] for k, a in full.nodes(data=True)}
    if kind == "grow":
        part, folds, rings, title = _grown(trace, g, level, n)
    elif kind == "rerank":
        part = _subtree(g, lambda k, a: k != "bonus",
                        lambda k, a: a["status"] if a["status"] in ("root", "dropped") else "unreached")
        folds, rings = {}, []
        title = f"Step {trace['step']}, the rerank: {rerank_line(trace)}; ▽ dropped, never verified"
    else:
        part, rings, title = _walked(trace, g, n)
        folds = {}
    fig = draw_tree(part, _shown(lay, part, folds), [0])
    for t in fig.data:  # before the walk, a kept node is only proposed: say so, not "not reached"
        if t.meta == "unreached" and kind != "walk":
            t.name = "proposed (kept)" if kind == "rerank" else "proposed"
        if t.meta == "dropped" and kind == "grow":
            t.name = "+n proposed, dropped later at the rerank"
    for keys, name in rings:
        if keys:
            fig.add_trace(_ring(lay, keys, name))
    frame(fig, title, width=max(width, round(lay.width) + 20), plot_height=lay.height,
          legend=[t.name for t in fig.data if t.meta])
    return fig


def _grown(trace: dict, g: nx.DiGraph, level: dict, depth: int):
    """The tree after the draft forward that proposed level ``depth``: (graph, fold counts, rings,
    title)."""
    folds = {}
    for key, a in g.nodes(data=True):
        if a["status"] == "dropped":
            n = sum(1 for m, _, _ in a["members"] if level[m] <= depth)
            if n:
                folds[key] = n
    part = _subtree(g, lambda k, a: k != "bonus" and (k in folds or a["status"] != "dropped" and a["depth"] <= depth),
                    lambda k, a: "root" if k == 0 else "dropped" if a["status"] == "dropped" else "unreached")
    proposed = sum(1 for c in trace["draft"]["candidates"] if c["level"] == depth)
    keys, expanded = _frontier_keys(trace, g, depth)
    below = ("the next forward expands them" if expanded else
             "the last level: nothing is drafted below it" if tree_kind(trace) != "static" else "")
    frontier = (f"; the frontier, the {expanded} best path score{'s' * (expanded != 1)} of the level, ringed (a ring "
                f"on a fold: inside it), {below}" if expanded else f"; {below}" if below else "")
    title = (f"Step {trace['step']}, growth: level {depth}: the draft proposed {proposed} candidate"
             f"{'s' * (proposed != 1)}{frontier}")
    return part, folds, [(keys, "frontier: expanded next")], title


def _walked(trace: dict, g: nx.DiGraph, m: int):
    """The verified tree after the walk's first ``m`` moves: (graph, rings, title)."""
    moves = walk_moves(trace)[:m]
    tried = {mv["child"]: mv["match"] for mv in moves if mv["kind"] == "try"}
    part = _subtree(g, lambda k, a: k != "bonus" and a["status"] != "dropped",
                    lambda k, a: "root" if k == 0 else ("accepted" if tried[k] else "missed") if k in tried
                    else "unreached")
    if not moves:
        return part, [([0], "the walk starts at the root")], f"Step {trace['step']}, the walk: it starts at the root"
    last = moves[-1]
    verdict = "match: accepted, the walk descends" if last["match"] else "miss"
    title = (f"Step {trace['step']}, the walk, move {m}: at {plotly_text(show(last['at_text']))} it reads "
             f"{last['pointer']} and tries {plotly_text(show(last['text']))}: {verdict}")
    return part, [([last["child"]], "tried at this move")], title
