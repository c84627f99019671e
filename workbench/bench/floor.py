"""The memory floor: the fastest a decode step can be on this machine.

At one token per request, a decode step reads every weight of the target once and does little
arithmetic on each, so it cannot finish sooner than the weights' bytes over the machine's read
bandwidth. ``memory_floor`` measures that bandwidth here (the sum of a large fp32 tensor, as
``torch`` runs it on this machine's threads: a read with almost no arithmetic) and divides.

A decode step near its floor is memory-bound, and a forward over a few more tokens should cost
about the same (the weights are read once for all of them); a verify that costs much more than
one decode step is paying for something else (the few-row matrix products' path through the
BLAS, the work outside the products), which the bench report shows beside the floor.
"""

from __future__ import annotations

import statistics

import torch
from torch import nn

from workbench.bench.cost import synced_clock

READ_MB = 512  # larger than any last-level cache here, so the sum streams from memory


def weight_bytes(model: nn.Module) -> int:
    """Bytes a decode step reads: every parameter once (a tied lm_head is the embedding), except
    an embedding table that is not the lm_head, of which a step reads only its tokens' rows."""
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    head = getattr(model, "lm_head", None)
    skip = embed.weight if embed is not None and (head is None or head.weight is not embed.weight) else None
    return sum(p.numel() * p.element_size() for p in model.parameters() if p is not skip)


def read_bandwidth(mb: int = READ_MB, repeats: int = 5, device: torch.device | str = "cpu") -> dict:
    """GB/s of one streaming read of ``mb`` MB of fp32 (``x.sum()``) on ``device``, over
    ``repeats`` reads after one untimed: the median and the range (``lo``, ``hi``)."""
    x = torch.ones(mb * 2**20 // 4, dtype=torch.float32, device=device)
    x.sum()
    gbs = []
    for _ in range(repeats):
        t0 = synced_clock(device)
        x.sum()
        gbs.append(x.numel() * 4 / (synced_clock(device) - t0) / 1e9)
    return {"gbs": round(statistics.median(gbs), 2), "lo": round(min(gbs), 2), "hi": round(max(gbs), 2),
            "mb": mb, "repeats": repeats, "threads": torch.get_num_threads()}


def memory_floor(model: nn.Module, mb: int = READ_MB, repeats: int = 5) -> dict:
    """The weights' MB, the read bandwidth and the floor they imply for one decode step, in ms
    (``floor_ms``; ``floor_ms_lo``/``_hi`` from the bandwidth's range)."""
    nbytes = weight_bytes(model)
    bw = read_bandwidth(mb, repeats, next(model.parameters()).device)
    return {"weights_mb": round(nbytes / 2**20, 1), "read_gbs": bw,
            "floor_ms": round(nbytes / (bw["gbs"] * 1e9) * 1e3, 2),
            "floor_ms_lo": round(nbytes / (bw["hi"] * 1e9) * 1e3, 2),
            "floor_ms_hi": round(nbytes / (bw["lo"] * 1e9) * 1e3, 2)}
