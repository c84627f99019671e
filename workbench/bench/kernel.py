"""Tree-attention kernel benchmark: ``python -m workbench.bench kernel [options]``.

On a CUDA machine:

1. checks ``triton_tree.tree_attention`` against ``attention_reference`` on a few ragged
   batches (tree masks, rectangular masks, causal, forced split-KV) in bf16, fp16 and fp32;
2. sweeps prefix length P x tree size N x batch B (uniform requests; every request verifies a
   random N-node tree over its own committed prefix; Llama-3-8B heads by default: Hq 32,
   Hkv 8, Dh 128, bf16) and times
   * ``kernel``: one ``tree_attention`` call (``triton.testing.do_bench``, L2 flushed between
     runs, launcher overhead included), and ``kernel graph``: the same call replayed from a
     CUDA graph (GPU time only; small shapes may then hit L2);
   * the dense baseline ``torch.nn.functional.scaled_dot_product_attention`` with a boolean
     ``[B, 1, N, P + N]`` mask over K/V already gathered into dense tensors: ``sdpa`` is the
     SDPA call alone (best of two variants: K/V repeated to Hq heads, or ``enable_gqa=True``),
     ``gather`` is the separate cost of building its dense K/V from the paged pool
     (index + transpose, plus the head repeat for the first variant);
   * the memory roofline: unique K/V bytes (B * (P + N) * Hkv * Dh * 2 * elem) over the
     device bandwidth (``--bandwidth-gbs``, 4800 for an H200), as a time and a fraction;
3. a small block/warp/split sweep on three shapes (``--no-tune`` skips it);
4. prints a Markdown table and writes everything as JSON to ``--out``.

On a CPU machine it exits 2 saying that the benchmark needs CUDA, unless
``--interpret-smoke`` is given: then one tiny shape runs through the Triton interpreter (and
SDPA on the CPU) to show that the script works end to end; its timings mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from workbench.attention.selfcheck import TOLERANCE, Problem, random_tree_mask
from workbench.attention.selfcheck import make_problem as ragged_problem
from workbench.errors import ArgumentParser, UserError, reports_user_errors

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
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
    p = ArgumentParser(prog="python -m workbench.bench kernel", description=__doc__.split("\n\n")[0])
    p.add_argument("--prefixes", type=_ints, default="512,2048,8192,32768", help="prefix lengths P")
    p.add_argument("--n", type=_ints, default="8,32,64", help="tree sizes N (queries = extra keys)")
    p.add_argument("--batch", type=_ints, default="1,4,16", help="batch sizes B")
    p.add_argument("--hq", type=int, default=32, help="query heads")
    p.add_argument("--hkv", type=int, default=8, help="key/value heads (divides --hq)")
    p.add_argument("--dh", type=int, default=128, help="head dimension")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="dtype of the timed sweep")
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


# ----------------------------------------------------------------------------------------------
# Problems


def make_problem(b, p, n, hq, hkv, dh, dtype, device, gen):
    """Uniform batch: B requests, prefix P, an N-node tree each; shuffled pool slots."""
    from workbench.attention.meta import AttentionMeta

    length = p + n
    n_slots = b * length + 17
    slots = torch.randperm(n_slots, generator=gen)[: b * length].view(b, length)
    masks = torch.stack([random_tree_mask(n, gen) for _ in range(b)])  # [B, N, N]
    meta = AttentionMeta(
        cu_q=(torch.arange(b + 1, dtype=torch.int32) * n).to(device),
        cu_kv=(torch.arange(b + 1, dtype=torch.int32) * length).to(device),
        prefix_lens=torch.full((b,), p, dtype=torch.int32).to(device),
        kv_slots=slots.reshape(-1).to(device),
        mask=masks.reshape(-1).to(device),
        mask_offsets=(torch.arange(b, dtype=torch.int64) * n * n).to(device),
        q_lens=[n] * b, kv_lens=[length] * b, prefix_list=[p] * b,
    )
    dev_gen = torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    q = torch.randn(b * n, hq, dh, device=device, dtype=dtype, generator=dev_gen)
    k_pool = torch.randn(n_slots, hkv, dh, device=device, dtype=dtype, generator=dev_gen)
    v_pool = torch.randn(n_slots, hkv, dh, device=device, dtype=dtype, generator=dev_gen)
    dense_mask = torch.ones(b, 1, n, length, dtype=torch.bool)
    dense_mask[:, 0, :, p:] = masks
    return q, k_pool, v_pool, meta, slots.to(device), dense_mask.to(device)


def max_violation(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> tuple[float, float]:
    """(max abs error, max of |err| / (atol + rtol |ref|)): the check passes when the latter <= 1."""
    atol, rtol = TOLERANCE[dtype]
    err = (out.float() - ref.float()).abs()
    if err.numel() == 0:
        return 0.0, 0.0
    return err.max().item(), (err / (atol + rtol * ref.float().abs())).max().item()


# ----------------------------------------------------------------------------------------------
# Timing


def make_timer(device: str, warmup_ms: int, rep_ms: int):
    if device == "cuda":
        from triton.testing import do_bench

        def timer(fn) -> float:  # microseconds, median
            try:
                return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") * 1e3
            except TypeError:  # older signature
                return do_bench(fn, warmup=warmup_ms, rep=rep_ms) * 1e3

        return timer

    def cpu_timer(fn) -> float:
        fn()
        t0 = time.perf_counter()
        for _ in range(2):
            fn()
        return (time.perf_counter() - t0) / 2 * 1e6

    return cpu_timer


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


# ----------------------------------------------------------------------------------------------
# Steps


def run_checks(args, device: str) -> list[dict]:
    from workbench.attention import attention_reference
    from workbench.attention.triton_tree import tree_attention

    gen = torch.Generator().manual_seed(args.seed + 1)
    hq, hkv, dh = args.hq, args.hkv, args.dh
    if device == "cpu":
        hq, hkv, dh = 4, 2, 32
    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32

    def case(name, q_lens, prefix_lens, extra_lens, causal=False, splits=None):
        return Problem(name, q_lens, prefix_lens, extra_lens, causal, {"num_splits": splits} if splits else {})

    ragged = case("tree, ragged", (64, 8, 1, 33), (2000, 511, 4096, 0), (64, 8, 1, 40))
    split3 = case("causal, forced 3 splits", (17, 2), (3000, 10), (17, 2), True, 3)
    cases = [
        (bf16, ragged),
        (bf16, case("tree, rectangular levels", (8, 16, 4), (300, 1, 77), (24, 16, 5))),
        (bf16, case("causal, ragged", (40, 7, 1), (1000, 3, 0), (40, 7, 1), True)),
        (bf16, case("tree, forced 5 splits", (64, 8), (2000, 511), (64, 8), splits=5)),
        (bf16, split3),
        (fp16, ragged),
        (fp16, split3),
        (fp32, case("tree, ragged, forced 2 splits", (16, 3), (700, 90), (16, 5), splits=2)),
    ]
    if device == "cpu":  # interpreter: small cases are enough to prove the path
        dt = DTYPES[args.dtype]
        cases = [(dt, case("tree, ragged (tiny)", (5, 3), (40, 7), (5, 4))),
                 (dt, case("causal (tiny)", (6,), (20,), (6,), True, 2))]
    results = []
    for dtype, problem in cases:
        dname, name = str(dtype).replace("torch.", ""), problem.name
        try:
            q, k, v, meta, _ = ragged_problem(problem, hq, hkv, dh, dtype, device, gen)
            out = tree_attention(q, k, v, meta, None, **problem.knobs)
            ref = attention_reference(q, k, v, meta, None)
            err, ratio = max_violation(out, ref, dtype)
            ok = bool(ratio <= 1.0 and torch.isfinite(out.float()).all())
            results.append({"case": name, "dtype": dname, "max_abs_err": err, "tolerance_ratio": ratio, "ok": ok})
            print(f"  check {'ok  ' if ok else 'FAIL'} {dname:<9} {name:<30} "
                  f"max|err| {err:.2e} ({ratio:.2f} of tolerance)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every case
            results.append({"case": name, "dtype": dname, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]})
            print(f"  check FAIL {dname:<9} {name:<30} {type(e).__name__}: {str(e)[:300]}", flush=True)
    return results


def bench_shape(args, device, timer, b, p, n, gen, knobs=None, baseline=True) -> dict:
    import torch.nn.functional as F

    from workbench.attention.triton_tree import plan_launch, tree_attention

    dtype = DTYPES[args.dtype]
    hq, hkv, dh = args.hq, args.hkv, args.dh
    g = hq // hkv
    scale = dh**-0.5
    q, k_pool, v_pool, meta, slots, dense_mask = make_problem(b, p, n, hq, hkv, dh, dtype, device, gen)
    knobs = {k: v for k, v in (knobs or {}).items() if v is not None}
    plan = plan_launch(meta, hq, hkv, dh, q.element_size(), q.device,
                       **{k: v for k, v in knobs.items() if k != "num_stages"})
    run = lambda: tree_attention(q, k_pool, v_pool, meta, scale, **knobs)  # noqa: E731
    elem = q.element_size()
    kv_bytes = b * (p + n) * hkv * dh * 2 * elem
    row = {"B": b, "P": p, "N": n, "hq": hq, "hkv": hkv, "dh": dh, "dtype": args.dtype,
           "block_m": plan.block_m, "block_n": plan.block_n, "num_warps": plan.num_warps,
           "num_stages": knobs.get("num_stages"), "num_splits": plan.num_splits, "query_blocks": plan.m_blocks,
           "kv_bytes": kv_bytes}
    out = run()
    row["kernel_us"] = timer(run)
    row["kernel_graph_us"] = graph_time(run, args.rep_ms) if device == "cuda" and not args.no_graph else None
    roof_us = kv_bytes / (args.bandwidth_gbs * 1e3)
    row["roofline_us"] = roof_us
    row["kernel_gbs"] = kv_bytes / (row["kernel_us"] * 1e3)
    row["roofline_frac"] = roof_us / row["kernel_us"]
    row["roofline_frac_graph"] = roof_us / row["kernel_graph_us"] if row["kernel_graph_us"] else None
    if not baseline:
        return row

    # Dense baseline: gather the paged K/V into [B, H, P + N, Dh], then masked SDPA.
    qd = q.view(b, n, hq, dh).transpose(1, 2).contiguous()  # [B, Hq, N, Dh]

    def gather():
        return (k_pool[slots].permute(0, 2, 1, 3).contiguous(), v_pool[slots].permute(0, 2, 1, 3).contiguous())

    def gather_repeat():
        kd, vd = k_pool[slots].permute(0, 2, 1, 3), v_pool[slots].permute(0, 2, 1, 3)
        return kd.repeat_interleave(g, dim=1), vd.repeat_interleave(g, dim=1)

    variants = {}
    try:
        kx, vx = gather_repeat()
        sdpa = lambda: F.scaled_dot_product_attention(qd, kx, vx, attn_mask=dense_mask, scale=scale)  # noqa: E731
        variants["repeat"] = (timer(sdpa), timer(gather_repeat), sdpa())
        del kx, vx
    except Exception as err:  # noqa: BLE001
        row["sdpa_repeat_error"] = f"{type(err).__name__}: {err}"[:300]
    try:
        kg, vg = gather()
        sdpa = lambda: F.scaled_dot_product_attention(qd, kg, vg, attn_mask=dense_mask, scale=scale,  # noqa: E731
                                                      enable_gqa=True)
        variants["gqa"] = (timer(sdpa), timer(gather), sdpa())
        del kg, vg
    except Exception as err:  # noqa: BLE001
        row["sdpa_gqa_error"] = f"{type(err).__name__}: {err}"[:300]
    for name, (t_sdpa, t_gather, _) in variants.items():
        row[f"sdpa_{name}_us"] = t_sdpa
        row[f"gather_{name}_us"] = t_gather
    if variants:
        name = min(variants, key=lambda k: variants[k][0])
        t_sdpa, t_gather, ref = variants[name]
        row.update(sdpa_variant=name, sdpa_us=t_sdpa, gather_us=t_gather,
                   speedup_vs_sdpa=t_sdpa / row["kernel_us"],
                   speedup_vs_gather_sdpa=(t_sdpa + t_gather) / row["kernel_us"])
        ref = ref.transpose(1, 2).reshape(b * n, hq, dh)
        row["max_abs_diff_vs_sdpa"] = (out.float() - ref.float()).abs().max().item()
    del q, k_pool, v_pool, meta, slots, dense_mask, variants, out
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


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
        lines.append(f"| {r['B']} | {r['P']} | {r['N']} | {r['block_m']} | {r['block_n']} | {r['num_warps']} "
                     f"| {_fmt(r['num_stages'], 'd') if r['num_stages'] else 'default'} | {r['num_splits']} "
                     f"| {_fmt(r['kernel_us'])} | {_fmt(r.get('kernel_graph_us'))} | {_fmt(100 * r['roofline_frac'], '.0f')}% |")
    return "\n".join(lines)


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.hq <= 0 or args.hkv <= 0 or args.hq % args.hkv:
        raise UserError(f"--hq {args.hq} must be a positive multiple of --hkv {args.hkv}")
    if torch.cuda.is_available():
        device = "cuda"
    elif args.interpret_smoke:
        device = "cpu"
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET", "0") != "1":
            raise UserError("triton was imported before TRITON_INTERPRET=1 could be set; "
                            "run `TRITON_INTERPRET=1 python -m workbench.bench kernel --interpret-smoke`")
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (it reads it at @jit time)
        args.prefixes, args.n, args.batch = [40], [4], [2]
        args.hq, args.hkv, args.dh = 4, 2, 32
        args.no_tune = True
    else:
        raise UserError("the tree-attention kernel benchmark needs a CUDA GPU (none found). "
                        "Use --interpret-smoke to run one tiny shape through the Triton interpreter on the CPU.")

    import triton

    from workbench.attention.triton_tree import tree_attention  # noqa: F401 - fail early if unusable

    dev_name = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'unknown'}), Triton interpreter"
    print(f"# tree attention kernel benchmark on {dev_name}")
    print(f"torch {torch.__version__}, triton {triton.__version__}; Hq {args.hq} Hkv {args.hkv} Dh {args.dh} "
          f"{args.dtype}; bandwidth {args.bandwidth_gbs:.0f} GB/s")
    if device == "cpu":
        print("(interpreter smoke run: timings are meaningless)")
    report = {"device": dev_name, "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "bandwidth_gbs": args.bandwidth_gbs,
              "hq": args.hq, "hkv": args.hkv, "dh": args.dh, "dtype": args.dtype,
              "interpret_smoke": device == "cpu",
              "timing": {"kernel_us": "triton.testing.do_bench median, L2 flushed, launcher included",
                         "kernel_graph_us": "do_bench_cudagraph median (GPU time only)",
                         "sdpa_us": "masked SDPA on pre-gathered dense K/V (best variant)",
                         "gather_us": "building that variant's dense K/V from the pool",
                         "roofline_us": "unique K/V bytes / bandwidth"}}
    t_start = time.perf_counter()
    failures = 0
    if not args.no_check:
        print("\n## correctness against attention_reference")
        report["checks"] = run_checks(args, device)
        failures += sum(not c["ok"] for c in report["checks"])

    timer = make_timer(device, args.warmup_ms, args.rep_ms)
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    print("\n## sweep", flush=True)
    for p in args.prefixes:
        for n in args.n:
            for b in args.batch:
                try:
                    row = bench_shape(args, device, timer, b, p, n, gen)
                except Exception as err:  # noqa: BLE001 - one bad shape must not lose the sweep
                    row = {"B": b, "P": p, "N": n, "error": f"{type(err).__name__}: {err}"[:500]}
                    failures += 1
                    if device == "cuda":
                        torch.cuda.empty_cache()
                rows.append(row)
                print(f"  B={b:<3} P={p:<6} N={n:<3} " + (
                    f"kernel {row['kernel_us']:9.1f} us  sdpa {_fmt(row.get('sdpa_us')):>9} us  "
                    f"gather {_fmt(row.get('gather_us')):>9} us  roofline {100 * row['roofline_frac']:5.1f}%"
                    if "error" not in row else row["error"]), flush=True)
    report["results"] = rows
    print("\n" + markdown_table(rows))

    if not args.no_tune:
        print("\n## block / warp / split sweep", flush=True)
        tune_rows = []
        for b, p, n in TUNE_SHAPES:
            for bm, bn, nw, ns, sp in TUNE_CONFIGS:
                knobs = {"block_m": bm, "block_n": bn, "num_warps": nw, "num_stages": ns, "num_splits": sp}
                try:
                    r = bench_shape(args, device, timer, b, p, n, gen, knobs=knobs, baseline=False)
                except Exception as err:  # noqa: BLE001
                    r = {"B": b, "P": p, "N": n, "config": knobs, "error": f"{type(err).__name__}: {err}"[:300]}
                    if device == "cuda":
                        torch.cuda.empty_cache()
                tune_rows.append(r)
        report["tuning"] = tune_rows
        print(tune_table(tune_rows))

    report["wall_s"] = time.perf_counter() - t_start
    report["failures"] = failures
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out} ({report['wall_s']:.0f} s, {failures} failure(s))")
    return 1 if failures else 0
