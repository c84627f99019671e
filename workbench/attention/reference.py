"""Ragged paged attention in plain PyTorch: the specification every other backend matches.

Per request b (see ``meta.py`` for the layout)::

    K_b = k_pool[kv_slots_b]                       # [P_b + E_b, Hkv, Dh]
    visible[i, j] = True                for j <  P_b  (committed prefix)
                  = mask_b[i, j - P_b]  for j >= P_b  (tree mask, or j - P_b <= i if causal)
    out_b[i, h] = softmax_j(q_b[i, h] . K_b[j, h // G] * scale  where visible) @ V_b[:, h // G]

with ``G = Hq // Hkv`` query heads per key/value head (GQA). Scores and the softmax are
computed in fp32 whatever the input dtype; the output has the dtype of ``q``. A query that sees
no key at all (impossible in the engine: a token always sees itself) gets zeros.
"""

from __future__ import annotations

import torch

from workbench.attention.meta import AttentionMeta


def head_counts(q: torch.Tensor, k_pool: torch.Tensor) -> tuple[int, int, int]:
    """(Hq, Hkv, Dh) of q [T, Hq, Dh] and a pool [S, Hkv, Dh]; GQA needs Hq a multiple of Hkv."""
    hq, dh, hkv = q.shape[1], q.shape[2], k_pool.shape[1]
    if hq % hkv:
        raise ValueError(f"{hq} query heads is not a multiple of {hkv} key/value heads")
    return hq, hkv, dh


def visibility(meta: AttentionMeta, b: int, device: torch.device) -> torch.Tensor:
    """``[N_b, P_b + E_b]`` bool: which keys each query of request b may attend. Built once per
    forward and reused by every layer (``meta.cache``)."""
    key = ("visibility", b)
    if key not in meta.cache:
        meta.cache[key] = _visibility(meta, b, device)
    return meta.cache[key]


def _visibility(meta: AttentionMeta, b: int, device: torch.device) -> torch.Tensor:
    n, k, p = meta.q_lens[b], meta.kv_lens[b], meta.prefix_list[b]
    e = k - p
    if meta.mask is None:
        extra = torch.ones(n, e, dtype=torch.bool, device=device).tril()
    else:
        start = int(meta.mask_offsets[b])
        extra = meta.mask[start : start + n * e].view(n, e).to(device)
    prefix = torch.ones(n, p, dtype=torch.bool, device=device)
    return torch.cat([prefix, extra], dim=1)


def attention_reference(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    meta: AttentionMeta,
    *, scale: float | None = None,
) -> torch.Tensor:
    """q: [T, Hq, Dh]; k_pool, v_pool: [S, Hkv, Dh]. Returns [T, Hq, Dh] in q's dtype."""
    hq, hkv, dh = head_counts(q, k_pool)
    g = hq // hkv
    scale = dh**-0.5 if scale is None else scale
    out = torch.empty_like(q)
    cu_q = [0]
    for n in meta.q_lens:
        cu_q.append(cu_q[-1] + n)
    kv_start = 0
    for b in range(meta.batch_size):
        n, k = meta.q_lens[b], meta.kv_lens[b]
        slots = meta.kv_slots[kv_start : kv_start + k]
        kv_start += k
        if n == 0:
            continue
        qb = q[cu_q[b] : cu_q[b + 1]].float().view(n, hkv, g, dh)  # [N, Hkv, G, Dh]
        kb = k_pool[slots].float()  # [K, Hkv, Dh]
        vb = v_pool[slots].float()  # [K, Hkv, Dh]
        scores = torch.einsum("nhgd,khd->hgnk", qb, kb) * scale  # [Hkv, G, N, K]
        if n > 1 or meta.mask is not None:  # a lone causal query sees every key: nothing to mask
            scores = scores.masked_fill(~visibility(meta, b, q.device), float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with no key -> 0
        ob = torch.einsum("hgnk,khd->nhgd", probs, vb)  # [N, Hkv, G, Dh]
        out[cu_q[b] : cu_q[b + 1]] = ob.reshape(n, hq, dh).to(q.dtype)
    return out
