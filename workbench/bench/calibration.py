"""``python -m workbench.bench calibration``: the draft's confidence against the target's
acceptance, measured on Spec-Bench questions with step traces on.

Decodes each question's first turn with one speculative method (default EAGLE-2's paper tree
60/6/10: many nodes per step, so many bins fill), greedy, and turns the traces into the table
of ``workbench.engine.calibration`` (no timing is read: traces cost time, so this pass is
separate from the timed runs). ``--out FILE`` writes ``{"meta", "table"}`` as JSON: the app's
Calibration tab shows ``workbench/assets/eagle-smollm2-135m/calibration.json``, made by

    python -m workbench.bench calibration --out workbench/assets/eagle-smollm2-135m/calibration.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.bench import specbench
from workbench.engine.calibration import calibration_table
from workbench.metrics import tau

DEFAULT_METHOD = "eagle2:60/6/10"
DEFAULT_MAX_NEW_TOKENS = 64


def measure(wb, spec, questions: list, max_new_tokens: int, temperature: float = 0.0, log=None) -> dict:
    """{"table", "tau"} from the traces of every question's first turn under ``spec``;
    ``log(str)`` hears about each question."""
    from workbench.engine.sampling import SamplingParams

    traces: list[dict] = []
    sampling = SamplingParams(temperature=temperature, seed=0)
    for q in questions:
        ids = specbench.chat_ids(wb.tokenizer, [{"role": "user", "content": q.turns[0]}])
        wb.generate([ids], spec, sampling, max_new_tokens, trace_sink=traces.append)
        if log:
            log(f"calibration: q{q.question_id} {q.category} done ({len(traces)} step traces so far)")
    return {"table": calibration_table(traces), "tau": tau([t["accept_length"] for t in traces if t["kind"] == "spec"])}


def _portable(source: str) -> str:
    """The head's source without this machine's path to the package (the file ships)."""
    from workbench.models.heads import assets_dir

    return source.replace(str(assets_dir()) + "/", "workbench/assets/")


def main(argv: list[str] | None = None) -> int:
    from workbench.bench.methods import parse_methods
    from workbench.flags import add_model_args, positive
    from workbench.pipeline import Workbench

    p = argparse.ArgumentParser(prog="python -m workbench.bench calibration", description=__doc__.splitlines()[0])
    p.add_argument("--method", default=DEFAULT_METHOD, help=f"one speculative method (default {DEFAULT_METHOD})")
    p.add_argument("--subset", choices=specbench.SUBSETS, default="quick")
    p.add_argument("--per-category", type=positive("--per-category"))
    p.add_argument("--limit", type=positive("--limit"))
    p.add_argument("--max-new-tokens", type=positive("--max-new-tokens"), default=DEFAULT_MAX_NEW_TOKENS)
    p.add_argument("--temperature", type=positive("--temperature", float, allow_zero=True), default=0.0)
    p.add_argument("--out", help="write {meta, table} JSON here (default: print it)")
    p.add_argument("--png", metavar="DIR", help="also draw reliability.png and calibration-depth.png there "
                   "(the app's figures; needs Chromium for kaleido)")
    add_model_args(p)
    args = p.parse_args(argv)
    try:
        (method,) = parse_methods(args.method)
        if not method.speculative:
            raise ValueError(f"calibration needs a speculative method (linear:S, eagle2:D/S/K, static:D), "
                             f"got {args.method}")
        questions = specbench.select(specbench.load_questions(), args.subset, args.per_category)[: args.limit]
        wb = Workbench.load(args.target, args.draft, args.dtype, args.device, args.attention, True, args.hot_tokens, linear_order=args.linear_order)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    res = measure(wb, method.spec, questions, args.max_new_tokens, args.temperature,
                  log=lambda msg: print(msg, file=sys.stderr, flush=True))
    argv_text = " ".join(sys.argv[1:]) if argv is None else " ".join(["calibration", *argv])
    out = {"meta": {"command": f"python -m workbench.bench {argv_text}", "method": method.describe(),
                    "questions": len(questions), "subset": args.subset, "max_new_tokens": args.max_new_tokens,
                    "temperature": args.temperature, "draft": _portable(wb.draft_source), "dtype": wb.dtype_name,
                    "tau": res["tau"]},
           "table": res["table"]}
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
        s = res["table"]["summary"]
        print(f"wrote {args.out}: {s['nodes']} verified nodes over {s['steps']} steps, "
              f"P(accept | tried) {s['p_accept_given_tried']:.3f}, ECE (draft prob) {s['ece_prob']:.3f}",
              file=sys.stderr)
    else:
        print(text)
    if args.png:
        try:
            for path in write_figures(out["table"], Path(args.png)):
                print(f"wrote {path}", file=sys.stderr)
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return 0


def write_figures(table: dict, out_dir: Path) -> list[Path]:
    """The reliability diagram and the per-depth view of ``table`` as PNGs in ``out_dir``."""
    from workbench.viz.calibration import depth_figure, reliability_figure
    from workbench.viz.png import write_png

    return [write_png(reliability_figure(table), out_dir / "reliability.png"),
            write_png(depth_figure(table), out_dir / "calibration-depth.png")]
