"""Static against dynamic trees at the same verify budget: our version of EAGLE-2's ablation.

For every ``static:D`` method of a run, the ``eagle2`` method with the same ``num_draft_tokens``
(the first one listed) is its partner: both draft from the same head and verify D tokens per
step; only where the budget goes differs (a shape fixed in advance against the best path scores
of this step). Per budget and per Spec-Bench task: τ and tokens/s of each, and the ratios
dynamic / static. Plain Python over the suite's records (``metrics.py``); the command that runs
the ablation: docs/benchmarks.md, "Static against dynamic trees".
"""

from __future__ import annotations

from statistics import median

from workbench.measure import metrics
from workbench.metrics import speedup
from workbench.viz.tokens import or_dash


def pairs(methods) -> list[tuple]:
    """[(D, static method, eagle2 method)] for every static method with an eagle2 partner."""
    out = []
    for m in methods:
        if m.spec is not None and m.spec.method == "static":
            partner = next((o for o in methods if o.spec is not None and o.spec.method == "eagle2"
                            and o.spec.num_draft_tokens == m.spec.num_draft_tokens), None)
            if partner is not None:
                out.append((m.spec.num_draft_tokens, m, partner))
    return out


def _cell(static: list[list[dict]], dynamic: list[list[dict]]) -> dict:
    """τ from the first round's records (greedy: the same every round); tokens/s the median of
    the rounds', the ratio paired within each round."""
    ts, td = metrics.tau(metrics.accept_lengths(static[0])), metrics.tau(metrics.accept_lengths(dynamic[0]))
    ss, sd = median(metrics.speed(r) for r in static), median(metrics.speed(r) for r in dynamic)
    ratios = [speedup(metrics.speed(b), metrics.speed(a)) for a, b in zip(static, dynamic) if metrics.speed(a)]
    return {"questions": len(static[0]), "tau_static": ts, "tau_dynamic": td,
            "tau_ratio": td / ts if ts and td else None,
            "tokens_per_s_static": ss, "tokens_per_s_dynamic": sd,
            "speed_ratio": median(ratios) if ratios else None,
            **({"speed_ratio_range": [min(ratios), max(ratios)]} if len(ratios) > 1 else {})}


def compare(methods, records: dict, by_round: dict | None = None) -> list[dict]:
    """One row per budget and task ("all" first): τ and tokens/s of static and dynamic, ratios.
    ``by_round``: every round's records by method (``suite.run_all``), else ``records`` is the
    one round."""
    by_round = by_round or {name: [recs] for name, recs in records.items()}
    rows = []
    for d, s, e in pairs(methods):
        srounds, drounds = by_round[s.name], by_round[e.name]
        rows.append({"D": d, "task": "all", "static": s.name, "dynamic": e.name, **_cell(srounds, drounds)})
        for task in sorted(metrics.by_task(srounds[0])):
            if task in metrics.by_task(drounds[0]):
                rows.append({"D": d, "task": task, "static": s.name, "dynamic": e.name,
                             **_cell([metrics.by_task(r)[task] for r in srounds],
                                     [metrics.by_task(r)[task] for r in drounds])})
    return rows


def _rounds(row: dict) -> str:
    """`` (0.92–0.99 over the rounds, slower in every round)``: the speed ratio's range over the
    rounds, each round's pair compared within it, and its side of 1 where every round agrees; ""
    for a run of one round."""
    if "speed_ratio_range" not in row:
        return ""
    lo, hi = row["speed_ratio_range"]
    side = ", the dynamic tree slower in every round" if hi < 1 else \
        ", the dynamic tree faster in every round" if lo > 1 else ", on both sides of 1"
    return f" ({lo:.2f}–{hi:.2f} over the rounds, each round's pair within it{side})"


def verdict(rows: list[dict]) -> str:
    """A sentence computed from the rows: where dynamic beats static, on τ and on tokens/s."""
    if not rows:
        return "No static method with an eagle2 partner at the same num_draft_tokens was run."
    overall = [r for r in rows if r["task"] == "all"]
    cells = [r for r in rows if r["task"] != "all"]
    tau_wins = [r for r in cells if (r["tau_ratio"] or 0) > 1]
    speed_wins = [r for r in cells if (r["speed_ratio"] or 0) > 1]
    budgets = ", ".join(f"D={r['D']}: τ ×{r['tau_ratio']:.2f}, tokens/s ×{r['speed_ratio']:.2f}{_rounds(r)}"
                        for r in overall if r["tau_ratio"] is not None and r["speed_ratio"] is not None)
    lose = sorted({f"{r['task']} at D={r['D']}" for r in cells if (r["tau_ratio"] or 0) <= 1})
    return (f"Dynamic over static (all tasks): {budgets}. Dynamic has the higher τ in {len(tau_wins)} of "
            f"{len(cells)} (budget, task) cells and the higher tokens/s in {len(speed_wins)}"
            + (f"; not on τ: {', '.join(lose)}." if lose else "."))


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "(no static:D method with an eagle2 partner at the same D was run)"
    out = ["| D | task | static τ | dynamic τ | τ ratio | static tok/s | dynamic tok/s | speed ratio |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        task = f"**{r['task']}**" if r["task"] == "all" else r["task"]
        out.append(f"| {r['D']} | {task} | {or_dash(r['tau_static'])} | {or_dash(r['tau_dynamic'])} | "
                   f"{or_dash(r['tau_ratio'])}x | "
                   f"{or_dash(r['tokens_per_s_static'], '.1f')} | {or_dash(r['tokens_per_s_dynamic'], '.1f')} | "
                   f"{or_dash(r['speed_ratio'])}x |")
    return "\n".join(out + ["", verdict(rows)])
