"""KV storage: per-layer K/V slot pools. It only takes slot ids; ``allocator.py`` decides them."""

from __future__ import annotations

import torch


class KVPool:
    """``k[layer]``, ``v[layer]``: [S, Hkv, Dh]. Memory = 2 * layers * S * Hkv * Dh * bytes."""

    def __init__(self, num_layers: int, num_slots: int, *, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        shape = (num_slots, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @property
    def num_slots(self) -> int:
        return self.k[0].shape[0]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: [T, Hkv, Dh] written at ``slots`` [T]."""
        self.k[layer][slots] = k.to(self.k[layer].dtype)
        self.v[layer][slots] = v.to(self.v[layer].dtype)

    def move(self, moves: list[tuple[int, int]]) -> None:
        """Copy each (from, to) slot's K/V rows to ``to``, in every layer: every row read before
        any is written, so one move's target may be another's source."""
        if not moves:
            return
        device = self.k[0].device
        src = torch.tensor([a for a, _ in moves], device=device)
        dst = torch.tensor([b for _, b in moves], device=device)
        for k, v in zip(self.k, self.v):
            k[dst] = k[src]
            v[dst] = v[src]
