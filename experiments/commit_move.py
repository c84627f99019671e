"""What does moving the accepted rows at commit buy?

    python -m experiments.commit_move [--methods eagle2:4/3/2,linear:3] [--questions 481,81] [--rounds 5]
                                      [--max-new-tokens 128] [--threads 2]

Commit keeps the first n + 1 slots a step wrote and copies an accepted node's K/V rows there when
it was verified further along (``Engine._kept_slots``; docs/design.md, the slot table). The other
choice keeps each accepted node in the slot it was verified in and copies nothing: a tree's kept
slots then leave holes, the next steps fill them out of order, and the CPU attention, which reads
a request's cache as a view only when its slots are one ascending run (``attention/sdpa.py``,
``contiguous_run``), gathers the whole prefix at every layer instead.

This decodes each Spec-Bench question of ``--questions`` (their first turns, as the benchmark
runs them) with each method both ways, every (question, method, way) once a round in rotating
order (``workbench.timing.interleaved``), and prints per pair the decode's tokens/s and the
steps' verify ms (forward and logits, the engine's own clocks), the rounds' median and range,
with the share of steps that moved rows and the outputs compared (they must be equal: the copy
changes where rows live, not what they hold). A chain (``linear:N``) never moves a row: its
two ways time the same work and show the rounds' noise.
"""

from __future__ import annotations

import statistics

import torch

from workbench.errors import ArgumentParser, reports_user_errors

WAYS = ("moved", "in place")


def in_place(slots: list[int], path: list[int]) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """The other choice: each accepted node keeps the slot it was verified in; nothing is copied."""
    on_path = set(path)
    return [slots[i] for i in path], [s for i, s in enumerate(slots) if i not in on_path], []


def decode(wb, prompt: list[int], method: str, way: str, max_new_tokens: int) -> dict:
    """One request decoded with ``method``, its commit ``way``: tokens/s, the verify's ms a step
    (forward and logits), the share of steps whose accepted path left the front of its slots (the
    steps whose rows the ``moved`` way copies), and the output."""
    import time

    from workbench.engine.engine import Engine
    from workbench.engine.sampling import SamplingParams
    from workbench.measure.methods import parse_methods

    engine = wb.engine(parse_methods(method, None)[0].spec, SamplingParams())
    off_front = []

    def kept(slots, path):
        off_front.append(list(path) != list(range(len(path))))
        return (in_place if way == "in place" else Engine._kept_slots)(slots, path)

    engine._kept_slots = kept
    engine.add_requests([prompt], max_new_tokens)
    start = time.perf_counter()
    while not engine.done:
        engine.step()
    seconds = time.perf_counter() - start
    (req,) = engine.requests
    (totals,) = [v for k, v in engine.profile.to_json().items() if k != "prefill"]
    phases = totals["phases_ms"]
    return {"tok_s": len(req.output_ids) / seconds,
            "verify_ms": (phases.get("verify_ms", 0.0) + phases.get("logits_ms", 0.0)) / totals["steps"],
            "off_front": sum(off_front) / max(len(off_front), 1), "output": list(req.output_ids)}


def measure(wb, methods: list[str], prompts: dict[int, list[int]], *, rounds: int, max_new_tokens: int) -> dict:
    """Per (question, method, way), one ``decode`` a round, every pair in rotating order."""
    from workbench.timing import interleaved

    seen: dict[tuple[int, str, str], list[dict]] = {}

    def case(qid: int, method: str, way: str):
        seen.setdefault((qid, method, way), []).append(decode(wb, prompts[qid], method, way, max_new_tokens))
        return 0.0

    interleaved({f"{q} {m} {w}": (lambda q=q, m=m, w=w: case(q, m, w))
                 for q in prompts for m in methods for w in WAYS}, rounds)
    return seen


def report(seen: dict, prompts: dict[int, list[int]], methods: list[str]) -> list[str]:
    """A markdown table: per question and method, each way's tokens/s and verify ms (median, range),
    moved over in place, the share of steps off the front, and whether the outputs agree."""
    def fig(values, digits=1):
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"

    lines = ["| question (prompt tokens) | method | steps off the front | tokens/s moved | tokens/s in place "
             "| verify ms moved | verify ms in place | moved / in place, paired per round | outputs equal |",
             "|---|---|---|---|---|---|---|---|---|"]
    for qid, prompt in prompts.items():
        for m in methods:
            a, b = seen[(qid, m, "moved")], seen[(qid, m, "in place")]
            ratios = [x["tok_s"] / y["tok_s"] for x, y in zip(a, b)]
            equal = all(r["output"] == a[0]["output"] for r in a + b)
            lines.append(f"| {qid} ({len(prompt)}) | `{m}` | {statistics.median(r['off_front'] for r in a):.0%} "
                         f"| {fig([r['tok_s'] for r in a])} | {fig([r['tok_s'] for r in b])} "
                         f"| {fig([r['verify_ms'] for r in a])} | {fig([r['verify_ms'] for r in b])} "
                         f"| {fig(ratios, 2)}x | {'yes' if equal else 'NO'} |")
    return lines


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m experiments.commit_move", description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="eagle2:4/3/2,linear:3",
                    help="methods as the benchmark names them, comma-separated (default: eagle2:4/3/2,linear:3)")
    ap.add_argument("--questions", default="481,81",
                    help="Spec-Bench question ids, comma-separated (default: 481,81: prompts of 660 and 53 tokens)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="tokens each decode writes (default: 128)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default: 2)")
    ap.add_argument("--dtype", default="fp32", help="fp32 or bf16 (default: fp32)")
    return ap


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    from workbench.cpu_choices import cpu_signature
    from workbench.errors import UserError
    from workbench.measure.methods import parse_methods
    from workbench.measure.specbench import load_questions
    from workbench.pipeline import Workbench

    args = build_parser().parse_args(argv)
    for flag, value in (("--rounds", args.rounds), ("--max-new-tokens", args.max_new_tokens), ("--threads", args.threads)):
        if value < 1:
            raise UserError(f"{flag} must be >= 1, got {value}")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        parsed = parse_methods(m, None)
        if len(parsed) != 1 or not parsed[0].spec.speculative:
            raise UserError(f"--methods {m}: give one speculative method per name (eagle2:4/3/2, linear:3, ...)")
    by_id = {q.question_id: q for q in load_questions()}
    try:
        ids = [int(x) for x in args.questions.split(",") if x.strip()]
    except ValueError:
        ids = []
    unknown = [i for i in ids if i not in by_id]
    if not ids or unknown:
        raise UserError(f"--questions {args.questions}: give Spec-Bench question ids, comma-separated "
                        f"(unknown: {', '.join(map(str, unknown)) or 'none given'})")
    torch.set_num_threads(args.threads)
    wb = Workbench.load(dtype=args.dtype)
    prompts = {i: wb.encode(by_id[i].turns[0]) for i in ids}
    seen = measure(wb, methods, prompts, rounds=args.rounds, max_new_tokens=args.max_new_tokens)
    print(f"`python -m experiments.commit_move --methods {','.join(methods)} --questions {args.questions} "
          f"--rounds {args.rounds} --max-new-tokens {args.max_new_tokens} --threads {args.threads} --dtype {args.dtype}`: "
          f"{cpu_signature()}, torch {torch.__version__}; {args.rounds} interleaved rounds, each figure the rounds' "
          f"median (lowest–highest)\n")
    print("\n".join(report(seen, prompts, methods)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
