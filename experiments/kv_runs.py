"""What does a run of slots per request buy a batch?

    python -m experiments.kv_runs [--methods vanilla,eagle2:4/3/2] [--batch 8] [--rounds 5]
                                  [--max-new-tokens 48] [--threads 2]

The CPU attention reads a request's cache as a view of the pool when its slots are one
ascending run and gathers the whole prefix at every layer otherwise (``attention/sdpa.py``,
``contiguous_run``). Requests that take slots from one shared free list interleave them, so in a
batch every request's cache was gathered; the engine now sets aside a run of slots for each
request at admission, its worst case (``SlotAllocator.reserve``), and its cache stays one run.
The other way is the shared list alone (``reserve`` declining, as where no run is free).

This decodes ``--batch`` requests together (the Spec-Bench quick prompts, one per task in turn,
repeated to fill the batch: short chat prompts beside ~700-token summarization and RAG ones)
with each method both ways, every (method, way) once a round in rotating order
(``workbench.timing.interleaved``), and prints the batch's tokens/s (every output token over the
wall, prefill included) and the decode steps' target forward ms (forward and logits, the
engine's clocks), the rounds' median and range, each ratio paired within its round, and whether
the outputs are equal (they must be: a run changes where rows live, not what they hold).
"""

from __future__ import annotations

import statistics

import torch

from workbench.errors import ArgumentParser, reports_user_errors

WAYS = ("runs", "shared list")


def decode(wb, prompts: list[list[int]], method: str, way: str, max_new_tokens: int) -> dict:
    """The batch decoded with ``method``, its slots taken ``way``: tokens/s over the wall, the
    decode steps' target forward ms a step, the share of steps whose every request read a view,
    and the outputs."""
    import time

    from workbench.engine.sampling import SamplingParams
    from workbench.measure.methods import parse_methods

    engine = wb.engine(parse_methods(method, None)[0].spec, SamplingParams())
    engine.add_requests(prompts, max_new_tokens)
    if way == "shared list":
        engine.table.allocator.reserve = lambda owner, n: False
    runs = []
    start = time.perf_counter()
    while not engine.done:
        engine.step()
        tables = [engine.table.slots(r.rid) for r in engine.running if r.rid in engine.table.tables]
        runs.append(all(t == list(range(t[0], t[0] + len(t))) for t in tables if t))
    seconds = time.perf_counter() - start
    steps = {k: v for k, v in engine.profile.to_json().items() if k != "prefill"}
    count = sum(v["steps"] for v in steps.values())
    forward = sum(v["phases_ms"].get(p, 0.0) for v in steps.values() for p in ("decode_ms", "verify_ms", "logits_ms"))
    return {"tok_s": sum(len(r.output_ids) for r in engine.requests) / seconds, "forward_ms": forward / max(count, 1),
            "runs": sum(runs) / max(len(runs), 1), "outputs": [list(r.output_ids) for r in engine.requests]}


def measure(wb, methods: list[str], prompts: list[list[int]], *, rounds: int, max_new_tokens: int) -> dict:
    """Per (method, way), one ``decode`` a round, every pair in rotating order."""
    from workbench.timing import interleaved

    seen: dict[tuple[str, str], list[dict]] = {}

    def case(method: str, way: str):
        seen.setdefault((method, way), []).append(decode(wb, prompts, method, way, max_new_tokens))
        return 0.0

    interleaved({f"{m} {w}": (lambda m=m, w=w: case(m, w)) for m in methods for w in WAYS}, rounds)
    return seen


def report(seen: dict, methods: list[str]) -> list[str]:
    """A markdown table: per method, each way's tokens/s and forward ms (median, range), runs over
    shared paired per round, the share of steps read as views, and whether the outputs agree."""
    def fig(values, digits=1):
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"

    lines = ["| method | steps read as views, runs / shared | tokens/s, runs | tokens/s, shared list | forward ms a "
             "step, runs | forward ms a step, shared list | runs / shared list, tokens/s paired per round | "
             "outputs equal |", "|---|---|---|---|---|---|---|---|"]
    for m in methods:
        a, b = seen[(m, "runs")], seen[(m, "shared list")]
        ratios = [x["tok_s"] / y["tok_s"] for x, y in zip(a, b)]
        equal = all(r["outputs"] == a[0]["outputs"] for r in a + b)
        lines.append(f"| `{m}` | {statistics.median(r['runs'] for r in a):.0%} / "
                     f"{statistics.median(r['runs'] for r in b):.0%} | {fig([r['tok_s'] for r in a])} "
                     f"| {fig([r['tok_s'] for r in b])} | {fig([r['forward_ms'] for r in a])} "
                     f"| {fig([r['forward_ms'] for r in b])} | {fig(ratios, 2)}x | {'yes' if equal else 'NO'} |")
    return lines


def build_parser() -> ArgumentParser:
    from workbench.flags import positive

    ap = ArgumentParser(prog="python -m experiments.kv_runs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="vanilla,eagle2:4/3/2",
                    help="methods as the benchmark names them, comma-separated (default: vanilla,eagle2:4/3/2)")
    ap.add_argument("--batch", type=positive("--batch"), default=8, help="requests decoded together (default: 8)")
    ap.add_argument("--rounds", type=positive("--rounds"), default=5, help="interleaved rounds (default: 5)")
    ap.add_argument("--max-new-tokens", type=positive("--max-new-tokens"), default=48,
                    help="tokens each request writes at most (default: 48)")
    ap.add_argument("--threads", type=positive("--threads"), default=2, help="torch threads (default: 2)")
    ap.add_argument("--dtype", default="fp32", help="fp32 or bf16 (default: fp32)")
    ap.add_argument("--target", help="target model directory (default: the workbench's default model)")
    ap.add_argument("--draft", help="draft head directory or source (default: the shipped head)")
    return ap


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    from workbench.cpu_choices import cpu_signature
    from workbench.errors import UserError
    from workbench.measure import provenance
    from workbench.measure.methods import parse_methods
    from workbench.measure.specbench import load_questions, spread
    from workbench.pipeline import Workbench

    args = build_parser().parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise UserError(f"--methods {args.methods!r}: give at least one method (vanilla, eagle2:4/3/2, ...)")
    for m in methods:
        parsed = parse_methods(m, None)
        if len(parsed) != 1 or parsed[0].hf:
            raise UserError(f"--methods {m}: give one engine method per name (vanilla, eagle2:4/3/2, linear:3, ...)")
    torch.set_num_threads(args.threads)
    wb = Workbench.load(args.target, args.draft, dtype=args.dtype, need_draft=any(parse_methods(m, None)[0].spec.speculative
                                                                        for m in methods))
    quick = [wb.encode(q.turns[0]) for q in spread(load_questions(), 6)]
    prompts = [quick[i % len(quick)] for i in range(args.batch)]
    seen = measure(wb, methods, prompts, rounds=args.rounds, max_new_tokens=args.max_new_tokens)
    print(f"`python -m experiments.kv_runs --methods {','.join(methods)} --batch {args.batch} --rounds {args.rounds} "
          f"--max-new-tokens {args.max_new_tokens} --threads {args.threads} --dtype {args.dtype}`: "
          f"commit {provenance.commit() or 'not recorded'}, {cpu_signature()}, torch {torch.__version__}; "
          f"{args.batch} requests together (prompt tokens {', '.join(str(len(p)) for p in prompts)}), "
          f"{args.rounds} interleaved rounds, each figure the rounds' median (lowest–highest)\n")
    print("\n".join(report(seen, methods)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
