"""Plain decoding speed: our ``vanilla`` against transformers ``generate``, same prompts, same
dtype, same machine, one run: each decoded as ``run`` decodes it (``suite.Runner``, ``hf_baselines``).

    python -m experiments.plain_vs_generate [--prompts 8] [--max-new-tokens 64] [--dtypes fp32,bf16]

Prints a Markdown table (tokens/s = generated tokens over wall time, prefill included, one
prompt at a time, after one warm-up prompt) and whether the greedy outputs are equal.
"""

from __future__ import annotations

import argparse

import torch

from workbench.errors import ArgumentParser, reports_user_errors
from workbench.flags import positive


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
    ap.add_argument("--threads", type=positive("--threads"), default=torch.get_num_threads(),
                    help="torch CPU threads (default: torch's, %(default)s here)")
    return ap


def dtype_list(text: str) -> list[str]:
    """An argparse ``type`` for ``--dtypes``: a comma list of fp32 / bf16 / fp16."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in ("fp32", "bf16", "fp16") for n in names):
        raise argparse.ArgumentTypeError(f"expected a comma list of fp32, bf16, fp16, got {text!r}")
    return names


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from workbench.measure.hf_baselines import load_hf_model
    from workbench.measure.methods import parse_methods
    from workbench.bench.suite import Runner
    from workbench.device import parse_dtype
    from workbench.pipeline import Workbench

    torch.set_num_threads(args.threads)
    texts = spec_bench_prompts(args.prompts)
    print(f"{len(texts)} Spec-Bench prompts, {args.max_new_tokens} new tokens, {args.threads} threads\n")
    print("| dtype | ours vanilla tok/s | transformers generate tok/s | ours / HF | outputs equal |")
    print("|---|---|---|---|---|")
    vanilla, hf_greedy = parse_methods("vanilla,hf-greedy")
    for name in args.dtypes:
        wb = Workbench.load(dtype=name, need_draft=False)
        hf_model = load_hf_model(wb.target_dir, parse_dtype(name)).to(wb.target.lm_head.weight.device)
        runner = Runner(wb, hf_model, args.max_new_tokens)
        prompts = [wb.encode(t) for t in texts]
        ours, ours_out = tokens_per_s(runner, vanilla, prompts, args.max_new_tokens)
        hf, hf_out = tokens_per_s(runner, hf_greedy, prompts, args.max_new_tokens)
        same = sum(a == b for a, b in zip(ours_out, hf_out))
        print(f"| {name} | {ours:.1f} | {hf:.1f} | {ours / hf:.2f}x | {same}/{len(prompts)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
