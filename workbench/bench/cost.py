"""What a forward costs on this machine: the numbers behind "when does speculation pay off".

``measure_verify_cost`` times one target forward of N tree nodes (logits included) after a
committed prefix, exactly as verify runs it; N = 1 is a plain decode step. ``measure_draft_cost``
times one draft forward of ``rows`` tokens (one tree level has ``topk`` rows). On a GPU a
forward of 1 and of 64 tokens cost about the same (memory-bound); on a small CPU they do not,
which is why the best tree here is smaller.
"""

from __future__ import annotations

import statistics
import time

import torch

from workbench.attention.meta import build_meta
from workbench.attention.batch import ForwardBatch, extend_batch
from workbench.kv import SlotAllocator


def _time(fn, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _prefilled(model_forward, new_pool, vocab: int, prefix_len: int, extra: int, device):
    """A pool holding ``prefix_len`` committed random tokens; returns (pool, alloc, prefix slots)."""
    alloc = SlotAllocator(prefix_len + extra)
    kv = new_pool(prefix_len + extra)
    prefix = alloc.alloc(prefix_len)
    gen = torch.Generator().manual_seed(0)
    toks = torch.randint(0, vocab, (prefix_len,), generator=gen).tolist()
    if prefix_len:
        model_forward(extend_batch([toks], [[]], [prefix], [0], device), kv)
    return kv, alloc, prefix


def _chain_batch(n: int, prefix: list[int], slots: list[int], vocab: int, device) -> ForwardBatch:
    """n nodes after the prefix under a tree mask (a chain: the cost does not depend on the shape)."""
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    meta = build_meta([n], [prefix], [slots], [mask], device)
    i64 = dict(dtype=torch.int64, device=device)
    ids = torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(n)).to(device)
    pos = torch.arange(len(prefix), len(prefix) + n, **i64)
    return ForwardBatch(ids, pos, torch.tensor(slots, **i64), meta)


def measure_verify_cost(target, sizes=(1, 2, 4, 8, 16, 32, 64), prefix_len: int = 256,
                        repeats: int = 5, warmup: int = 2) -> list[dict]:
    """Median ms of one target forward + logits over N nodes, for each N in ``sizes``."""
    device = target.lm_head.weight.device
    vocab = target.config.vocab_size
    kv, alloc, prefix = _prefilled(target, target.new_kv_pool, vocab, prefix_len, max(sizes), device)
    out = []
    for n in sizes:
        slots = alloc.alloc(n)
        batch = _chain_batch(n, prefix, slots, vocab, device)
        ms = _time(lambda: target.logits(target(batch, kv)), repeats, warmup)
        alloc.free(slots)
        out.append({"tokens": n, "ms": round(ms, 3)})
    return out


def measure_draft_cost(target, head, rows=(1, 4, 10), prefix_len: int = 256, repeats: int = 5,
                       warmup: int = 2) -> list[dict]:
    """Median ms of one draft forward + draft log-probs over ``rows`` tokens (a tree level)."""
    device = target.lm_head.weight.device
    vocab = target.config.vocab_size
    kv, alloc, prefix = _prefilled(
        lambda b, pool: head(torch.zeros(b.num_tokens, target.config.hidden_size, dtype=target.lm_head.weight.dtype,
                                         device=device), b, pool),
        head.new_kv_pool, vocab, prefix_len, max(rows), device)
    out = []
    for n in rows:
        slots = alloc.alloc(n)
        batch = _chain_batch(n, prefix, slots, vocab, device)
        feats = torch.zeros(n, target.config.hidden_size, dtype=target.lm_head.weight.dtype, device=device)
        ms = _time(lambda: head.log_probs(head(feats, batch, kv)), repeats, warmup)
        alloc.free(slots)
        out.append({"rows": n, "ms": round(ms, 3)})
    return out

