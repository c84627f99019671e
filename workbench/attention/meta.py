"""The description of one ragged, paged attention call.

Every forward (prefill, decode, draft extend, draft tree level, tree verify) is the same shape
of problem: each request b has

* ``N_b`` query tokens (rows ``cu_q[b]:cu_q[b+1]`` of ``q``),
* ``P_b = prefix_lens[b]`` committed tokens whose K/V already sit in the pool; every query of
  the request may attend all of them (the prefix is never masked and never stored in a mask),
* ``E_b`` extra tokens (written this forward, or tree ancestors from earlier draft levels),
  visible to the queries under a mask.

``kv_slots[cu_kv[b] : cu_kv[b+1]]`` lists the ``P_b + E_b`` pool slots of request b: prefix
first, in position order, then the extra tokens. With ``mask=None`` the extra tokens are the
queries themselves and visibility is causal (query i sees extra j <= i). Otherwise request b's
``[N_b, E_b]`` boolean block sits row-major in the flat ``mask`` from ``mask_offsets[b]``.

This module holds only bookkeeping; ``reference.py`` (PyTorch) and ``triton_tree.py`` (GPU)
compute the attention itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMeta:
    """Filled by ``batch.py`` (for the engine); read by every attention backend."""

    cu_q: torch.Tensor  # [B+1] int32, query row offsets
    cu_kv: torch.Tensor  # [B+1] int32, offsets into kv_slots
    prefix_lens: torch.Tensor  # [B] int32, P_b
    kv_slots: torch.Tensor  # [sum_b P_b + E_b] int64, pool slot of each visible key
    mask: torch.Tensor | None = None  # flat bool, None = causal over the queries
    mask_offsets: torch.Tensor | None = None  # [B] int64, start of request b's block in mask
    # Host copies for Python loops (no device sync in the reference).
    q_lens: list[int] | None = None
    kv_lens: list[int] | None = None
    prefix_list: list[int] | None = None
    # Per-forward memo for backends (e.g. the reference's visibility masks), shared by all layers.
    cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.q_lens is None:
            cu_q = self.cu_q.tolist()
            self.q_lens = [b - a for a, b in zip(cu_q[:-1], cu_q[1:])]
        if self.kv_lens is None:
            cu_kv = self.cu_kv.tolist()
            self.kv_lens = [b - a for a, b in zip(cu_kv[:-1], cu_kv[1:])]
        if self.prefix_list is None:
            self.prefix_list = self.prefix_lens.tolist()
        if (self.mask is None) != (self.mask_offsets is None):
            raise ValueError("mask and mask_offsets must be given together")
        for b, (n, k, p) in enumerate(zip(self.q_lens, self.kv_lens, self.prefix_list)):
            if k < p:
                raise ValueError(f"request {b}: {k} visible keys but a prefix of {p}")
            if self.mask is None and k - p != n:
                raise ValueError(f"request {b}: causal mode needs extra tokens == queries ({k - p} != {n})")

    @property
    def batch_size(self) -> int:
        return len(self.q_lens)

    def extra_lens(self) -> list[int]:
        return [k - p for k, p in zip(self.kv_lens, self.prefix_list)]

    def to(self, device: torch.device) -> "AttentionMeta":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return AttentionMeta(
            cu_q=move(self.cu_q), cu_kv=move(self.cu_kv), prefix_lens=move(self.prefix_lens),
            kv_slots=move(self.kv_slots), mask=move(self.mask), mask_offsets=move(self.mask_offsets),
            q_lens=self.q_lens, kv_lens=self.kv_lens, prefix_list=self.prefix_list,
        )


def build_meta(
    q_lens: list[int],
    prefix_slots: list[list[int]],
    *, extra_slots: list[list[int]],
    masks: list[torch.Tensor] | None = None,
    device: torch.device | str = "cpu",
) -> AttentionMeta:
    """Pack per-request lists into an ``AttentionMeta``.

    ``masks[b]`` is a ``[N_b, E_b]`` bool tensor; ``masks=None`` means causal for every request.
    """
    cu_q, cu_kv, slots, offsets, flat = [0], [0], [], [], []
    off = 0
    for b, (n, pre, ext) in enumerate(zip(q_lens, prefix_slots, extra_slots)):
        cu_q.append(cu_q[-1] + n)
        slots.extend(pre)
        slots.extend(ext)
        cu_kv.append(cu_kv[-1] + len(pre) + len(ext))
        if masks is not None:
            m = masks[b]
            if tuple(m.shape) != (n, len(ext)):
                raise ValueError(f"request {b}: mask shape {tuple(m.shape)} != ({n}, {len(ext)})")
            offsets.append(off)
            flat.append(m.reshape(-1).to(torch.bool))
            off += m.numel()
    i32 = dict(dtype=torch.int32, device=device)
    return AttentionMeta(
        cu_q=torch.tensor(cu_q, **i32),
        cu_kv=torch.tensor(cu_kv, **i32),
        prefix_lens=torch.tensor([len(p) for p in prefix_slots], **i32),
        kv_slots=torch.tensor(slots, dtype=torch.int64, device=device),
        mask=None if masks is None else (torch.cat(flat).to(device) if flat else torch.zeros(0, dtype=torch.bool, device=device)),
        mask_offsets=None if masks is None else torch.tensor(offsets, dtype=torch.int64, device=device),
        q_lens=list(q_lens),
        kv_lens=[len(p) + len(e) for p, e in zip(prefix_slots, extra_slots)],
        prefix_list=[len(p) for p in prefix_slots],
    )
