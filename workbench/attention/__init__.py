"""Attention backends behind one call.

``torch``  : ``sdpa.py``, PyTorch's fused ``scaled_dot_product_attention`` per request; runs
             anywhere and is tested against ``reference.py``, the specification.
``padded`` : ``sdpa.py`` too, but a plain-decoding step (one causal query per request) as one
             padded SDPA call over the whole batch: for large decoding batches (the data generator)
``triton`` : ``triton_tree.py``, a flash-style kernel (GPU, or the CPU under TRITON_INTERPRET=1).
Each takes ``(q, k_pool, v_pool, meta, scale)`` and return ``[T, Hq, Dh]``.
"""

from __future__ import annotations

import torch

from workbench.attention.meta import AttentionMeta, build_meta
from workbench.attention.reference import attention_reference
from workbench.attention.sdpa import attention_padded, attention_sdpa

BACKENDS = ("torch", "padded", "triton")


def default_backend(device: torch.device | str) -> str:
    """Triton on a GPU (the kernel reads the prefix once for all tree nodes); torch on a CPU."""
    return "triton" if torch.device(device).type == "cuda" else "torch"


def attend(q, k_pool, v_pool, meta: AttentionMeta, scale: float, backend: str = "torch"):
    if backend == "torch":
        return attention_sdpa(q, k_pool, v_pool, meta, scale)
    if backend == "padded":
        return attention_padded(q, k_pool, v_pool, meta, scale)
    if backend == "triton":
        from workbench.attention.triton_tree import tree_attention  # lazy: imports triton

        return tree_attention(q, k_pool, v_pool, meta, scale)
    raise ValueError(f"unknown attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["AttentionMeta", "BACKENDS", "attend", "attention_padded", "attention_reference", "attention_sdpa", "build_meta", "default_backend"]
