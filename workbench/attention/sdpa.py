"""The ``torch`` backend: the reference's contract computed by ``scaled_dot_product_attention``.

``reference.py`` spells the computation out (scores, mask, softmax, weighted sum) and stays the
specification. This is the same contract, per request, through PyTorch's fused SDPA kernels,
which never materialise the ``[Hq, N, K]`` score tensor on the CPU's flash path:

* prefill (no prefix, causal): ``is_causal=True``;
* a lone causal query (plain decoding, draft extend of one pair): no mask at all;
* anything else (a tree mask, or new tokens after a prefix): the ``[N, P + E]`` visibility
  block the reference builds, memoised per forward in ``meta.cache`` and shared by all layers.

``attention_padded`` (the ``padded`` backend) runs a batch of lone causal queries (plain batched
decoding) as one SDPA call, each request's keys gathered into a ``[B, Kmax]`` block, the padding
masked out: the per-request loop's few operator calls per request and layer dominate a step at a
batch of hundreds. Any other forward goes through the loop.

The reference's scores and mask cost most of a long prefill's attention; here it is one fused
call per layer (docs/benchmarks.md, "Measurements behind code choices"). Scores are fp32 (inputs
upcast) and a query with no visible key gets zeros, as in the reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workbench.attention.meta import AttentionMeta
from workbench.attention.reference import head_counts, visibility


def contiguous_run(meta: AttentionMeta, b: int, slots: torch.Tensor) -> slice | None:
    """``slice(first, first + K)`` when request b's slots are one ascending run (each request takes
    the lowest free slots of a run set aside for it at admission, and commit moves a step's
    accepted rows to the front of its slots, so a request's cache is one, in a batch too): then
    every layer reads a view of the pool instead of gathering the whole prefix. Decided once per forward, on the
    CPU only (reading the slot values on a GPU would be a device sync)."""
    key = ("run", b)
    if key not in meta.cache:
        run = None
        if slots.device.type == "cpu" and slots.numel():
            first = int(slots[0])
            if torch.equal(slots, torch.arange(first, first + slots.numel(), dtype=slots.dtype)):
                run = slice(first, first + slots.numel())
        meta.cache[key] = run
    return meta.cache[key]


def attention_sdpa(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    meta: AttentionMeta,
    *, scale: float | None = None,
) -> torch.Tensor:
    """q: [T, Hq, Dh]; k_pool, v_pool: [S, Hkv, Dh]. Returns [T, Hq, Dh] in q's dtype."""
    hq, hkv, dh = head_counts(q, k_pool)
    scale = dh**-0.5 if scale is None else scale
    out = torch.empty_like(q)
    row = start = 0
    for b in range(meta.batch_size):
        n, k, p = meta.q_lens[b], meta.kv_lens[b], meta.prefix_list[b]
        slots = meta.kv_slots[start : start + k]
        start += k
        if n == 0:
            continue
        # 4-D inputs: with 3-D ones the CPU dispatcher falls back to the unfused math path.
        qb = q[row : row + n].float().transpose(0, 1)[None]  # [1, Hq, N, Dh]
        run = contiguous_run(meta, b, slots)
        kb = (k_pool[run] if run else k_pool.index_select(0, slots)).float().transpose(0, 1)[None]  # [1, Hkv, K, Dh]
        vb = (v_pool[run] if run else v_pool.index_select(0, slots)).float().transpose(0, 1)[None]  # [1, Hkv, K, Dh]
        causal = meta.mask is None
        mask = None if causal and (p == 0 or n == 1) else visibility(meta, b, q.device)  # [N, K] or None
        ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, is_causal=causal and p == 0 and n > 1,
                                            scale=scale, enable_gqa=hq != hkv)[0]  # [Hq, N, Dh]
        if mask is not None:
            ob = ob.nan_to_num(0.0)  # a row with no visible key: zeros, as the reference
        out[row : row + n] = ob.transpose(0, 1).to(q.dtype)
        row += n
    return out


def padded_slots(meta: AttentionMeta, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, Kmax]`` pool slots of each request's keys (padding repeats a real slot) and the
    ``[B, 1, 1, Kmax]`` key mask (True = a real key), memoised per forward for every layer."""
    if "padded" not in meta.cache:
        lens = torch.tensor(meta.kv_lens, device=device)
        cols = torch.arange(max(meta.kv_lens), device=device)
        valid = cols[None, :] < lens[:, None]  # [B, Kmax]
        starts = meta.cu_kv[:-1].to(device=device, dtype=torch.long)
        pos = torch.where(valid, starts[:, None] + cols[None, :], starts[:, None])
        meta.cache["padded"] = (meta.kv_slots.to(device)[pos], valid[:, None, None, :])
    return meta.cache["padded"]


def attention_padded(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    meta: AttentionMeta,
    *, scale: float | None = None,
) -> torch.Tensor:
    """``attention_sdpa``'s contract; a step where every request has one causal query (plain
    decoding) runs as one padded SDPA call over the batch, anything else as ``attention_sdpa``."""
    if meta.mask is not None or any(n != 1 for n in meta.q_lens) or min(meta.kv_lens, default=0) < 1:
        return attention_sdpa(q, k_pool, v_pool, meta, scale=scale)
    hq, hkv, dh = head_counts(q, k_pool)
    slots, valid = padded_slots(meta, q.device)
    kb = k_pool[slots].float().transpose(1, 2)  # [B, Hkv, Kmax, Dh]
    vb = v_pool[slots].float().transpose(1, 2)
    qb = q.float()[:, :, None, :]  # [B, Hq, 1, Dh]
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=valid, scale=dh**-0.5 if scale is None else scale,
                                         enable_gqa=hq != hkv)  # [B, Hq, 1, Dh]
    return out[:, :, 0].to(q.dtype)
