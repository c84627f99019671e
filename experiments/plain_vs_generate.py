"""Plain decoding speed: our ``vanilla`` against transformers ``generate``, same prompts, each
dtype, same machine: each decoded as ``run`` decodes it (``suite.Runner``, ``hf_baselines``).

    python -m experiments.plain_vs_generate [--prompts 8] [--max-new-tokens 64] [--dtypes fp32,bf16] [--rounds 3]

Every implementation and dtype takes a turn in each round (``timing.interleaved``, the first
rotating), so a slow spell of the machine lands on all of them; each figure is the rounds'
median with its range, and a ratio is taken within each round before its median. Prints a
Markdown report (tokens/s = generated tokens over wall time, prefill included, one prompt at a
time, after one warm-up prompt each) and whether the greedy outputs are equal.
"""

from __future__ import annotations

import argparse

import torch

from workbench.errors import ArgumentParser, reports_user_errors
from workbench.flags import positive
from workbench.timing import interleaved, spread


def spec_bench_prompts(n: int) -> list[str]:
    """First turns of n questions spread over every Spec-Bench category (the packaged copy)."""
    from workbench.measure.specbench import load_questions, spread

    return [q.turns[0] for q in spread(load_questions(), n)]


def tokens_per_s(runner, method, prompts: list[list[int]], max_new: int) -> tuple[float, list[list[int]]]:
    """``method``'s tokens/s over ``prompts``, decoded one at a time by the suite's ``Runner``
    after an 8-token warm-up on the first, and its outputs."""
    from workbench.engine.sampling import SamplingParams

    greedy = SamplingParams()
    runner.decode(method, prompts[0], greedy, 8)  # warm-up
    outs, seconds = [], 0.0
    for ids in prompts:
        out, s, _ = runner.decode(method, ids, greedy, max_new)
        outs.append(out)
        seconds += s
    return sum(len(o) for o in outs) / seconds, outs


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m experiments.plain_vs_generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=positive("--prompts"), default=8, help="Spec-Bench prompts to decode")
    ap.add_argument("--max-new-tokens", type=positive("--max-new-tokens"), default=64, help="new tokens per prompt")
    ap.add_argument("--dtypes", type=dtype_list, default="fp32,bf16", help="comma list of dtypes, one table row each")
    ap.add_argument("--target", help="target model directory (default: the workbench's default model)")
    ap.add_argument("--rounds", type=positive("--rounds"), default=3,
                    help="timed rounds, each decoding every prompt with every implementation and dtype")
    ap.add_argument("--threads", type=positive("--threads"), default=torch.get_num_threads(),
                    help="torch CPU threads (default: torch's, %(default)s here)")
    return ap


def dtype_list(text: str) -> list[str]:
    """An argparse ``type`` for ``--dtypes``: a comma list of fp32 / bf16 / fp16."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in ("fp32", "bf16", "fp16") for n in names):
        raise argparse.ArgumentTypeError(f"expected a comma list of fp32, bf16, fp16, got {text!r}")
    return names


def paired(top: list[float], bottom: list[float]) -> str:
    """One setting over another, each round's own ratio: its median and range."""
    s = spread([a / b for a, b in zip(top, bottom)])
    return f"{s.median:.2f}x" + (f" ({s.low:.2f}–{s.high:.2f}x)" if s.low != s.high else "")


def with_range(values: list[float]) -> str:
    s = spread(values)
    return f"{s.median:.1f}" + (f" ({s.low:.1f}–{s.high:.1f})" if s.low != s.high else "")


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import datetime
    import sys

    from workbench.bench.suite import Runner
    from workbench.cpu_choices import cpu_signature
    from workbench.device import parse_dtype
    from workbench.measure import provenance
    from workbench.measure.hf_baselines import load_hf_model
    from workbench.measure.methods import parse_methods
    from workbench.pipeline import Workbench

    torch.set_num_threads(args.threads)
    texts = spec_bench_prompts(args.prompts)
    vanilla, hf_greedy = parse_methods("vanilla,hf-greedy")
    settings, outputs, runners = {}, {}, {}
    for name in args.dtypes:
        wb = Workbench.load(args.target, dtype=name, need_draft=False)
        hf_model = load_hf_model(wb.target_dir, parse_dtype(name)).to(wb.target.lm_head.weight.device)
        runners[name] = Runner(wb, hf_model, args.max_new_tokens)
        prompts = [wb.encode(t) for t in texts]
        for label, method in (("ours", vanilla), ("generate", hf_greedy)):
            def one(runner=runners[name], method=method, prompts=prompts, key=(name, label)) -> float:
                speed, outs = tokens_per_s(runner, method, prompts, args.max_new_tokens)
                outputs.setdefault(key, outs)  # greedy: every round decodes the same tokens
                return speed
            settings[name, label] = one
    timed = interleaved(settings, args.rounds)
    print(f"# Plain decoding: ours against transformers `generate`\n\n"
          f"`python -m experiments.plain_vs_generate {' '.join(sys.argv[1:] if argv is None else argv)}` — "
          f"{datetime.datetime.now().isoformat(timespec='seconds')}, commit {provenance.commit() or 'not recorded'}, "
          f"{cpu_signature()}, {args.threads} torch threads.\n\n"
          f"{len(texts)} Spec-Bench prompts (one per category in turn), {args.max_new_tokens} new tokens each, greedy, "
          f"one prompt at a time; {args.rounds} rounds, the four settings interleaved within each (the first rotating); "
          "tokens/s is each round's generated tokens over its wall time, prefill included: the rounds' median "
          "(lowest–highest); a ratio is each round's own, then its median (range).\n")
    print("| dtype | ours tok/s | transformers generate tok/s | ours / generate | outputs equal |")
    print("|---|---|---|---|---|")
    for name in args.dtypes:
        ours, hf = timed[name, "ours"], timed[name, "generate"]
        same = sum(a == b for a, b in zip(outputs[name, "ours"], outputs[name, "generate"]))
        print(f"| {name} | {with_range(ours)} | {with_range(hf)} | {paired(ours, hf)} | {same}/{len(texts)} |")
    if len(args.dtypes) > 1:
        first = args.dtypes[0]
        print("\nEach dtype against " + first + ", ours: " + "; ".join(
            f"{name} {paired(timed[name, 'ours'], timed[first, 'ours'])}" for name in args.dtypes[1:]) + ".")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
