"""Widen or deepen: the τ smaller trees would have given on the very steps of a big one.

A dynamic tree's levels do not depend on how many levels follow, nor on the verify budget: the
first S levels of an ``eagle2`` tree of ``num_steps`` levels are the levels a tree of S levels
grows (same ``topk``). The rerank then keeps the best-scored D − 1 candidates of those levels.
So, from one traced step of a big tree, a tree of budget D′ and S levels keeps the best-scored
D′ − 1 nodes of depth ≤ S, and the target's greedy continuation (``viz.best_tree``) says how far
its walk would have gone: exactly the tokens that step would have accepted (greedy, the same
context), as long as every candidate such a tree keeps was verified in the big one. When it
was not (too few verified nodes of depth ≤ S), the cell is unknown (None), not guessed.

Widening adds verify nodes at the same depth (D′ → D′ + 2, S kept); deepening adds a level at the
same budget (S → S + 1, D′ kept). ``gains`` compares the two per prompt, and
``workbench.lessons.intervals.paired`` gives the interval of their difference.
"""

from __future__ import annotations

from statistics import mean

from workbench.engine.tree import score_order
from workbench.viz.best_tree import greedy_continuation


def shape_tau(trace: dict, budget: int, depth: int) -> int | None:
    """Tokens the greedy walk of one step would have kept (the accepted drafts + the bonus) with
    the best-scored ``budget`` - 1 nodes of depth <= ``depth``; None when that tree is unknown."""
    nodes = trace["tree"]["nodes"]
    candidates = [i for i in range(1, len(nodes)) if nodes[i]["depth"] <= depth]
    eligible = [candidates[j] for j in score_order([nodes[i]["score"] for i in candidates]).tolist()]  # the rerank's order
    drafted = sum(c["level"] <= depth for c in trace["draft"]["candidates"])
    if len(eligible) < min(budget - 1, drafted):
        return None  # such a tree would keep candidates this step never verified
    keep = set(eligible[: budget - 1])
    tau = 1
    for row in greedy_continuation(trace):
        if row["status"] != "covered" or row["node"] not in keep:
            break
        tau += 1
    return tau


def shape_grid(traces: list[dict], budgets, depths) -> dict[tuple[int, int], float | None]:
    """Mean ``shape_tau`` over the speculative steps of ``traces`` per (budget, depth); None
    where any step's tree is unknown."""
    steps = [t for t in traces if t["kind"] == "spec"]
    grid = {}
    for d in budgets:
        for s in depths:
            taus = [shape_tau(t, d, s) for t in steps]
            grid[d, s] = None if not taus or None in taus else mean(taus)
    return grid


def gains(per_prompt: dict[str, list[dict]], base: tuple[int, int], widen: tuple[int, int],
          deepen: tuple[int, int]) -> dict[str, dict[str, float]]:
    """Per prompt: the mean τ of the ``base`` (budget, depth) and the mean gain of widening and of
    deepening from it, over that prompt's steps where all three trees are known (``steps``; the
    others are counted in ``unknown``). A prompt with no such step is left out."""
    out = {}
    for prompt, traces in per_prompt.items():
        steps = [t for t in traces if t["kind"] == "spec"]
        cells = [tuple(shape_tau(t, *k) for k in (base, widen, deepen)) for t in steps]
        known = [c for c in cells if None not in c]
        if not known:
            continue
        b, w, d = (mean(c[i] for c in known) for i in range(3))
        out[prompt] = {"base": b, "widen": w - b, "deepen": d - b, "steps": len(known),
                       "unknown": len(cells) - len(known)}
    return out


def grid_figure(grids: dict[str, dict[tuple[int, int], float | None]], budgets, depths, title: str,
                height: int = 380):
    """One heatmap per group of prompts: mean τ per (budget D′, levels S), the value in each
    cell (empty where unknown: some step's tree would keep a node the big tree never verified),
    one colour scale for all panels."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from workbench.viz.style import base_layout

    values = [v for g in grids.values() for v in g.values() if v is not None]
    fig = make_subplots(rows=1, cols=len(grids), subplot_titles=list(grids), horizontal_spacing=0.08)
    for col, grid in enumerate(grids.values(), start=1):
        z = [[grid[d, s] for d in budgets] for s in depths]
        fig.add_trace(go.Heatmap(
            x=[str(d) for d in budgets], y=[str(s) for s in depths], z=z, zmin=min(values), zmax=max(values),
            colorscale="Blues", showscale=col == len(grids), colorbar=dict(title="τ", thickness=12),
            text=[["" if v is None else f"{v:.2f}" for v in row] for row in z], texttemplate="%{text}",
            hovertemplate="D′ %{x}, S %{y}: τ %{z:.2f}<extra></extra>"), row=1, col=col)
    fig.update_annotations(font_size=12)
    fig.update_layout(**base_layout(title, height, axes=False))
    fig.update_xaxes(title="D′: verify budget (num_draft_tokens)", type="category")
    fig.update_yaxes(type="category")  # every panel: S is a level count, not a continuous axis
    fig.update_yaxes(title="S: levels (num_steps)", col=1)
    return fig
