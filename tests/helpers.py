"""Shared builders for the engine tests: tiny random targets and heads, fresh prefills."""

from __future__ import annotations

import torch

from workbench.attention.batch import extend_batch
from workbench.kv import SlotAllocator
from workbench.models.draft import random_head
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint


def tiny_pair(path, vocab_size: int = 16, seed: int = 0, head_seed: int = 1, head_std: float = 0.3, **kw):
    """A tiny random target and a random head over a small vocabulary: a head over 16 tokens
    with topk 2-4 covers enough of them that drafts are accepted often, so the walk, commit
    and rollback paths all run."""
    make_tiny_checkpoint(path, vocab_size=vocab_size, seed=seed, **kw)
    target = load_target(path)
    return target, random_head(target, head_seed, std=head_std)


def fresh_prefill(target, tokens: list[int], capture: tuple[int, ...] = ()):
    """Target K/V of every layer and post-norm hidden states for ``tokens`` in a new pool
    (``capture``: with the residual streams a fused head reads in front)."""
    kv = target.new_kv_pool(len(tokens))
    slots = SlotAllocator(len(tokens)).alloc(len(tokens))
    hidden = target(extend_batch([tokens], [[]], [slots], [0], "cpu"), kv, capture)
    return kv, slots, hidden


def random_prompts(n: int, vocab: int, seed: int, lengths=(3, 11, 6, 17)) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (lengths[i % len(lengths)],), generator=gen).tolist() for i in range(n)]
