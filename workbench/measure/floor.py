"""The memory floor: the fastest a decode step can be on this machine.

At one token per request, a decode step reads every weight of the target once and does little
arithmetic on each, so it cannot finish sooner than the weights' bytes over the machine's read
bandwidth. ``memory_floor`` measures that bandwidth here (the sum of a large fp32 tensor, as
``torch`` runs it on this machine's threads: a read with almost no arithmetic) and divides.

A decode step near its floor is memory-bound, and a forward over a few more tokens should cost
about the same; a verify that costs much more is paying for something else (the few-row products'
path through the BLAS, the work outside the products), which the bench report shows beside it.

**The compute floor and the roofline.** A forward over N tokens also does two floating-point
operations per weight of every product and token (``product_params``; attention over the prefix
adds its own, ``compute_ms``), no sooner than the peak rate ``compute_peak`` measures here (a
large square matrix product in the model's dtype). The **roofline** of a forward is the larger
of the two floors. Each token adds arithmetic and no bytes, so past the **ridge**
(``ridge_tokens``: where the floors meet) a verify cannot cost as little as a decode step's
floor, however good the code: a few tokens on a 2-core CPU, hundreds on a GPU (notebook 06).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a measurement runs: the report reads these functions without it
    import torch
    from torch import nn

READ_MB = 512  # larger than any last-level cache here, so the sum streams from memory
PEAK_SIZE = 1024  # the square product compute_peak times: large enough for the BLAS's best rate, quick


def _looked_up(model: nn.Module):
    """The embedding table when a forward only looks rows up in it (it is not also the lm_head),
    else None."""
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    head = getattr(model, "lm_head", None)
    return embed.weight if embed is not None and (head is None or head.weight is not embed.weight) else None


def weight_bytes(model: nn.Module) -> int:
    """Bytes a decode step reads: every parameter once (a tied lm_head is the embedding), except
    an embedding table that is not the lm_head, of which a step reads only its tokens' rows."""
    skip = _looked_up(model)
    return sum(p.numel() * p.element_size() for p in model.parameters() if p is not skip)


def read_bandwidth(mb: int = READ_MB, repeats: int = 5, device: torch.device | str = "cpu") -> dict:
    """GB/s of one streaming read of ``mb`` MB of fp32 (``x.sum()``) on ``device``, over
    ``repeats`` reads after one untimed: the median and the range (``lo``, ``hi``)."""
    import torch

    from workbench.measure.cost import synced_clock

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
    """The weights' MiB (``weights_mb``), the read bandwidth and the floor they imply for one decode step, in ms
    (``floor_ms``; ``floor_ms_lo``/``_hi`` from the bandwidth's range)."""
    nbytes = weight_bytes(model)
    bw = read_bandwidth(mb, repeats, next(model.parameters()).device)
    return {"weights_mb": round(nbytes / 2**20, 1), "read_gbs": bw,
            "floor_ms": round(nbytes / (bw["gbs"] * 1e9) * 1e3, 2),
            "floor_ms_lo": round(nbytes / (bw["hi"] * 1e9) * 1e3, 2),
            "floor_ms_hi": round(nbytes / (bw["lo"] * 1e9) * 1e3, 2)}


def product_params(model: nn.Module) -> int:
    """Weights that multiply every token in a forward with logits: every 2-D parameter but an
    embedding table that is only looked up."""
    skip = _looked_up(model)
    return sum(p.numel() for p in model.parameters() if p.dim() == 2 and p is not skip)


def compute_peak(dtype: torch.dtype | None = None, size: int = PEAK_SIZE, repeats: int = 5,
                 device: torch.device | str = "cpu") -> dict:
    """GFLOP/s of a ``size`` x ``size`` matrix product in ``dtype`` (None: fp32) on ``device`` (this
    machine's threads), over ``repeats`` products after one untimed: the median and the range."""
    import torch

    from workbench.measure.cost import synced_clock

    dtype = dtype or torch.float32
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=gen).to(device=device, dtype=dtype) for _ in range(2))
    a @ b
    rates = []
    for _ in range(repeats):
        t0 = synced_clock(device)
        a @ b
        rates.append(2 * size**3 / (synced_clock(device) - t0) / 1e9)
    return {"gflops": round(statistics.median(rates), 1), "lo": round(min(rates), 1), "hi": round(max(rates), 1),
            "size": size, "repeats": repeats, "dtype": str(dtype).removeprefix("torch."),
            "threads": torch.get_num_threads()}


def compute_floor(model: nn.Module, prefix: int = 0, repeats: int = 5) -> dict:
    """The model's arithmetic per forward token and the peak it runs at here, for ``compute_ms``:
    ``gflop_per_token`` (the products, 2 per weight), ``attention_gflop_per_key`` (per token and key
    it attends: scores and weighted sum, 2 x 2 x the query width, every layer), ``prefix``, ``peak``."""
    p = next(model.parameters())
    cfg = model.config
    return {"gflop_per_token": 2.0 * product_params(model) / 1e9,
            "attention_gflop_per_key": 4 * cfg.num_heads * cfg.head_dim * cfg.num_layers / 1e9,
            "prefix": prefix, "peak": compute_peak(p.dtype, repeats=repeats, device=p.device)}


def compute_ms(compute: dict, tokens: int) -> float:
    """The compute floor of a forward over ``tokens`` after ``compute["prefix"]`` committed ones, each
    attending to the prefix and the tokens (an upper bound for a tree, whose nodes see fewer), ms."""
    gflop = tokens * (compute["gflop_per_token"] + compute["attention_gflop_per_key"] * (compute["prefix"] + tokens))
    return gflop / compute["peak"]["gflops"] * 1e3


def roofline_ms(floor: dict, compute: dict, tokens: int) -> float:
    """The larger of the memory floor (``memory_floor``) and the compute floor at ``tokens``."""
    return max(floor["floor_ms"], compute_ms(compute, tokens))


def ridge_tokens(floor: dict, compute: dict) -> int:
    """The fewest tokens whose compute floor reaches the memory floor: from there on a forward's
    arithmetic, not its weights' bytes, bounds it."""
    n = 1
    while compute_ms(compute, n) < floor["floor_ms"] and n < 1 << 20:
        n += 1
    return n
