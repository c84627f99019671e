"""What one target forward spends on each of its parts, at the token counts of decode and verify.

    python -m experiments.forward_parts [--tokens 1,4,8] [--prefix 128] [--threads 2] [--rounds 5]
    python -m experiments.forward_parts --paths weight-left,onednn-packed [--tokens 1,2,4,8]
    python -m experiments.forward_parts --paths plain,onednn-packed --dtype bf16
    python -m experiments.forward_parts --fusion [--dtype bf16]

A forward over T tokens after a prefix of P is timed whole, and again with one part replaced by
a stand-in that costs next to nothing and keeps the shapes (the products return zeros, a norm
returns its input, RoPE returns its input, attention returns the queries, the KV write writes
nothing). The difference is that part's **marginal cost**: what the forward would save if the
part were free, cold caches and thread wake-ups included, which a profiler's per-operator times
miss (on the 2-core machines a norm costs ~12 us alone and ~40 us inside a forward).
``rest`` is the forward minus every part: embeddings, residual adds, the SwiGLU product, views
and the Python between operators. The stand-ins change the numbers the forward computes, so
only the time is kept; every round times every variant once, in rotating order
(``workbench.timing.interleaved``), and each figure is the median over the rounds with its range.

``--paths`` asks another question: what each few-row implementation of the products
(``workbench.models.linear``) costs inside a whole forward, against what the same products cost
called back to back. Every row count runs each named path (forced at that row count, its packing
untimed); per round and path, the whole forward (logits included) and the products alone (every
``Linear`` of the model applied to a random input of that many rows, a layer's q/k/v and gate/up
through ``project`` as the forward runs them, nothing in between) are timed. A path whose products cost the same alone but more inside the
forward loses there to something the products-alone timing cannot see, and the engine's choice
(``cpu_choices``), which times products alone, cannot see it either.

``--fusion``: the forward by the engine's own choice (``cpu_choices``), with q/k/v and gate/up
each one oneDNN product (``models.linear.FusedPack``) against every projection its own, the two
taking turns; the outputs of the two are checked equal bit for bit before anything is timed.
"""

from __future__ import annotations

import contextlib
import statistics

import torch

from workbench.errors import ArgumentParser, reports_user_errors
from experiments.linear_order import positive_list
from workbench.flags import positive
from workbench.timing import spread

PARTS = ("products", "norms", "rope", "attention", "kv writes")


@contextlib.contextmanager
def without(part: str | None):
    """The target forward with ``part`` replaced by its stand-in (None: the real forward)."""
    import workbench.models.llama as llama
    from workbench.kv.pool import KVPool
    from workbench.models.linear import Linear

    saved = (Linear.forward, llama.RMSNorm.forward, llama.apply_rotary, llama.attend, KVPool.write)
    if part == "products":
        Linear.forward = lambda self, x: x.new_zeros(*x.shape[:-1], self.out_features)
    elif part == "norms":
        llama.RMSNorm.forward = lambda self, x: x
    elif part == "rope":
        llama.apply_rotary = lambda x, cos, sin: x
    elif part == "attention":
        llama.attend = lambda q, *args, **kwargs: q
    elif part == "kv writes":
        KVPool.write = lambda self, layer, slots, k, v: None
    elif part is not None:
        raise ValueError(f"unknown part {part!r}: one of {', '.join(PARTS)}")
    try:
        yield
    finally:
        Linear.forward, llama.RMSNorm.forward, llama.apply_rotary, llama.attend, KVPool.write = saved


def measure(target, tokens: list[int], prefix: int = 128, rounds: int = 5, repeats: int = 5) -> list[dict]:
    """For each token count: the whole forward's ms and each part's marginal ms, as spreads over
    the rounds: [{"tokens": T, "forward": Spread, "parts": {part: Spread}, "rest": Spread}]."""
    from workbench.measure.cost import chain_batch, prefilled, time_samples
    from workbench.timing import interleaved

    pool = prefilled(target, target.new_kv_pool, vocab=target.config.vocab_size, prefix_len=prefix,
                     spare=max(tokens) + 1, device="cpu")
    out = []
    for n in tokens:
        slots = pool.alloc.alloc(n)
        batch = chain_batch(n, pool, slots)

        def timed(part: str | None):
            def run() -> float:
                with without(part):
                    return statistics.median(time_samples(lambda: target.logits(target(batch, pool.kv)), "cpu",
                                                          repeats, warmup=1))
            return run

        values = interleaved({"forward": timed(None), **{p: timed(p) for p in PARTS}}, rounds)
        whole = values["forward"]
        parts = {p: [w - v for w, v in zip(whole, values[p])] for p in PARTS}
        rest = [w - sum(parts[p][r] for p in PARTS) for r, w in enumerate(whole)]
        out.append({"tokens": n, "forward": spread(whole), "parts": {p: spread(v) for p, v in parts.items()},
                    "rest": spread(rest)})
        pool.alloc.free(slots)
    return out


def measure_paths(target, paths: list[str], tokens: list[int], prefix: int = 128, rounds: int = 5,
                  repeats: int = 5) -> list[dict]:
    """For each token count and path: the whole forward's ms and the products' ms alone, as
    spreads over the rounds: [{"tokens": T, "forward": {path: Spread}, "products": {path: Spread}}]."""
    from workbench.measure.cost import chain_batch, prefilled, time_samples
    from workbench.models.linear import ROW_BUCKETS, Linear, LinearOrder, apply_linear_order, project
    from workbench.timing import interleaved

    pool = prefilled(target, target.new_kv_pool, vocab=target.config.vocab_size, prefix_len=prefix, spare=sum(tokens),
                     device="cpu")
    batches = {n: chain_batch(n, pool, pool.alloc.alloc(n)) for n in tokens}
    modules = [m for m in target.modules() if isinstance(m, Linear)]
    dtype = modules[0].weight.dtype
    gen = torch.Generator().manual_seed(0)
    inputs = {(n, k): torch.randn(n, k, generator=gen).to(dtype) for n in tokens for k in {m.in_features for m in modules}}

    # the products as the forward calls them: a projection group (q/k/v, gate/up) through
    # ``project``, which runs it as one product where its layer holds a fused pack
    groups = [(owner, attr, tuple(getattr(owner, name) for name in names)) for owner in target.modules()
              for attr, names in getattr(owner, "projection_groups", {}).items()]
    grouped = {id(m) for *_, members in groups for m in members}
    alone = [m for m in modules if id(m) not in grouped]

    def products(n: int) -> None:
        with torch.inference_mode():
            for owner, attr, members in groups:
                project(inputs[(n, members[0].in_features)], members, getattr(owner, attr))
            for m in alone:
                m(inputs[(n, m.in_features)])

    def timed(path: str, what: str, n: int):
        def run() -> float:
            # the path at this row count's bucket only: MKL's packed path keeps one copy per packed
            # count (2-16x the weights' bytes each), so only one count's copy lives at a time
            bucket = LinearOrder().bucket(n)
            apply_linear_order(target, LinearOrder(tuple(path if b == bucket else "plain" for b in ROW_BUCKETS),
                                                   "forced", dtype=dtype))
            fn = (lambda: target.logits(target(batches[n], pool.kv))) if what == "forward" else (lambda: products(n))
            return statistics.median(time_samples(fn, "cpu", repeats, warmup=1))
        return run

    settings = {(p, w, n): timed(p, w, n) for n in tokens for p in paths for w in ("forward", "products")}
    before = modules[0].order
    try:
        values = interleaved({f"{p}|{w}|{n}": fn for (p, w, n), fn in settings.items()}, rounds)
    finally:
        apply_linear_order(target, before)  # the model's own choice back
    return [{"tokens": n, **{w: {p: spread(values[f"{p}|{w}|{n}"]) for p in paths} for w in ("forward", "products")}}
            for n in tokens]


def measure_fusion(target, tokens: list[int], prefix: int = 128, rounds: int = 5, repeats: int = 5) -> list[dict]:
    """For each token count: the whole forward's ms with the projection groups fused and separate
    (the model's own linear order otherwise), as spreads over the rounds:
    [{"tokens": T, "forward": {"fused": Spread, "separate": Spread}}]. Raises if the two forwards'
    logits differ in any bit (the fused product must be the same computation)."""
    from workbench.measure.cost import chain_batch, prefilled, time_samples
    from workbench.models.linear import Linear, apply_linear_order
    from workbench.timing import interleaved

    order = next(m for m in target.modules() if isinstance(m, Linear)).order
    pool = prefilled(target, target.new_kv_pool, vocab=target.config.vocab_size, prefix_len=prefix, spare=sum(tokens),
                     device="cpu")
    batches = {n: chain_batch(n, pool, pool.alloc.alloc(n)) for n in tokens}

    def forward(n: int) -> torch.Tensor:
        return target.logits(target(batches[n], pool.kv))

    for n in tokens:
        apply_linear_order(target, order, fuse=True)
        fused = forward(n)
        apply_linear_order(target, order, fuse=False)
        if not torch.equal(fused, forward(n)):
            raise AssertionError(f"fused and separate projections differ at {n} tokens")

    def timed(fuse: bool, n: int):
        def run() -> float:
            apply_linear_order(target, order, fuse=fuse)
            return statistics.median(time_samples(lambda: forward(n), "cpu", repeats, warmup=1))
        return run

    try:
        values = interleaved({f"{f}|{n}": timed(f == "fused", n) for n in tokens for f in ("fused", "separate")},
                             rounds)
    finally:
        apply_linear_order(target, order)
    return [{"tokens": n, "forward": {f: spread(values[f"{f}|{n}"]) for f in ("fused", "separate")}} for n in tokens]


def fusion_table(results: list[dict]) -> str:
    lines = ["| tokens | fused q/k/v and gate/up | every projection its own | fused / separate (medians) |",
             "|---|---|---|---|"]
    for r in results:
        f, s = r["forward"]["fused"], r["forward"]["separate"]
        lines.append(f"| {r['tokens']} | {ms(f)} | {ms(s)} | {f.median / s.median:.2f} |")
    return "\n".join(lines)


def paths_table(results: list[dict], paths: list[str]) -> str:
    from workbench.models.linear import PATH_NAMES

    head = ["tokens"] + [f"{PATH_NAMES[p]}: {w}" for p in paths for w in ("forward", "products alone", "rest")]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in results:
        cells = [str(r["tokens"])]
        for p in paths:
            f, pr = r["forward"][p], r["products"][p]
            cells += [ms(f), ms(pr), f"{f.median - pr.median:.1f} ms"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(results: list[dict]) -> str:
    head = ["tokens", "forward", *PARTS, "rest"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in results:
        cells = [str(r["tokens"]), ms(r["forward"])] + [ms(r["parts"][p]) for p in PARTS] + [ms(r["rest"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ms(s) -> str:
    return f"{s.median:.1f} ms ({s.low:.1f} to {s.high:.1f})"


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m experiments.forward_parts", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=None, help="target model directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--tokens", type=positive_list, default="1,4,8", help="comma list of tokens per forward")
    p.add_argument("--prefix", type=positive("--prefix"), default=128, help="committed tokens before them")
    p.add_argument("--threads", type=positive("--threads"), default=2, help="torch CPU threads")
    p.add_argument("--rounds", type=positive("--rounds"), default=5, help="interleaved rounds")
    p.add_argument("--repeats", type=positive("--repeats"), default=5, help="forwards per variant per round (median kept)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="dtype of the target (bf16 runs F.linear and oneDNN's packed path only)")
    p.add_argument("--fusion", action="store_true",
                   help="time the forward with q/k/v and gate/up fused into one oneDNN product each, against "
                        "separate (the engine's own linear order otherwise)")
    p.add_argument("--paths", default=None,
                   help="comma list of few-row linear implementations (plain, weight-left, mkl-packed, onednn-packed): "
                        "time the whole forward and the products alone with each forced, instead of the parts")
    return p


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    from workbench import store
    from workbench.cpu_choices import choose_linear_order, cpu_signature
    from workbench.device import DTYPES
    from workbench.models.linear import apply_linear_order
    from workbench.models.loading import load_target

    from workbench.errors import UserError
    from workbench.models.linear import ROW_BUCKETS, available_paths

    args = build_parser().parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()] if args.paths is not None else None
    dtype = DTYPES[args.dtype]
    if paths is not None and (not paths or any(p not in available_paths(dtype) for p in paths)):
        raise UserError(f"--paths {args.paths}: name one or more of {', '.join(available_paths(dtype))} "
                        f"(the implementations this torch has for {args.dtype})")
    if args.fusion and paths is not None:
        raise UserError("--fusion and --paths ask different questions: give one")
    if paths is not None and max(args.tokens) > ROW_BUCKETS[-1]:
        raise UserError(f"--tokens {max(args.tokens)}: with --paths, at most {ROW_BUCKETS[-1]} (more rows always "
                        "run F.linear)")
    torch.set_num_threads(args.threads)
    target = load_target(store.resolve_target(args.target), dtype)
    if paths is not None:
        results = measure_paths(target, paths, args.tokens, args.prefix, args.rounds, args.repeats)
        print(f"{cpu_signature()}, torch {torch.__version__}, {args.threads} threads, {args.dtype}, prefix {args.prefix}, "
              f"{args.rounds} interleaved rounds of {args.repeats} (median, low to high); each path forced at the "
              "row count; products alone: every Linear of the model in turn on a random input (projection groups as "
              "the forward runs them), nothing between\n")
        print(paths_table(results, paths))
        return 0
    order = choose_linear_order("auto", target)  # the products as the engine runs them
    apply_linear_order(target, order)
    if args.fusion:
        if not order.uses_onednn:
            raise UserError(f"--fusion: the linear order here does not run oneDNN ({order.describe()}), so "
                            "nothing is fused")
        results = measure_fusion(target, args.tokens, args.prefix, args.rounds, args.repeats)
        print(f"{cpu_signature()}, torch {torch.__version__}, {args.threads} threads, {args.dtype}, prefix "
              f"{args.prefix}, {args.rounds} interleaved rounds of {args.repeats} (median, low to high); "
              f"{order.describe()}; outputs equal bit for bit\n")
        print(fusion_table(results))
        return 0
    results = measure(target, args.tokens, args.prefix, args.rounds, args.repeats)
    print(f"{cpu_signature()}, torch {torch.__version__}, {args.threads} threads, {args.dtype}, prefix {args.prefix}, "
          f"{args.rounds} interleaved rounds (median, low to high); {order.describe()}\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
