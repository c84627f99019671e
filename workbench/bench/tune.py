"""The best EAGLE-2 tree for this machine: measure what a forward costs, then try a few trees.

On a GPU, verifying 60 tokens costs about what decoding 1 does, so big trees pay off. On a small
CPU the verify cost grows with every token (``measure_verify_cost``), and so does the draft's
(every tree level runs the head and its lm_head on ``topk`` rows). The best tree is where the
extra tokens accepted stop paying for the extra tokens verified. Steps:

1. **Costs.** ms of one target forward of N verify tokens (N = 1 is a decode step) and of one
   draft forward of ``rows`` tokens.
2. **Predict.** The project's one cost model (``workbench/cost_model.py``), measured for the
   trees' own draft source (``step_cost.step_costs``: the head's, once per run and cached) prices
   a step: the verify of ``num_draft_tokens``, the draft's extend and its later levels of ``topk``
   rows, and the step's measured overhead outside the forwards; a step emits at most
   ``num_steps + 1`` tokens. ``bound`` = the speedup over decoding if every draft were accepted:
   trees with ``bound < 1`` cannot win and are skipped (unless nothing is left).
3. **Measure.** Run each remaining tree, and plain decoding, on a few short prompts (not
   Spec-Bench's: those are for evaluation) and keep the tree with the best tokens/s.

``python -m workbench.bench tune [--dtype bf16] [--grid 8/5/4,12/5/4]`` prints the result as JSON,
with the best tree as SGLang flags, a vLLM ``speculative_config`` and EAGLE's arguments
(``workbench.engine.frameworks``), to take the setting to a serving engine.
Trees are written ``D/S/K`` = ``num_draft_tokens/num_steps/topk`` throughout the benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
from statistics import mean

from workbench.measure.cost import measure_draft_cost, measure_verify_cost
from workbench.measure.floor import compute_floor, memory_floor
from workbench.measure.step_cost import draft_of, priced_by, step_costs
from workbench.cost_model import StepCost
from workbench.engine.config import SpecConfig, parse_spec
from workbench.engine.frameworks import framework_flags
from workbench.engine.sampling import SamplingParams
from workbench.errors import ArgumentParser, reports_user_errors
from workbench.metrics import speedup, tau

VERIFY_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
DRAFT_ROWS = (1, 2, 4, 8, 10)
# Small to medium trees, D/S/K: what a 2-core CPU can afford (where a verify of 8 tokens may
# cost several decode steps, only the smallest trees can pay).
GRID = ("3/2/2", "4/2/2", "4/3/2", "6/3/2", "6/4/2", "8/4/2", "8/3/4", "8/5/4", "10/4/3", "12/4/4", "12/5/4",
        "16/5/4", "16/6/4")
TUNE_PROMPTS = (  # chat-style requests written for tuning; none comes from Spec-Bench
    "Explain in a few sentences how a refrigerator keeps food cold.",
    "Write a short friendly email inviting my team to a picnic on Saturday.",
)


def tree_from_name(text: str) -> SpecConfig:
    """``"D/S/K"`` (num_draft_tokens/num_steps/topk) -> an eagle2 SpecConfig (the method grammar's
    ``eagle2:D/S/K``, ``parse_spec``); ``tree_name``'s inverse."""
    if text.count("/") != 2 or not all(x.strip().isdigit() for x in text.split("/")):
        raise ValueError(f"a tree is written D/S/K (num_draft_tokens/num_steps/topk), got {text!r}")
    return parse_spec(f"eagle2:{text.replace(' ', '')}")


def tree_name(spec: SpecConfig) -> str:
    """The tree shape ``"D/S/K"`` of any speculative config (a chain of S is ``S+1/S/1``), as the
    tuner and the route table write trees."""
    return f"{spec.num_draft_tokens}/{spec.num_steps}/{spec.topk}"


def measure_costs(wb, prefix_len: int = 256, repeats: int = 3) -> dict:
    """What the report draws of this machine: the verify cost curve (ms against verify tokens),
    the draft cost (ms against rows), the memory floor of one decode step
    (``floor.memory_floor``) and the compute floor of a forward (``floor.compute_floor``: with the
    memory floor, the roofline of every verify size). Predictions read ``step_cost.step_costs``."""
    verify = measure_verify_cost(wb.target, VERIFY_SIZES, prefix_len, repeats, warmup=1)
    draft = measure_draft_cost(wb.target, wb.draft, rows=DRAFT_ROWS, prefix_len=prefix_len, repeats=repeats,
                               warmup=1) if wb.draft else []
    return {"prefix_len": prefix_len, "verify": verify, "draft": draft, "decode_ms": verify[0]["ms"], "read": "paired",
            "floor": memory_floor(wb.target), "compute": compute_floor(wb.target, prefix_len)}


def predict(model: StepCost, spec: SpecConfig) -> dict:
    """``model``'s parts of one step of ``spec`` and the speedup bound if every draft were
    accepted (τ = ``num_steps + 1``)."""
    best_case = model.predict(spec, spec.num_steps + 1)
    return {**best_case.parts.as_dict(), "bound": round(best_case.speedup, 3)}


def _run(wb, spec: SpecConfig, prompts: list[list[int]], max_new_tokens: int) -> dict:
    """Mean tokens/s over the prompts, tau, and measured ms per target forward (prefill included)."""
    speeds, lengths, seconds, forwards = [], [], 0.0, 0
    for ids in prompts:
        (req,), s = wb.generate([ids], spec, SamplingParams(), max_new_tokens)
        speeds.append(len(req.output_ids) / max(s, 1e-9))
        lengths.extend(req.accept_lengths if spec.speculative else [])
        seconds, forwards = seconds + s, forwards + req.target_forwards
    return {"tokens_per_s": mean(speeds), "tau": tau(lengths),
            "measured_step_ms": 1e3 * seconds / max(forwards, 1)}


def search(wb, *, grid=GRID, max_new_tokens: int = 40, max_trees: int = 5, known: dict | None = None,
           log=None) -> dict:
    """Measure the trees of ``grid`` that can win (at most ``max_trees``, best bound first) and
    plain decoding, each tree priced by its own draft source's step cost (``step_cost.step_costs``;
    ``known``: the run's step costs by source, read and filled in); returns
    {"vanilla_tokens_per_s", "trees": [...], "best", "priced_by": which measurement, by source}."""
    log = log or (lambda msg: None)
    prompts = [wb.encode(p) for p in TUNE_PROMPTS]
    specs = [tree_from_name(g) if isinstance(g, str) else g for g in grid]
    drafts = {tree_name(s): draft_of(s) for s in specs}
    models = step_costs(wb, drafts, known=known, log=log)
    predicted = [(spec, predict(models[tree_name(spec)], spec)) for spec in specs]
    hopeful = [sp for sp in predicted if sp[1]["bound"] >= 1.0] or predicted
    hopeful = sorted(hopeful, key=lambda sp: -sp[1]["bound"])[:max_trees]
    wb.generate([prompts[0]], SpecConfig("vanilla"), SamplingParams(), 8)  # warm-up
    base = _run(wb, SpecConfig("vanilla"), prompts, max_new_tokens)["tokens_per_s"]
    log(f"tune: vanilla {base:.1f} tok/s; trying {len(hopeful)} of {len(specs)} trees")
    trees = []
    for spec, pred in hopeful:
        wb.generate([prompts[0]], spec, SamplingParams(), 8)  # warm-up
        got = _run(wb, spec, prompts, max_new_tokens)
        trees.append({"tree": tree_name(spec), "num_draft_tokens": spec.num_draft_tokens, "num_steps": spec.num_steps,
                      "topk": spec.topk, **pred, "measured_step_ms": round(got["measured_step_ms"], 2),
                      "tau": round(got["tau"], 3), "tokens_per_s": round(got["tokens_per_s"], 2),
                      "predicted_speedup": round(models[tree_name(spec)].predict(spec, got["tau"]).speedup, 3),
                      "measured_speedup": round(speedup(got["tokens_per_s"], base), 3)})
        t = trees[-1]
        log(f"tune: {t['tree']:>8}  tau {t['tau']:.2f}  {t['tokens_per_s']:.1f} tok/s  x{t['measured_speedup']:.2f} "
            f"(predicted x{t['predicted_speedup']:.2f}; step {t['measured_step_ms']:.0f} ms, "
            f"predicted {t['step_ms']:.0f})")
    best = max(trees, key=lambda t: t["tokens_per_s"])
    return {"max_new_tokens": max_new_tokens, "prompts": list(TUNE_PROMPTS), "vanilla_tokens_per_s": round(base, 2),
            "skipped": [tree_name(s) for s, _ in predicted if all(tree_name(s) != t["tree"] for t in trees)],
            "trees": trees, "best": best["tree"], "priced_by": priced_by(drafts, models)}


def tree_list(text: str) -> list[SpecConfig]:
    """An argparse ``type`` for ``--grid``: a comma list of D/S/K trees."""
    try:
        trees = [tree_from_name(g) for g in text.split(",") if g.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if not trees:
        raise argparse.ArgumentTypeError("expected at least one D/S/K tree")
    return trees


def build_parser() -> ArgumentParser:
    from workbench.flags import add_model_args, positive

    p = ArgumentParser(prog="python -m workbench.bench tune", description=__doc__.split("\n\n")[0])
    add_model_args(p)
    p.set_defaults(dtype="auto")
    p.add_argument("--grid", type=tree_list, default=",".join(GRID), help="comma list of D/S/K trees to consider")
    p.add_argument("--max-trees", type=positive("--max-trees"), default=5, help="measure at most this many trees")
    p.add_argument("--max-new-tokens", type=positive("--max-new-tokens"), default=40,
                   help="new tokens per tuning prompt")
    p.add_argument("--threads", type=positive("--threads"), default=2, help="torch CPU threads")
    return p


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    import torch

    from workbench.flags import load_from_args

    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    wb = load_from_args(args)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    costs = measure_costs(wb)
    log(f"tune: verify cost {[(c['tokens'], c['ms']) for c in costs['verify']]}")
    result = search(wb, grid=args.grid, max_new_tokens=args.max_new_tokens, max_trees=args.max_trees, log=log)
    result["best_elsewhere"] = framework_flags(tree_from_name(result["best"]))
    for name, flags in result["best_elsewhere"].items():
        log(f"tune: best tree {result['best']} in {name}: {flags}")
    print(json.dumps({"costs": costs, "tune": result}, indent=1))
    return 0
