"""``ForwardBatch``: everything one forward (target or draft) needs, and its two builders: a
causal extend (``extend_batch``: prefill, decode, draft extend) and a tree forward
(``tree_batch``: the verify, a draft tree level).

The engine fills it; the models read it. It lives in the attention layer, beside the
``AttentionMeta`` it carries, so that the models never import the engine (docs/design.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.attention.meta import AttentionMeta, build_meta


@dataclass
class ForwardBatch:
    """T query tokens of B requests, in request order."""

    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64, RoPE positions
    out_slots: torch.Tensor  # [T] int64, pool slots where each token's K/V is written
    meta: AttentionMeta  # what each query may attend

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[0]


def extend_batch(*, tokens: list[list[int]], prefix_slots: list[list[int]], new_slots: list[list[int]],
                 device: torch.device | str) -> ForwardBatch:
    """Causal extend (prefill, decode, draft extend): request b appends ``tokens[b]`` after its
    committed prefix ``prefix_slots[b]``, writing slots ``new_slots[b]``, at positions
    ``len(prefix_slots[b]) + i`` (page size 1: a request's slots are its positions in order),
    each token seeing the prefix and the new tokens up to itself."""
    ids, pos, slots = [], [], []
    for toks, prefix, new in zip(tokens, prefix_slots, new_slots):
        if len(toks) != len(new):
            raise ValueError(f"{len(toks)} tokens but {len(new)} slots")
        ids.extend(toks)
        pos.extend(range(len(prefix), len(prefix) + len(toks)))
        slots.extend(new)
    meta = build_meta([len(t) for t in tokens], prefix_slots, extra_slots=new_slots, masks=None, device=device)
    return _batch(ids, pos, slots=slots, meta=meta, device=device)


def tree_batch(*, tokens: list[list[int]], positions: list[list[int]], prefix_slots: list[list[int]],
               new_slots: list[list[int]], masks: list[torch.Tensor], device: torch.device | str,
               seen_slots: list[list[int]] | None = None) -> ForwardBatch:
    """Tree forward (the verify, a draft tree level): request b's nodes ``tokens[b]`` at
    ``positions[b]`` (a node's position is the prefix length plus its depth, less one for the
    head's levels), writing ``new_slots[b]``; each node sees the whole prefix ``prefix_slots[b]``
    and, under ``masks[b]`` ([N_b, E_b] bool, row i: node i's ancestors and itself), the extra
    keys ``seen_slots[b]`` (default ``new_slots[b]``, the nodes themselves; a draft level: every
    scratch slot its tree wrote so far, this level's included)."""
    seen = new_slots if seen_slots is None else seen_slots
    for b, (toks, pos, new) in enumerate(zip(tokens, positions, new_slots)):
        if not len(toks) == len(pos) == len(new):
            raise ValueError(f"request {b}: {len(toks)} tokens, {len(pos)} positions, {len(new)} slots")
    meta = build_meta([len(t) for t in tokens], prefix_slots, extra_slots=seen, masks=masks, device=device)
    return _batch([x for t in tokens for x in t], [p for ps in positions for p in ps],
                  slots=[s for ns in new_slots for s in ns], meta=meta, device=device)


def _batch(ids: list[int], positions: list[int], *, slots: list[int], meta: AttentionMeta, device) -> ForwardBatch:
    i64 = dict(dtype=torch.int64, device=device)
    return ForwardBatch(torch.tensor(ids, **i64), torch.tensor(positions, **i64), torch.tensor(slots, **i64), meta)
