"""``ForwardBatch``: everything one forward (target or draft) needs.

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


def extend_batch(
    token_ids: list[list[int]],
    prefix_slots: list[list[int]],
    new_slots: list[list[int]],
    start_positions: list[int],
    device: torch.device | str,
) -> ForwardBatch:
    """Causal extend (prefill, decode, draft extend): request b appends ``token_ids[b]`` at
    positions ``start_positions[b] + i``, writing slots ``new_slots[b]``, after its committed
    prefix ``prefix_slots[b]``."""
    ids, pos, slots = [], [], []
    for toks, new, start in zip(token_ids, new_slots, start_positions):
        if len(toks) != len(new):
            raise ValueError(f"{len(toks)} tokens but {len(new)} slots")
        ids.extend(toks)
        pos.extend(range(start, start + len(toks)))
        slots.extend(new)
    i64 = dict(dtype=torch.int64, device=device)
    meta = build_meta([len(t) for t in token_ids], prefix_slots, new_slots, None, device)
    return ForwardBatch(torch.tensor(ids, **i64), torch.tensor(pos, **i64), torch.tensor(slots, **i64), meta)
