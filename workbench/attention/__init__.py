"""Attention backends behind one call.

``torch``  : ``sdpa.py``, PyTorch's fused ``scaled_dot_product_attention`` per request; runs
             anywhere and is tested against ``reference.py``, the specification.
``padded`` : ``sdpa.py`` too, but a plain-decoding step (one causal query per request) as one
             padded SDPA call over the whole batch: for large decoding batches (the data generator)
``triton`` : ``triton_tree.py``, a flash-style kernel (GPU, or the CPU under TRITON_INTERPRET=1).
Each takes ``(q, k_pool, v_pool, meta, scale)`` and returns ``[T, Hq, Dh]``. What else the
engine must know of a backend is in ``BACKEND``: whether CUDA graphs can capture it, and whether
it is checked on the device at start-up (``selfcheck.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.attention.meta import AttentionMeta, build_meta
from workbench.attention.reference import attention_reference
from workbench.attention.sdpa import attention_padded, attention_sdpa



@dataclass(frozen=True)
class Backend:
    name: str
    graphable: bool  # no host loop or sync inside: a CUDA graph can capture its launches
    self_check: bool  # checked against the reference on the actual device before first use


BACKEND = {b.name: b for b in (Backend("torch", graphable=False, self_check=False),  # loops over requests
                               Backend("padded", graphable=False, self_check=False),
                               Backend("triton", graphable=True, self_check=True))}
BACKENDS = tuple(BACKEND)


def default_backend(device: torch.device | str) -> str:
    """Triton on a GPU (the kernel reads the prefix once for all tree nodes); torch on a CPU."""
    return "triton" if torch.device(device).type == "cuda" else "torch"


def attend(q, k_pool, v_pool, meta: AttentionMeta, *, scale: float, backend: str = "torch"):
    if backend == "torch":
        return attention_sdpa(q, k_pool, v_pool, meta, scale=scale)
    if backend == "padded":
        return attention_padded(q, k_pool, v_pool, meta, scale=scale)
    if backend == "triton":
        from workbench.attention.triton_tree import tree_attention  # lazy: imports triton

        return tree_attention(q, k_pool, v_pool, meta, scale=scale)
    raise ValueError(f"unknown attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["AttentionMeta", "BACKEND", "BACKENDS", "Backend", "attend", "attention_padded", "attention_reference", "attention_sdpa", "build_meta", "default_backend"]
