"""Rotary position embeddings (RoPE), with Llama-3 frequency scaling.

Layout follows HF's ``rotate_half``: the head dim is split in two halves, not interleaved, so
HF checkpoints load without permuting q/k weights.
"""

from __future__ import annotations

import math

import torch


def inv_frequencies(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    """[Dh/2] fp32 angular frequencies; Llama-3 scaling slows the long wavelengths."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))  # as HF, in fp32
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return inv_freq.float()
    if kind == "linear":
        return (inv_freq / scaling["factor"]).float()
    if kind != "llama3":
        raise ValueError(f"RoPE scaling {kind!r} is not supported (default, linear, llama3)")
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)  # long waves: slow down
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, blended, scaled).float()


class Rotary:
    """cos/sin tables for positions [0, max_pos), grown on demand.

    Growing builds new tables, while a captured CUDA graph still reads the old ones by address
    (``engine/graphs.py`` grows them before its first capture and keeps what it read)."""

    def __init__(self, head_dim: int, theta: float, scaling: dict | None, device, max_pos: int = 4096):
        self.inv_freq = inv_frequencies(head_dim, theta, scaling).to(device)
        self._build(max_pos)

    def _build(self, max_pos: int) -> None:
        t = torch.arange(max_pos, device=self.inv_freq.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)  # [P, Dh/2]
        emb = torch.cat([freqs, freqs], dim=-1)  # [P, Dh]
        self.cos, self.sin = emb.cos(), emb.sin()

    def tables(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The fp32 cos, sin tables [P, Dh], grown first to hold at least ``length`` positions."""
        if length > self.cos.shape[0]:
            self._build(length)
        return self.cos, self.sin

    def __call__(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] -> cos, sin [T, 1, Dh] ready to broadcast over heads."""
        # While a CUDA graph is captured the max cannot be read (a device sync): the graph runner
        # grows the table to the longest position first (``engine/graphs.py``).
        capturing = positions.is_cuda and torch.cuda.is_current_stream_capturing()
        need = int(positions.max()) + 1 if positions.numel() and not capturing else 0
        if need > self.cos.shape[0]:
            self._build(max(need, 2 * self.cos.shape[0]))
        return self.cos[positions, None].to(dtype), self.sin[positions, None].to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, Dh]: x * cos + rotate_half(x) * sin."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
