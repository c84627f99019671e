"""What a forward costs on this machine: the numbers behind "when does speculation pay off".

``measure_verify_cost`` times one target forward of N tree nodes (logits included) after a
committed prefix, exactly as verify runs it; N = 1 is a plain decode step. ``measure_draft_cost``
times one draft forward of ``rows`` tokens (one tree level has ``topk`` rows). Either runs
eagerly or, ``cuda_graphs=True``, replayed from the engine's CUDA graphs. On a GPU a forward of
1 and of 64 tokens cost about the same (memory-bound); on a small CPU they do not, which is why
the best tree here is smaller.

Both go through one procedure, ``forward_samples``: a pool holding a committed random prefix
(``prefilled``), then for each size a chain of new tokens after it, timed by ``time_ms``, whose
clock (``synced_clock``) is read after a sync on CUDA, as every timer of the benchmarks is.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass

import torch

from workbench.attention.batch import ForwardBatch, extend_batch, tree_batch
from workbench.kv import SlotAllocator


def synced_clock(device: torch.device | str) -> float:
    """perf_counter, after ``device`` has finished the work queued so far (CUDA is asynchronous:
    without the sync, the clock would stop before the last kernels ran)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def time_samples(fn, device: torch.device | str, repeats: int, warmup: int) -> list[float]:
    """ms of each of ``repeats`` calls of ``fn()`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = synced_clock(device)
        fn()
        times.append((synced_clock(device) - t0) * 1e3)
    return times


def time_ms(fn, device: torch.device | str, repeats: int, warmup: int) -> float:
    """Median ms of ``fn()`` over ``repeats`` calls after ``warmup`` untimed ones."""
    return statistics.median(time_samples(fn, device, repeats, warmup))


@dataclass
class Prefilled:
    """A KV pool holding ``prefix`` (slots of committed random tokens) and the allocator of its
    other slots, for a model of ``vocab`` tokens on ``device``."""

    kv: object
    alloc: SlotAllocator
    prefix: list[int]
    vocab: int
    device: torch.device


def prefilled(forward, new_pool, *, vocab: int, prefix_len: int, spare: int, device) -> Prefilled:
    """``prefix_len`` random tokens run through ``forward(batch, kv)`` into a pool of
    ``new_pool(prefix_len + spare)`` slots."""
    alloc = SlotAllocator(prefix_len + spare)
    kv = new_pool(prefix_len + spare)
    prefix = alloc.alloc(prefix_len)
    toks = torch.randint(0, vocab, (prefix_len,), generator=torch.Generator().manual_seed(0)).tolist()
    if prefix_len:
        forward(extend_batch(tokens=[toks], prefix_slots=[[]], new_slots=[prefix], device=device), kv)
    return Prefilled(kv, alloc, prefix=prefix, vocab=vocab, device=torch.device(device))


def chain_batch(n: int, pool: Prefilled, slots: list[int]) -> ForwardBatch:
    """n nodes after the pool's prefix under a tree mask (a chain: the cost does not depend on
    the tree's shape), written to ``slots``."""
    ids = torch.randint(0, pool.vocab, (n,), generator=torch.Generator().manual_seed(n)).tolist()
    return tree_batch(tokens=[ids], positions=[list(range(len(pool.prefix), len(pool.prefix) + n))],
                      prefix_slots=[pool.prefix], new_slots=[slots], masks=[torch.ones(n, n, dtype=torch.bool).tril()],
                      device=pool.device)


def requests_batch(n: int, prefixes: list[list[int]], new_slots: list[list[int]], device) -> ForwardBatch:
    """One forward's batch of as many requests as ``prefixes``, each of n new tokens after its own
    committed slots (written to its ``new_slots``): a plain decode step's (n = 1) or a verify's
    (a chain under the tree mask: the cost does not depend on the tree's shape)."""
    if n == 1:
        return extend_batch(tokens=[[1]] * len(prefixes), prefix_slots=prefixes, new_slots=new_slots, device=device)
    return tree_batch(tokens=[[1] * n] * len(prefixes), positions=[list(range(len(p), len(p) + n)) for p in prefixes],
                      prefix_slots=prefixes, new_slots=new_slots,
                      masks=[torch.ones(n, n, dtype=torch.bool).tril()] * len(prefixes), device=device)


def requests_forward_ms(target, kv, alloc, *, n: int, prefixes: list[list[int]], device, owners=None) -> float:
    """ms of one target forward and its logits over as many requests as ``prefixes``, n new tokens
    each after its own committed slots (``requests_batch``), their slots taken from ``alloc`` (from
    each request's run where ``owners`` names them: ``SlotAllocator.reserve``) and freed after."""
    new = [alloc.alloc(n, owner=o) for o in (owners if owners is not None else [None] * len(prefixes))]
    try:
        batch = requests_batch(n, prefixes, new, device)
        t0 = synced_clock(device)
        target.logits(target(batch, kv))
        return (synced_clock(device) - t0) * 1e3
    finally:
        for slots in new:
            alloc.free(slots)


def forward_samples(pool: Prefilled, sizes, *, forward, repeats: int = 5, warmup: int = 2) -> list[list[float]]:
    """``repeats`` ms of ``forward(batch)`` on a chain of n new tokens after the pool's prefix, for
    each n in ``sizes`` (the chain's slots freed after each). The sizes take
    turns (``workbench.timing.interleaved``: one forward of each a round, the first rotating, after
    ``warmup`` untimed rounds), so a brief disturbance lands on every size alike, not on all the
    repeats of one (the decode step's would skew every verify / decode ratio)."""
    return case_samples(pool, [(n, forward, None) for n in sizes], repeats, warmup)


def case_samples(pool: Prefilled, cases, repeats: int = 5, warmup: int = 2) -> list[list[float]]:
    """``forward_samples`` over ``cases``, each ``(n, forward, context)``: n new tokens through
    ``forward(batch)``, inside ``context()`` when it is not None (entered before the clock starts),
    all cases taking turns as the sizes do there. Returns ``repeats`` ms per case."""
    from workbench.timing import interleaved

    def one(n: int, forward, context):
        def run() -> float:
            slots = pool.alloc.alloc(n)
            try:
                batch = chain_batch(n, pool, slots)
                with context() if context is not None else contextlib.nullcontext():
                    return time_samples(lambda: forward(batch), pool.device, 1, 0)[0]
            finally:
                pool.alloc.free(slots)
        return run

    values = interleaved({i: one(*case) for i, case in enumerate(cases)}, repeats, warmup)
    return [values[i] for i in range(len(cases))]


def measure_verify_cost(target, sizes=(1, 2, 4, 8, 16, 32, 64), prefix_len: int = 256, repeats: int = 5,
                        warmup: int = 2, cuda_graphs: bool = False) -> list[dict] | None:
    """ms of one target forward + logits over N nodes, for each N in ``sizes`` (the rounds read by
    their paired differences: ``_cost_rows``), with the fastest and slowest repeat (``lo``, ``hi``).
    ``cuda_graphs``: replayed by ``GraphedTarget`` (None when its capture failed: it ran eagerly)."""
    device = target.lm_head.weight.device
    pool = prefilled(target, target.new_kv_pool, vocab=target.config.vocab_size, prefix_len=prefix_len,
                     spare=max(sizes) + 1, device=device)
    runner = None
    if cuda_graphs:
        from workbench.engine.graphs import GraphedTarget, make_buckets

        runner = GraphedTarget(target, pool.kv, pool.alloc.alloc(1)[0], max_keys=pool.kv.num_slots,
                               buckets=make_buckets((1, 2), sizes))
    forward = runner if runner is not None else (lambda batch: target.logits(target(batch, pool.kv)))
    samples = forward_samples(pool, sizes, forward=forward, repeats=repeats, warmup=warmup)
    if runner is not None and not runner.replays:
        return None
    return _cost_rows(sizes, samples)


def measure_verify_cost_beside(target, context, sizes=(1, 2, 4, 8, 16, 32, 64), prefix_len: int = 256,
                               repeats: int = 5, warmup: int = 2) -> tuple[list[dict], list[dict]]:
    """``measure_verify_cost``'s curve twice in one measurement: as the target runs, and inside
    ``context()`` (``workbench.models.linear.plain_products``, say); every (setting, size) pair
    takes its turn in each round, so the two curves share whatever the machine did meanwhile.
    Returns (the curve as it runs, the curve inside the context)."""
    device = target.lm_head.weight.device
    pool = prefilled(target, target.new_kv_pool, vocab=target.config.vocab_size, prefix_len=prefix_len,
                     spare=max(sizes) + 1, device=device)
    forward = lambda batch: target.logits(target(batch, pool.kv))  # noqa: E731
    samples = case_samples(pool, [(n, forward, None) for n in sizes] + [(n, forward, context) for n in sizes],
                           repeats, warmup)
    return _cost_rows(sizes, samples[: len(sizes)]), _cost_rows(sizes, samples[len(sizes):])


def _cost_rows(sizes, samples: list[list[float]]) -> list[dict]:
    """Each size's ms as ``timing.paired_points`` reads the rounds (the smallest size's median, each
    other that plus the median of each round's own difference from it: the sizes of a round are
    timed within a second of each other), with its fastest and slowest repeat."""
    ms = dict(_paired(sizes, samples))
    return [{"tokens": n, "ms": round(ms[n], 3), "lo": round(min(t), 3), "hi": round(max(t), 3)}
            for n, t in zip(sizes, samples)]


def _paired(sizes, samples: list[list[float]]) -> list[tuple[int, float]]:
    """``samples`` (per size, one value per round, the rounds aligned) read by ``paired_points``."""
    from workbench.timing import paired_points

    return paired_points([dict(zip(sizes, values)) for values in zip(*samples)])


def measure_draft_cost(target, head, *, rows=(1, 4, 10), prefix_len: int = 256, repeats: int = 5, warmup: int = 2,
                       cuda_graphs: bool = False) -> list[dict] | None:
    """ms of one draft forward + draft log-probs over ``rows`` tokens (a tree level), the rounds read
    by their paired differences as ``_cost_rows`` reads a verify's.
    ``cuda_graphs``: replayed by ``GraphedDraft`` (None when its capture failed: it ran eagerly)."""
    w = target.lm_head.weight
    feats = torch.zeros(max(rows), target.config.hidden_size, dtype=w.dtype, device=w.device)  # [R, H]
    pool = prefilled(lambda batch, kv: head(feats.new_zeros(batch.num_tokens, feats.shape[1]), batch, kv),
                     head.new_kv_pool, vocab=target.config.vocab_size, prefix_len=prefix_len, spare=max(rows) + 1,
                     device=w.device)
    runner = None
    if cuda_graphs:
        from workbench.engine.graphs import GraphedDraft, make_buckets

        runner = GraphedDraft(head, pool.kv, pool.alloc.alloc(1)[0], max_keys=pool.kv.num_slots,
                              buckets=make_buckets((1, 2), rows))
    draft = runner if runner is not None else (lambda features, batch: head(features, batch, pool.kv))
    samples = forward_samples(pool, rows, forward=lambda batch: head.log_probs(draft(feats[: batch.num_tokens], batch)),
                              repeats=repeats, warmup=warmup)
    return None if runner is not None and not runner.replays else \
        [{"rows": n, "ms": round(ms, 3)} for n, ms in _paired(rows, samples)]
