"""Tree-attention kernel benchmark: ``python -m experiments.kernel [options]``.

On a CUDA machine:

1. checks ``triton_tree.tree_attention`` against ``attention_reference`` on a few ragged
   batches in bf16, fp16 and fp32 (``experiments.gpu.kernel.check_against_reference``);
2. sweeps prefix length P x tree size N x batch B and times each shape as the GPU check does
   (``experiments.gpu.kernel.measure_shape``: the kernel, the dense SDPA baseline and the memory
   roofline), and also ``kernel graph``: the same call replayed from a CUDA graph (GPU time only;
   small shapes may then hit L2);
3. a small block/warp/split sweep on three shapes (``--no-tune`` skips it);
4. prints a Markdown table and writes everything as JSON to ``--out``.

On a CPU machine it exits 2 saying that the benchmark needs CUDA, unless ``--interpret-smoke``
is given: then one tiny shape runs through the Triton interpreter (and SDPA on the CPU) to show
that the script works end to end; its timings mean nothing.

``python -m experiments.gpu.check`` runs steps 1 and 2 (without the graph timing) on a reduced
sweep; this study adds the full sweep and the tuning. Its figures go to docs/gpu.md, section
"Tree attention on a GPU", once a GPU has run it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from workbench.errors import ArgumentParser, UserError, reports_user_errors

DTYPES = ("bf16", "fp16", "fp32")
# (block_m, block_n, num_warps, num_stages, num_splits); None = the launcher's heuristic.
TUNE_CONFIGS = [
    (None, None, None, None, None),
    (64, 64, 4, None, None),
    (64, 64, 8, 2, None),
    (64, 32, 8, 4, None),
    (128, 64, 8, 2, None),
    (None, None, None, None, 1),
    (None, None, None, None, 64),
]
TUNE_SHAPES = [(1, 32768, 8), (4, 8192, 64), (16, 2048, 32)]  # (B, P, N)


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m experiments.kernel", description=__doc__.split("\n\n")[0])
    p.add_argument("--prefixes", type=_ints, default="512,2048,8192,32768", help="prefix lengths P")
    p.add_argument("--n", type=_ints, default="8,32,64", help="tree sizes N (queries = extra keys)")
    p.add_argument("--batch", type=_ints, default="1,4,16", help="batch sizes B")
    p.add_argument("--hq", type=int, default=32, help="query heads")
    p.add_argument("--hkv", type=int, default=8, help="key/value heads (divides --hq)")
    p.add_argument("--dh", type=int, default=128, help="head dimension")
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="dtype of the timed sweep")
    p.add_argument("--bandwidth-gbs", type=float, default=4800.0, help="device memory bandwidth, GB/s (H200: 4800)")
    p.add_argument("--out", type=Path, default=Path("bench_out/kernel.json"), help="JSON results")
    p.add_argument("--warmup-ms", type=int, default=15, help="warm-up time per measurement, in ms (do_bench)")
    p.add_argument("--rep-ms", type=int, default=60, help="timed repetitions per measurement, in ms (do_bench)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs and tree masks")
    p.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    p.add_argument("--no-tune", action="store_true", help="skip the block/warp/split sweep")
    p.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph timing of the kernel")
    p.add_argument("--interpret-smoke", action="store_true",
                   help="CPU: run one tiny shape through the Triton interpreter (proves the script runs)")
    return p


def graph_time(fn, rep_ms: int) -> float | None:
    """GPU time of ``fn`` replayed from a CUDA graph, microseconds (None if capture fails)."""
    try:
        from triton.testing import do_bench_cudagraph

        try:
            return do_bench_cudagraph(fn, rep=rep_ms, return_mode="median") * 1e3
        except TypeError:
            return do_bench_cudagraph(fn, rep=rep_ms) * 1e3
    except Exception as err:  # noqa: BLE001 - report, don't abort the sweep
        print(f"  (CUDA-graph timing unavailable: {type(err).__name__}: {err})", file=sys.stderr)
        return None


def tune(setup, timer, graph_timer=None) -> list[dict]:
    """Every ``TUNE_CONFIGS`` launch on every ``TUNE_SHAPES`` shape, kernel alone (no baseline)."""
    import torch

    from experiments.gpu.kernel import measure_shape

    gen, rows = torch.Generator().manual_seed(setup.seed), []
    for b, p, n in TUNE_SHAPES:
        for bm, bn, nw, ns, sp in TUNE_CONFIGS:
            knobs = {"block_m": bm, "block_n": bn, "num_warps": nw, "num_stages": ns, "num_splits": sp}
            try:
                rows.append(measure_shape(setup, timer, b, p, n, gen, knobs, baseline=False, graph_timer=graph_timer))
            except Exception as err:  # noqa: BLE001 - one launch that fails must not lose the others
                rows.append({"B": b, "P": p, "N": n, "config": knobs, "error": f"{type(err).__name__}: {err}"[:300]})
            torch.cuda.empty_cache()
    return rows


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def markdown_table(rows: list[dict]) -> str:
    head = ("| B | P | N | kernel µs | graph µs | SDPA µs | gather µs | vs SDPA | vs gather+SDPA "
            "| KV GB/s | % roofline | splits | qblk | diff vs SDPA |")
    lines = [head, "|" + "|".join(["---"] * 14) + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['B']} | {r['P']} | {r['N']} | error: {r['error'][:60]} |" + " |" * 11)
            continue
        lines.append(
            f"| {r['B']} | {r['P']} | {r['N']} | {_fmt(r['kernel_us'])} | {_fmt(r.get('kernel_graph_us'))} "
            f"| {_fmt(r.get('sdpa_us'))} ({r.get('sdpa_variant', '-')}) | {_fmt(r.get('gather_us'))} "
            f"| {_fmt(r.get('speedup_vs_sdpa'), '.2f')}x | {_fmt(r.get('speedup_vs_gather_sdpa'), '.2f')}x "
            f"| {_fmt(r['kernel_gbs'], '.0f')} | {_fmt(100 * r['roofline_frac'], '.0f')}% "
            f"| {r['num_splits']} | {r['query_blocks']} | {_fmt(r.get('max_abs_diff_vs_sdpa'), '.1e')} |")
    return "\n".join(lines)


def tune_table(rows: list[dict]) -> str:
    lines = ["| B | P | N | block_m | block_n | warps | stages | splits | kernel µs | graph µs | % roofline |",
             "|" + "|".join(["---"] * 11) + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['B']} | {r['P']} | {r['N']} | {r.get('config')} | error: {r['error'][:80]} |")
            continue
        stages = _fmt(r["num_stages"], "d") if r["num_stages"] else "default"
        lines.append(f"| {r['B']} | {r['P']} | {r['N']} | {r['block_m']} | {r['block_n']} | {r['num_warps']} "
                     f"| {stages} | {r['num_splits']} | {_fmt(r['kernel_us'])} | {_fmt(r.get('kernel_graph_us'))} "
                     f"| {_fmt(100 * r['roofline_frac'], '.0f')}% |")
    return "\n".join(lines)


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    from experiments.gpu.kernel import INTERPRETED_SHAPES, Setup, benchmark, make_timer

    t_start = time.perf_counter()
    if args.hq <= 0 or args.hkv <= 0 or args.hq % args.hkv:
        raise UserError(f"--hq {args.hq} must be a positive multiple of --hkv {args.hkv}")
    setup = Setup(args.hq, args.hkv, args.dh, args.dtype, "cuda", args.bandwidth_gbs, args.warmup_ms, args.rep_ms,
                  args.seed)
    shapes = [(b, p, n) for p in args.prefixes for n in args.n for b in args.batch]
    if not torch.cuda.is_available():
        if not args.interpret_smoke:
            raise UserError("the tree-attention kernel benchmark needs a CUDA GPU (none found). Use "
                            "--interpret-smoke to run one tiny shape through the Triton interpreter on the CPU.")
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET", "0") != "1":
            raise UserError("triton was imported before TRITON_INTERPRET=1 could be set; "
                            "run `TRITON_INTERPRET=1 python -m experiments.kernel --interpret-smoke`")
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (it reads it at @jit time)
        setup = replace(Setup.interpreted(args.dtype), bandwidth_gbs=args.bandwidth_gbs, seed=args.seed)
        shapes, args.no_tune, args.no_graph = INTERPRETED_SHAPES, True, True

    graph_timer = None if args.no_graph else (lambda fn: graph_time(fn, args.rep_ms))
    report = benchmark(setup, shapes, check=not args.no_check, graph_timer=graph_timer)
    report["timing"]["kernel_graph_us"] = "do_bench_cudagraph median (GPU time only)"
    print("\n" + markdown_table(report["results"]))
    if not args.no_tune:
        print("\n## block / warp / split sweep", flush=True)
        report["tuning"] = tune(setup, make_timer(setup), graph_timer)
        print(tune_table(report["tuning"]))
    report["wall_s"] = time.perf_counter() - t_start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out} ({report['wall_s']:.0f} s, {report['failures']} failure(s))")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
