"""Plain decoding speed: our ``vanilla`` against transformers ``generate``, same prompts, same
dtype, same machine, one run.

    python -m workbench.bench plain [--prompts 8] [--max-new-tokens 64] [--dtypes fp32,bf16]

Prints a Markdown table (tokens/s = generated tokens over wall time, prefill included, one
prompt at a time, after one warm-up prompt) and whether the greedy outputs are equal.
"""

from __future__ import annotations

import argparse
import time

import torch

from workbench.errors import ArgumentParser, reports_user_errors
from workbench.flags import positive



def spec_bench_prompts(n: int) -> list[str]:
    """First turns of n questions spread over every Spec-Bench category (the packaged copy)."""
    from workbench.bench.specbench import load_questions, spread

    return [q.turns[0] for q in spread(load_questions(), n)]


def run_ours(wb, prompts: list[list[int]], max_new: int) -> tuple[float, list[list[int]]]:
    from workbench.engine.config import SpecConfig
    from workbench.engine.sampling import SamplingParams

    wb.generate([prompts[0]], SpecConfig("vanilla"), SamplingParams(), 8)  # warm-up
    tokens, seconds, outs = 0, 0.0, []
    for ids in prompts:
        (req,), s = wb.generate([ids], SpecConfig("vanilla"), SamplingParams(), max_new)
        tokens, seconds = tokens + len(req.output_ids), seconds + s
        outs.append(req.output_ids)
    return tokens / seconds, outs


def run_hf(path, dtype: torch.dtype, prompts: list[list[int]], max_new: int, stop_ids) -> tuple[float, list[list[int]]]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    gen = dict(do_sample=False, eos_token_id=list(stop_ids))
    with torch.no_grad():
        hf.generate(torch.tensor([prompts[0]]), max_new_tokens=8, **gen)  # warm-up
        tokens, seconds, outs = 0, 0.0, []
        for ids in prompts:
            t0 = time.perf_counter()
            out = hf.generate(torch.tensor([ids]), max_new_tokens=max_new, **gen)[0, len(ids):].tolist()
            seconds += time.perf_counter() - t0
            tokens += len(out)
            outs.append(out)
    return tokens / seconds, outs


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m workbench.bench plain", description=__doc__.split("\n\n")[0])
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
    from workbench.models.loading import parse_dtype
    from workbench.pipeline import Workbench

    torch.set_num_threads(args.threads)
    texts = spec_bench_prompts(args.prompts)
    print(f"{len(texts)} Spec-Bench prompts, {args.max_new_tokens} new tokens, {args.threads} threads\n")
    print("| dtype | ours vanilla tok/s | transformers generate tok/s | ours / HF | outputs equal |")
    print("|---|---|---|---|---|")
    for name in args.dtypes:
        wb = Workbench.load(dtype=name, need_draft=False)
        prompts = [wb.encode(t) for t in texts]
        ours, ours_out = run_ours(wb, prompts, args.max_new_tokens)
        hf, hf_out = run_hf(wb.target_dir, parse_dtype(name), prompts, args.max_new_tokens, wb.stop_ids)
        same = sum(a == b for a, b in zip(ours_out, hf_out))
        print(f"| {name} | {ours:.1f} | {hf:.1f} | {ours / hf:.2f}x | {same}/{len(prompts)} |", flush=True)
    return 0
