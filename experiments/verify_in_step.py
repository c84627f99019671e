"""Does a verify cost more inside an engine step than the same forward timed alone?

    python -m experiments.verify_in_step [--settings 3/2/4,5/4/8] [--prefix 128] [--rounds 30] [--threads 2]

The cost model prices a speculative step's verify from a curve of target forwards timed alone,
one after another (``workbench/measure/cost.py``). Inside a step the verify follows the draft's
forwards and the Python that builds the tree, so it could run slower: thread wake-ups, caches
the draft filled, a tree mask where the curve has a chain. This times both at one moment. For
each setting ``num_steps/topk/num_draft_tokens`` (default: the small trees a CPU runs), an
engine decodes one request of ``--prefix`` random tokens, and every round takes, in rotating
order (``workbench.timing.interleaved``), one engine step per setting (its ``verify`` and
``logits`` phases, from the engine's own clocks) and one forward of as many tokens as that
setting verifies, logits included, after a committed prefix of the same length, alone. Each
figure is the median over the rounds with its quartiles; the engine's context grows by the
tokens it emits (a few per round), the forward's does not.
"""

from __future__ import annotations

import statistics

import torch

from workbench.errors import ArgumentParser, reports_user_errors


def measure(wb, settings: list[tuple[int, int, int]], *, prefix: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per setting (``eagle2:D/S/K``), the engine's verify + logits ms and the lone forward's, one of each a round."""
    from workbench.engine.config import SpecConfig
    from workbench.measure.cost import chain_batch, prefilled
    from workbench.timing import interleaved

    target = wb.target
    vocab = target.config.vocab_size
    pool = prefilled(target, target.new_kv_pool, vocab=vocab, prefix_len=prefix, spare=max(d for _, _, d in settings) + 1,
                     device=target.lm_head.weight.device)
    prompt = torch.randint(0, vocab, (prefix,), generator=torch.Generator().manual_seed(1)).tolist()
    cases = {}
    for steps, topk, tokens in settings:
        spec = SpecConfig.from_knobs("eagle2", num_steps=steps, topk=topk, num_draft_tokens=tokens)
        engine = wb.engine(spec, trace=True)  # each step's record carries its phase times
        engine.stop_ids = set()  # a random prompt may sample a stop token: keep decoding
        engine.add_requests([prompt], 2 + (rounds + 4) * (steps + 1))
        engine.step()  # the prefill
        engine.step()  # the draft's catch-up over the prompt
        cases[f"eagle2:{tokens}/{steps}/{topk} in a step"] = lambda e=engine: _verify_ms(e)
        cases[f"eagle2:{tokens}/{steps}/{topk} alone"] = lambda n=tokens: _alone_ms(target, pool, n, chain_batch)
    return interleaved(cases, rounds, warmup=1)


def _verify_ms(engine) -> float:
    """One engine step; its verify and logits phases, ms."""
    (record,) = engine.step_records()
    return record.timing_ms["verify_ms"] + record.timing_ms.get("logits_ms", 0.0)


def _alone_ms(target, pool, n: int, chain_batch) -> float:
    """One forward of ``n`` tokens after the pool's prefix, logits included, ms."""
    import time

    slots = pool.alloc.alloc(n)
    try:
        batch = chain_batch(n, pool, slots)
        t0 = time.perf_counter()
        target.logits(target(batch, pool.kv))
        return (time.perf_counter() - t0) * 1e3
    finally:
        pool.alloc.free(slots)


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m experiments.verify_in_step", description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default="3/2/4,5/4/8",
                    help="num_steps/topk/num_draft_tokens of each setting, comma-separated (default: 3/2/4,5/4/8)")
    ap.add_argument("--prefix", type=int, default=128, help="prompt tokens, and the lone forward's prefix (default: 128)")
    ap.add_argument("--rounds", type=int, default=30, help="interleaved rounds (default: 30)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default: 2)")
    ap.add_argument("--dtype", default="fp32", help="fp32 or bf16 (default: fp32)")
    return ap


def _settings(text: str) -> list[tuple[int, int, int]]:
    from workbench.errors import UserError

    try:
        out = [tuple(int(x) for x in part.split("/")) for part in text.split(",") if part.strip()]
    except ValueError:
        out = []
    if not out or any(len(s) != 3 or min(s) < 1 for s in out):
        raise UserError(f"--settings {text}: give num_steps/topk/num_draft_tokens, comma-separated (e.g. 3/2/4,5/4/8)")
    return out


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    from workbench.cpu_choices import cpu_signature
    from workbench.errors import UserError
    from workbench.pipeline import Workbench

    args = build_parser().parse_args(argv)
    settings = _settings(args.settings)
    for flag, value in (("--prefix", args.prefix), ("--rounds", args.rounds), ("--threads", args.threads)):
        if value < 1:
            raise UserError(f"{flag} must be >= 1, got {value}")
    torch.set_num_threads(args.threads)
    wb = Workbench.load(dtype=args.dtype)
    results = measure(wb, settings, prefix=args.prefix, rounds=args.rounds)
    print(f"{cpu_signature()}, torch {torch.__version__}, {args.threads} threads, {args.dtype}, prefix {args.prefix}, "
          f"{args.rounds} interleaved rounds; ms, median (quartiles)")
    for name, values in results.items():
        q1, q2, q3 = _quartiles(values)
        print(f"  {name:32s} {q2:6.1f} ({q1:.1f}–{q3:.1f})")
    for steps, topk, tokens in settings:
        label = f"eagle2:{tokens}/{steps}/{topk}"
        ratio = statistics.median(results[f"{label} in a step"]) / statistics.median(results[f"{label} alone"])
        print(f"  {label}: in a step / alone = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
