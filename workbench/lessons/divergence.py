"""Where two greedy outputs part, and how close the target's choice was there.

Greedy speculation emits exactly what plain greedy decoding emits, in exact arithmetic. In bf16
the verify forward over many tokens rounds differently from a decode forward over one, so where
the target's two best tokens are nearly tied the argmax can flip, and the outputs part from there
on. ``divergence`` shows the near-tie: the first differing position, both tokens, and the
target's top-2 logit margin at that position (a plain forward over the prompt and the common
prefix, in the target's own dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.attention.batch import extend_batch
from workbench.kv import SlotAllocator


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (one ending early counts); None if equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@dataclass(frozen=True)
class Divergence:
    position: int  # index into the outputs (0 = the prefill's token)
    plain: int | None  # plain greedy's token there (None: that output ended)
    other: int | None
    top: tuple[int, int]  # the target's two best tokens there, best first
    margin: float  # their logit difference (>= 0): small = a near-tie


@torch.no_grad()
def top2_margin(target, tokens: list[int]) -> tuple[tuple[int, int], float]:
    """The target's two best next tokens after ``tokens`` and their logit margin, fresh forward."""
    n = len(tokens)
    kv = target.new_kv_pool(n)
    hidden = target(extend_batch(tokens=[tokens], prefix_slots=[[]], new_slots=[SlotAllocator(n).alloc(n)],
                                 device=target.lm_head.weight.device), kv)  # [n, H]
    logits = target.logits(hidden[-1:])[0].float()  # [V]
    values, ids = logits.topk(2)
    return (int(ids[0]), int(ids[1])), float(values[0] - values[1])


def divergence(target, prompt: list[int], plain: list[int], other: list[int]) -> Divergence | None:
    """Where ``other`` leaves ``plain`` (both continue ``prompt``), with the target's margin there."""
    i = first_difference(plain, other)
    if i is None:
        return None
    top, margin = top2_margin(target, prompt + plain[:i])
    at = lambda out: out[i] if i < len(out) else None  # noqa: E731
    return Divergence(i, at(plain), other=at(other), top=top, margin=margin)
