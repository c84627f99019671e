"""The tree-attention kernel as the GPU check measures it (``python -m experiments.gpu.check``).

``benchmark`` runs, on the device at hand:

1. ``check_against_reference``: ``triton_tree.tree_attention`` against ``attention_reference`` on
   a few ragged batches (tree masks, rectangular masks, causal, forced split-KV) in bf16, fp16
   and fp32;
2. ``measure_shape`` for each (B, P, N): B requests, each verifying a random N-node tree over
   its own committed prefix of P keys (Llama-3-8B heads by default: Hq 32, Hkv 8, Dh 128, bf16),
   timed as
   * ``kernel``: one ``tree_attention`` call (``triton.testing.do_bench``, L2 flushed between
     runs, launcher overhead included);
   * the dense baseline ``torch.nn.functional.scaled_dot_product_attention`` with a boolean
     ``[B, 1, N, P + N]`` mask over K/V already gathered into dense tensors: ``sdpa`` is the
     SDPA call alone (best of two variants: K/V repeated to Hq heads, or ``enable_gqa=True``),
     ``gather`` is the separate cost of building its dense K/V from the paged pool
     (index + transpose, plus the head repeat for the first variant);
   * the memory roofline: unique K/V bytes (B * (P + N) * Hkv * Dh * 2 * elem) over the
     device bandwidth (4800 GB/s for an H200), as a time and a fraction.

The problems are the kernel self-check's (``attention/selfcheck.py``: ``Problem``,
``make_problem``). On a CPU (``Setup.interpreted``) one tiny shape runs through the Triton
interpreter, to show the plumbing works; its timings mean nothing. The full sweep with its
block/warp/split tuning and the kernel replayed from a CUDA graph is a study beside the package:
``python -m experiments.kernel``.
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict, dataclass

import torch

from workbench.attention.selfcheck import Problem, make_problem, tolerance_ratio

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TIMING = {"kernel_us": "triton.testing.do_bench median, L2 flushed, launcher included",
          "sdpa_us": "masked SDPA on pre-gathered dense K/V (best variant)",
          "gather_us": "building that variant's dense K/V from the pool",
          "roofline_us": "unique K/V bytes / bandwidth"}


@dataclass(frozen=True)
class Setup:
    """What every measured shape shares: heads, dtype, device and its bandwidth, timing budget."""

    hq: int = 32
    hkv: int = 8
    dh: int = 128
    dtype: str = "bf16"
    device: str = "cuda"
    bandwidth_gbs: float = 4800.0  # H200
    warmup_ms: int = 15  # do_bench's warm-up and timed repetitions, per measurement
    rep_ms: int = 60
    seed: int = 0

    def __post_init__(self):
        if self.hq <= 0 or self.hkv <= 0 or self.hq % self.hkv:
            raise ValueError(f"{self.hq} query heads are not a positive multiple of {self.hkv} key/value heads")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")

    @classmethod
    def interpreted(cls, dtype: str = "bf16") -> Setup:
        """Tiny heads on the CPU, for the Triton interpreter (TRITON_INTERPRET=1)."""
        return cls(hq=4, hkv=2, dh=32, dtype=dtype, device="cpu")


INTERPRETED_SHAPES = [(2, 40, 4)]  # (B, P, N) of the CPU run


def say(msg: str) -> None:
    """Progress on stdout, flushed (a sweep takes minutes)."""
    print(msg, flush=True)


def check_cases(setup: Setup) -> list[tuple[torch.dtype, Problem]]:
    """(dtype, problem) of the reference check: ragged batches on a GPU, two tiny ones on a CPU."""
    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32

    def case(name, q_lens, prefix_lens, extra_lens, causal=False, splits=None):
        return Problem(name, q_lens, prefix_lens, extra_lens, causal, {"num_splits": splits} if splits else {})

    if setup.device == "cpu":  # interpreter: small cases are enough to prove the path
        dt = DTYPES[setup.dtype]
        return [(dt, case("tree, ragged (tiny)", (5, 3), (40, 7), (5, 4))),
                (dt, case("causal (tiny)", (6,), (20,), (6,), True, 2))]
    ragged = case("tree, ragged", (64, 8, 1, 33), (2000, 511, 4096, 0), (64, 8, 1, 40))
    split3 = case("causal, forced 3 splits", (17, 2), (3000, 10), (17, 2), True, 3)
    return [
        (bf16, ragged),
        (bf16, case("tree, rectangular levels", (8, 16, 4), (300, 1, 77), (24, 16, 5))),
        (bf16, case("causal, ragged", (40, 7, 1), (1000, 3, 0), (40, 7, 1), True)),
        (bf16, case("tree, forced 5 splits", (64, 8), (2000, 511), (64, 8), splits=5)),
        (bf16, split3),
        (fp16, ragged),
        (fp16, split3),
        (fp32, case("tree, ragged, forced 2 splits", (16, 3), (700, 90), (16, 5), splits=2)),
    ]


def check_against_reference(setup: Setup, log=say) -> list[dict]:
    """One row per ``check_cases`` case: max error, its fraction of the tolerance, ok."""
    from workbench.attention import attention_reference
    from workbench.attention.triton_tree import tree_attention

    gen = torch.Generator().manual_seed(setup.seed + 1)
    results = []
    for dtype, problem in check_cases(setup):
        dname, name = str(dtype).replace("torch.", ""), problem.name
        try:
            q, k, v, meta, _ = make_problem(problem, setup.hq, hkv=setup.hkv, dh=setup.dh, dtype=dtype,
                                            device=setup.device, gen=gen)
            out = tree_attention(q, k, v, meta, scale=None, **problem.knobs)
            err, ratio = tolerance_ratio(out, attention_reference(q, k, v, meta, scale=None), dtype)
            ok = bool(ratio <= 1.0)  # a NaN fails
            results.append({"case": name, "dtype": dname, "max_abs_err": err, "tolerance_ratio": ratio, "ok": ok})
            log(f"  check {'ok  ' if ok else 'FAIL'} {dname:<9} {name:<30} "
                f"max|err| {err:.2e} ({ratio:.2f} of tolerance)")
        except Exception as e:  # noqa: BLE001 - report every case
            results.append({"case": name, "dtype": dname, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]})
            log(f"  check FAIL {dname:<9} {name:<30} {type(e).__name__}: {str(e)[:300]}")
    return results


def make_timer(setup: Setup):
    """``timer(fn) -> microseconds``: do_bench's median on CUDA (it syncs around its runs), the
    mean of two calls after one warm-up on the CPU."""
    if setup.device == "cuda":
        from triton.testing import do_bench

        def timer(fn) -> float:
            try:
                return do_bench(fn, warmup=setup.warmup_ms, rep=setup.rep_ms, return_mode="median") * 1e3
            except TypeError:  # older signature
                return do_bench(fn, warmup=setup.warmup_ms, rep=setup.rep_ms) * 1e3

        return timer

    def cpu_timer(fn) -> float:
        fn()
        t0 = time.perf_counter()
        for _ in range(2):
            fn()
        return (time.perf_counter() - t0) / 2 * 1e6

    return cpu_timer


def uniform_problem(setup: Setup, b: int, p: int, n: int, gen: torch.Generator):
    """B requests of prefix P and an N-node tree each (the self-check's ``make_problem``), with
    what the dense baseline reads: the slots of each request's keys [B, P + N] and the mask
    [B, 1, N, P + N] (the whole prefix, then the tree)."""
    problem = Problem(f"B={b} P={p} N={n}", (n,) * b, (p,) * b, (n,) * b)
    q, k_pool, v_pool, meta, _ = make_problem(problem, setup.hq, hkv=setup.hkv, dh=setup.dh, dtype=DTYPES[setup.dtype],
                                              device=setup.device, gen=gen)
    slots = meta.kv_slots.view(b, p + n)  # build_meta lays out each request's prefix, then its tree
    dense_mask = torch.ones(b, 1, n, p + n, dtype=torch.bool, device=setup.device)
    dense_mask[:, 0, :, p:] = meta.mask.view(b, n, n)
    return q, k_pool, v_pool, meta, slots, dense_mask


def measure_shape(setup: Setup, timer, b: int, p: int, n: int, gen: torch.Generator, knobs: dict | None = None,
                  baseline: bool = True, graph_timer=None) -> dict:
    """One row: the launch plan, the kernel's time and its share of the roofline, and (with
    ``baseline``) the dense SDPA baseline. ``knobs`` go to the kernel; ``graph_timer(fn)``, when
    given, times the kernel replayed from a CUDA graph (None: it could not)."""
    from workbench.attention.triton_tree import plan_launch, tree_attention

    hq, hkv, dh = setup.hq, setup.hkv, setup.dh
    scale = dh**-0.5
    q, k_pool, v_pool, meta, slots, dense_mask = uniform_problem(setup, b, p, n, gen)
    knobs = {k: v for k, v in (knobs or {}).items() if v is not None}
    plan = plan_launch(meta, hq, hkv=hkv, head_dim=dh, elem_bytes=q.element_size(), device=q.device,
                       **{k: v for k, v in knobs.items() if k != "num_stages"})
    run = lambda: tree_attention(q, k_pool, v_pool, meta, scale=scale, **knobs)  # noqa: E731
    kv_bytes = b * (p + n) * hkv * dh * 2 * q.element_size()
    row = {"B": b, "P": p, "N": n, "hq": hq, "hkv": hkv, "dh": dh, "dtype": setup.dtype,
           "block_m": plan.block_m, "block_n": plan.block_n, "num_warps": plan.num_warps,
           "num_stages": knobs.get("num_stages"), "num_splits": plan.num_splits, "query_blocks": plan.m_blocks,
           "kv_bytes": kv_bytes}
    out = run()
    row["kernel_us"] = timer(run)
    row["roofline_us"] = kv_bytes / (setup.bandwidth_gbs * 1e3)
    row["kernel_gbs"] = kv_bytes / (row["kernel_us"] * 1e3)
    row["roofline_frac"] = row["roofline_us"] / row["kernel_us"]
    if graph_timer is not None:
        row["kernel_graph_us"] = graph_timer(run)
        row["roofline_frac_graph"] = row["roofline_us"] / row["kernel_graph_us"] if row["kernel_graph_us"] else None
    if baseline:
        row.update(dense_baseline(q, k_pool, v_pool, slots, dense_mask, scale, timer, out, row["kernel_us"]))
    return row


def dense_baseline(q, k_pool, v_pool, slots, dense_mask, scale: float, timer, out, kernel_us: float) -> dict:
    """Gather the paged K/V into [B, H, P + N, Dh], then masked SDPA: each variant's times, the
    faster one's speedups of the kernel over it and its largest difference from ``out``."""
    import torch.nn.functional as F

    b, n = dense_mask.shape[0], dense_mask.shape[2]
    hq, dh, g = q.shape[1], q.shape[2], q.shape[1] // k_pool.shape[1]
    qd = q.view(b, n, hq, dh).transpose(1, 2).contiguous()  # [B, Hq, N, Dh]

    def gather():  # [B, Hkv, P + N, Dh] each
        return k_pool[slots].permute(0, 2, 1, 3).contiguous(), v_pool[slots].permute(0, 2, 1, 3).contiguous()

    def gather_repeat():  # [B, Hq, P + N, Dh] each
        kd, vd = k_pool[slots].permute(0, 2, 1, 3), v_pool[slots].permute(0, 2, 1, 3)
        return kd.repeat_interleave(g, dim=1), vd.repeat_interleave(g, dim=1)

    row, variants = {}, {}
    for name, build, gqa in (("repeat", gather_repeat, False), ("gqa", gather, True)):
        try:
            kd, vd = build()
            sdpa = lambda: F.scaled_dot_product_attention(qd, kd, vd, attn_mask=dense_mask, scale=scale,  # noqa: E731
                                                          **({"enable_gqa": True} if gqa else {}))
            variants[name] = (timer(sdpa), timer(build), sdpa())
            del kd, vd
        except Exception as err:  # noqa: BLE001 - one variant may not exist in this torch
            row[f"sdpa_{name}_error"] = f"{type(err).__name__}: {err}"[:300]
    for name, (t_sdpa, t_gather, _) in variants.items():
        row[f"sdpa_{name}_us"], row[f"gather_{name}_us"] = t_sdpa, t_gather
    if variants:
        name = min(variants, key=lambda k: variants[k][0])
        t_sdpa, t_gather, ref = variants[name]
        row.update(sdpa_variant=name, sdpa_us=t_sdpa, gather_us=t_gather, speedup_vs_sdpa=t_sdpa / kernel_us,
                   speedup_vs_gather_sdpa=(t_sdpa + t_gather) / kernel_us)
        ref = ref.transpose(1, 2).reshape(b * n, hq, dh)
        row["max_abs_diff_vs_sdpa"] = (out.float() - ref.float()).abs().max().item()
    return row


def benchmark(setup: Setup, shapes, check: bool = True, graph_timer=None, log=say) -> dict:
    """The reference check (``check``), then ``measure_shape`` for every (B, P, N) of ``shapes``
    (a shape that fails is recorded, the others go on); the report as a dict, with ``failures``."""
    import triton

    from workbench.attention.triton_tree import tree_attention  # noqa: F401 - fail early if unusable

    cuda = setup.device == "cuda"
    name = torch.cuda.get_device_name() if cuda else f"CPU ({platform.processor() or 'unknown'}), Triton interpreter"
    log(f"# tree attention kernel on {name}\ntorch {torch.__version__}, triton {triton.__version__}; Hq {setup.hq} "
        f"Hkv {setup.hkv} Dh {setup.dh} {setup.dtype}; bandwidth {setup.bandwidth_gbs:.0f} GB/s"
        + ("" if cuda else "\n(interpreter run: timings are meaningless)"))
    report = {"device": name, "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), **asdict(setup), "interpreted": not cuda, "timing": dict(TIMING)}
    t_start, failures = time.perf_counter(), 0
    if check:
        log("\n## correctness against attention_reference")
        report["checks"] = check_against_reference(setup, log)
        failures += sum(not c["ok"] for c in report["checks"])
    timer, gen, rows = make_timer(setup), torch.Generator().manual_seed(setup.seed), []
    log("\n## sweep")
    for b, p, n in shapes:
        try:
            row = measure_shape(setup, timer, b, p, n, gen, graph_timer=graph_timer)
            log(f"  B={b:<3} P={p:<6} N={n:<3} kernel {row['kernel_us']:9.1f} us  sdpa "
                f"{row.get('sdpa_us') or float('nan'):9.1f} us  roofline {100 * row['roofline_frac']:5.1f}%")
        except Exception as err:  # noqa: BLE001 - one bad shape must not lose the sweep
            row = {"B": b, "P": p, "N": n, "error": f"{type(err).__name__}: {err}"[:500]}
            failures += 1
            log(f"  B={b:<3} P={p:<6} N={n:<3} {row['error']}")
        if cuda:  # the shape's tensors are gone: return their memory before the next, larger one
            torch.cuda.empty_cache()
        rows.append(row)
    report.update(results=rows, wall_s=time.perf_counter() - t_start, failures=failures)
    return report
