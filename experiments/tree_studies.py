"""What the engine's trees make of a head: where their accepted paths go, and how much of what
a tree budget allows the head wins against a perfect head and against drafts of known quality.

``tree_use`` reads the traces of a run (docs/bench/head-training.md §6: why the tree stands only
1.19x above the chain); ``ceiling`` measures τ over the sampling coins beside a perfect head's
(§11) and beside the target's early exits (§13), from ``workbench.analysis.oracle``.
``python -m experiments.head_studies trees`` prints them.
"""

from __future__ import annotations

from statistics import mean

from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.metrics import tau


def tree_use(traces: list[dict]) -> dict:
    """Where a tree's accepted paths go, from its verify steps' traces.

    The top-1 spine of a tree is its path of most likely children (rank 0 at every level): what
    a chain of the same head and that depth drafts. Per verify step: ``spine_depth`` (mean),
    ``off_spine`` (share of steps whose accepted path takes a child that is not its parent's most
    likely: a chain could not have accepted it), ``spine_end`` (share that accept the whole spine:
    a deeper chain might have gone on), ``tau`` and ``tau_spine`` (the τ of the spine alone on the
    same steps: the accepted path up to its first side branch, + the bonus)."""
    spines, off, end, got, spine_got = [], 0, 0, [], []
    for t in traces:
        if t["kind"] != "spec":
            continue
        nodes = t["tree"]["nodes"]
        spine = max(n["depth"] for n in nodes if not any(n["rank_path"]))
        ranks = nodes[t["accept"]["path"][-1]]["rank_path"]
        on = next((i for i, r in enumerate(ranks) if r), len(ranks))  # accepted levels before a side branch
        spines.append(spine)
        off += on < len(ranks)
        end += on == len(ranks) == spine
        got.append(t["accept_length"])
        spine_got.append(min(on + 1, t["accept_length"]))  # greedy: the output ends at the same token
    n = len(spines)
    if not n:
        return {"steps": 0}
    return {"steps": n, "spine_depth": mean(spines), "off_spine": off / n, "spine_end": end / n,
            "tau": mean(got), "tau_spine": mean(spine_got)}


def tree_use_line(name: str, u: dict) -> str:
    """``tree_use``'s figures for method ``name`` as a sentence."""
    if not u["steps"]:
        return f"{name}: no verify step"
    return (f"{name}: {u['steps']} verify steps; top-1 spine {u['spine_depth']:.2f} deep on average; the accepted "
            f"path left the spine in {u['off_spine']:.1%} of the steps and took all of it in {u['spine_end']:.1%}; "
            f"τ {u['tau']:.2f}, the spine alone {u['tau_spine']:.2f}")



def ceiling(wb, prompts: list[list[int]], spec: SpecConfig, max_new: int, temperature: float = 0.0,
            seed: int = 0, exits: tuple[int, ...] = ()) -> dict:
    """τ of ``spec`` on ``prompts`` beside its expectation over the coins (exact, from each step's
    tree and verify logits) and the expectation of the tree a perfect head would draft at the same
    contexts (``workbench.analysis.oracle``). Means over every verify step; ``reach``: P(the walk
    accepts a node at depth d), d = 1..num_steps. ``exits``: also the target's early exit after
    each of these numbers of layers as the draft, at the same contexts and budget, with its
    agreement on the answers (``oracle.early_exit_trees``)."""
    from workbench.analysis.expectation import step_expectation
    from workbench.analysis.oracle import early_exit_trees, perfect_head_trees

    sampling = SamplingParams(temperature=temperature, seed=seed)
    eng = wb.engine(spec, sampling, trace=True)
    eng.add_requests(prompts, max_new)
    head, points = [], []
    while not eng.done:
        for rec in eng.step_records():  # a record holds its [N, V] logits: keep only what is needed
            if rec.kind == "spec":
                head.append(step_expectation(rec, spec.num_steps))
                points.append((rec.request, rec.kv.committed_before))
    seqs = [r.prompt_ids + r.output_ids for r in eng.requests]
    perfect = perfect_head_trees(wb.target, seqs, points, spec.num_steps, spec.topk, spec.num_draft_tokens, sampling)
    steps = [a for r in eng.requests for a in r.accept_lengths]

    def summary(exp):
        return {"tau": mean(e.accept_length for e in exp),
                "reach": [mean(e.reach[d] for e in exp) for d in range(spec.num_steps)]}

    early = []
    for n in exits:
        e = early_exit_trees(wb.target, seqs, [len(r.prompt_ids) for r in eng.requests], points, n, spec.num_steps,
                             spec.topk, spec.num_draft_tokens, sampling)
        early.append({"layers": n, "agreement": e.agreement, "positions": e.positions, **summary(e.expectations)})
    return {"steps": len(steps), "tau": tau(steps) or 0.0, "head": summary(head), "perfect": summary(perfect),
            "early_exits": early}


def report_ceiling(name: str, c: dict) -> None:
    h, p = c["head"], c["perfect"]
    share = (h["tau"] - 1) / (p["tau"] - 1) if p["tau"] > 1 else float("nan")
    head_reach, perfect_reach = (" / ".join(f"{x:.2f}" for x in r["reach"]) for r in (h, p))
    print(f"| {name} | {c['steps']} | {c['tau']:.2f} | {h['tau']:.2f} | {p['tau']:.2f} | {share:.0%} "
          f"| {head_reach} | {perfect_reach} |", flush=True)


def report_early_exits(name: str, c: dict) -> None:
    """One row per early-exit draft of ``ceiling(..., exits)``, then the head's and the perfect
    head's rows for the same contexts."""
    for e in c["early_exits"]:
        reach = " / ".join(f"{x:.2f}" for x in e["reach"])
        print(f"| {name} | target cut after {e['layers']} layers | {e['agreement']:.3f} | {e['tau']:.2f} | {reach} |")
    for label, r, agree in (("the head", c["head"], "`agreement --mt-bench`"), ("perfect head", c["perfect"], "1.000")):
        print(f"| {name} | {label} | {agree} | {r['tau']:.2f} | {' / '.join(f'{x:.2f}' for x in r['reach'])} |",
              flush=True)


def ceiling_tables(wb, prompts: list[list[int]], methods: dict[str, SpecConfig], max_new: int, temperature: float,
                   seed: int, exits: tuple[int, ...], mode: str) -> None:
    """``ceiling`` of every method as a table, then, with ``exits``, the early exits' table."""
    print(f"\nτ over the coins (exact expectation from each step's tree and verify logits) and with a perfect "
          f"head (the same procedure and budget, drafting from the target's own distribution), {mode}:")
    print("| method | verify steps | τ measured | E[τ] head | E[τ] perfect head | head's share of the "
          "perfect gain | P(reach depth 1..S), head | perfect head |")
    print("|---|---|---|---|---|---|---|---|")
    results = [(name, ceiling(wb, prompts, spec, max_new, temperature, seed, exits)) for name, spec in methods.items()]
    for name, c in results:
        report_ceiling(name, c)
    if not exits:
        return
    print(f"\nDrafts of known quality at the same contexts, {mode}: the target cut after N of its "
          f"{wb.target.config.num_layers} layers drafts the tree with the same procedure and budget; "
          f"agreement: how often its most likely token is the target's over the answers' positions:")
    print("| method | draft | agreement | E[τ] | P(reach depth 1..S) |")
    print("|---|---|---|---|---|")
    for name, c in results:
        report_early_exits(name, c)
