"""``python -m workbench.bench calibration``: the draft's confidence against the target's
acceptance, measured on Spec-Bench questions with step traces on.

Decodes each question's first turn with one speculative method (default EAGLE-2's paper tree
60/6/10: many nodes per step, so many bins fill), greedy, and turns the traces into the table
of ``workbench.analysis.calibration`` (no timing is read: traces cost time, so this pass is
separate from the timed runs). ``--out FILE`` writes ``{"meta", "table"}`` as JSON: the app's
Calibration tab shows ``workbench/assets/eagle-smollm2-135m/calibration.json``, made by

    python -m workbench.bench calibration --out workbench/assets/eagle-smollm2-135m/calibration.json
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

from workbench.analysis.calibration import calibration_table
from workbench.measure import provenance, specbench
from workbench.errors import ArgumentParser, UserError, as_user_error, reports_user_errors
from workbench.metrics import tau
from workbench.models.chat import chat_ids

DEFAULT_METHOD = "eagle2:60/6/10"
DEFAULT_MAX_NEW_TOKENS = 64


def measure(wb, spec, *, questions: list, max_new_tokens: int, temperature: float = 0.0, log=None) -> dict:
    """{"table", "tau"} from the traces of every question's first turn under ``spec``;
    ``log(str)`` hears about each question."""
    from workbench.engine.sampling import SamplingParams

    traces: list[dict] = []
    sampling = SamplingParams(temperature=temperature, seed=0)
    for q in questions:
        ids = chat_ids(wb.tokenizer, [{"role": "user", "content": q.turns[0]}])
        wb.generate([ids], spec, sampling, max_new_tokens, trace_sink=traces.append)
        if log:
            log(f"calibration: q{q.question_id} {q.category} done ({len(traces)} step traces so far)")
    return {"table": calibration_table(traces), "tau": tau([t["accept_length"] for t in traces if t["kind"] == "spec"])}


def build_parser() -> ArgumentParser:
    from workbench.flags import add_model_args, positive

    p = ArgumentParser(prog="python -m workbench.bench calibration", description=__doc__.split("\n\n")[0])
    p.add_argument("--method", default=DEFAULT_METHOD,
                   help="one speculative method: linear:S, eagle2:D/S/K or static:D")
    specbench.add_subset_args(p)
    p.add_argument("--max-new-tokens", type=positive("--max-new-tokens"), default=DEFAULT_MAX_NEW_TOKENS,
                   help="new tokens per question")
    p.add_argument("--temperature", type=positive("--temperature", float, allow_zero=True), default=0.0,
                   help="sampling temperature; 0 = greedy")
    p.add_argument("--out", help="write {meta, table} JSON here (default: print it)")
    p.add_argument("--png", metavar="DIR", help="also draw reliability.png and calibration-depth.png there "
                   "(the app's figures; needs Chromium for kaleido; default: no figures)")
    add_model_args(p)
    return p


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    from workbench.measure.methods import parse_methods
    from workbench.flags import load_from_args

    args = build_parser().parse_args(argv)
    with as_user_error(f"--method {args.method}: "):
        methods = parse_methods(args.method)
    if len(methods) != 1 or not methods[0].speculative:
        raise UserError(f"--method {args.method}: calibration takes one speculative method (linear:S, "
                        "eagle2:D/S/K, static:D)")
    method = methods[0]
    questions = specbench.select(specbench.load_questions(), args.subset, args.per_category)[: args.limit]
    wb = load_from_args(args)
    res = measure(wb, method.spec, questions=questions, max_new_tokens=args.max_new_tokens,
                  temperature=args.temperature,
                  log=lambda msg: print(msg, file=sys.stderr, flush=True))
    argv_text = " ".join(sys.argv[1:]) if argv is None else " ".join(["calibration", *argv])
    out = {"meta": {"command": f"python -m workbench.bench {argv_text}", "method": method.describe(),
                    "questions": len(questions), "subset": args.subset, "max_new_tokens": args.max_new_tokens,
                    "temperature": args.temperature, "draft": provenance.shown(wb.draft_source), "dtype": wb.dtype_name,
                    "tau": res["tau"], "date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "commit": provenance.commit()},
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
            raise UserError(str(err)) from None
    return 0


def write_figures(table: dict, out_dir: Path) -> list[Path]:
    """The reliability diagram and the per-depth view of ``table`` as PNGs in ``out_dir``."""
    from workbench.viz.calibration import depth_figure, reliability_figure
    from workbench.viz.png import write_png

    return [write_png(reliability_figure(table), out_dir / "reliability.png"),
            write_png(depth_figure(table), out_dir / "calibration-depth.png")]
