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
