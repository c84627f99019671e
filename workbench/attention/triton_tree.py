"""Ragged, paged tree attention in Triton: one kernel for prefill, decode and tree verify.

It computes exactly what ``reference.py`` specifies (see ``meta.py`` for the layout): for every
request b, the ``N_b`` queries attend the ``P_b`` committed prefix keys without any mask and
the ``E_b`` extra keys under the request's ``[N_b, E_b]`` tree mask (or causally when the call
has no mask), with GQA (``G = Hq // Hkv`` query heads per key/value head), an fp32 online
softmax and fp32 accumulation; the output has q's dtype.

Memory traffic
--------------
One program owns one request, one KV head and one block of ``BLOCK_M`` query rows. The rows
pack the request's queries *and* the ``G`` query heads sharing that KV head (row
``r -> (query r // G, head r % G)``), so every K/V tile is gathered from the pool once and
used by all tree nodes and all heads of the group:

* phase 1 reads the committed prefix ONCE per KV head per block of queries, however many tree
  nodes the request verifies, with no mask (bounds checks only);
* phase 2 walks the ``E_b`` extra keys and loads the small ``[N_b, E_b]`` tree mask (or
  computes the causal predicate);
* bytes read ~= (P + E) * Hkv * Dh * 2 (K and V) * element size per block of queries, plus
  the queries and the output. With ``N * G <= BLOCK_M`` (decode, draft levels, a 16-node tree
  at G = 4) the KV cache is read once; larger groups take ``ceil(N * G / BLOCK_M)`` blocks,
  adjacent in launch order, so the repeated prefix tiles mostly come from L2.

A dense masked SDPA instead copies the prefix into a contiguous tensor (a read and a write),
repeats it over the G heads of each group and reads it again with a ``[N, P + E]`` mask.

Split-KV
--------
When ``B * Hkv * query_blocks`` programs would leave most of the GPU idle (one long request),
the prefix is cut into ``num_splits`` slices handled by separate programs; each writes its
normalised partial output and its log-sum-exp (fp32), and a second small kernel merges them.
The last slice also handles the extra keys. With ``num_splits == 1`` the first kernel writes
the output directly.

Runs on CUDA, or on the CPU under ``TRITON_INTERPRET=1``. Triton reads that variable when a
``@triton.jit`` function is defined, its own helpers included: set it before ``triton`` is
first imported in the process.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from workbench.attention.meta import AttentionMeta

LOG2E = 1.4426950408889634
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


@triton.jit
def _online_softmax_step(q, k, v, s_mask, m_i, l_i, acc, qk_scale, DOT_PREC: tl.constexpr):
    """Fold one [BLOCK_N] tile of keys into the running (max, sum, acc) of each row (base 2)."""
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * qk_scale
    s = tl.where(s_mask, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # A row that has seen no key yet keeps m = -inf: subtract 0 instead so exp2 gives 0, not NaN.
    m_base = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_base)
    p = tl.exp2(s - m_base[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
    return m_new, l_i, acc


@triton.jit
def _tree_attn_fwd(
    Q, K, V, Out, PartOut, PartLse,
    CuQ, CuKV, PrefixLens, KvSlots, Mask, MaskOffsets,
    qk_scale,  # softmax scale * log2(e)
    stride_qt, stride_qh,
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_ot, stride_oh,
    stride_ps, stride_pt, stride_ph,  # PartOut [splits, T, Hq, Dh]
    stride_ls, stride_lt,  # PartLse [splits, T, Hq]
    m_blocks, num_splits, split_len,  # split_len: prefix keys per split, a multiple of BLOCK_N
    G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_PREC: tl.constexpr,
    UPCAST: tl.constexpr,  # interpreter only: it cannot compute in bfloat16, so work in fp32
):
    # Axis 0 is fastest in launch order: the query blocks of one (request, KV head, split) run
    # side by side, so their repeated reads of the same prefix tiles mostly hit L2.
    pid = tl.program_id(0)
    kvh = tl.program_id(1)
    b = tl.program_id(2)
    m_blk = pid % m_blocks
    split = pid // m_blocks

    q_start = tl.load(CuQ + b)
    n_q = tl.load(CuQ + b + 1) - q_start
    if m_blk * BLOCK_M >= n_q * G:
        return
    kv_start = tl.load(CuKV + b).to(tl.int64)
    kv_len = tl.load(CuKV + b + 1) - tl.load(CuKV + b)
    n_prefix = tl.load(PrefixLens + b)
    n_extra = kv_len - n_prefix

    offs_m = m_blk * BLOCK_M + tl.arange(0, BLOCK_M)
    row_q = offs_m // G  # query index inside the request
    row_h = kvh * G + offs_m % G  # query head
    row_ok = offs_m < n_q * G
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    tok = (q_start + row_q).to(tl.int64)

    q = tl.load(Q + tok[:, None] * stride_qt + row_h[:, None] * stride_qh + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    k_head = K + kvh * stride_kh
    v_head = V + kvh * stride_vh

    # Phase 1: this split's slice of the committed prefix. Bounds only, no mask.
    p_lo = split * split_len
    p_hi = tl.minimum(n_prefix, p_lo + split_len)
    for start in range(p_lo, p_hi, BLOCK_N):
        cols = start + offs_n
        col_ok = cols < p_hi
        slots = tl.load(KvSlots + kv_start + cols, mask=col_ok, other=0).to(tl.int64)
        k = tl.load(k_head + slots[:, None] * stride_kt + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(v_head + slots[:, None] * stride_vt + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        m_i, l_i, acc = _online_softmax_step(q, k, v, col_ok[None, :], m_i, l_i, acc, qk_scale, DOT_PREC)

    # Phase 2 (last split only): the extra keys, under the tree mask or the causal predicate.
    e_hi = tl.where(split == num_splits - 1, n_extra, 0)
    if CAUSAL:
        # Query i sees extras 0..i: nothing past this block's last query is visible.
        e_hi = tl.minimum(e_hi, (m_blk * BLOCK_M + BLOCK_M - 1) // G + 1)
    else:
        mask_row = Mask + tl.load(MaskOffsets + b) + row_q.to(tl.int64) * n_extra
    for start in range(0, e_hi, BLOCK_N):
        cols = start + offs_n
        col_ok = cols < n_extra
        slots = tl.load(KvSlots + kv_start + n_prefix + cols, mask=col_ok, other=0).to(tl.int64)
        k = tl.load(k_head + slots[:, None] * stride_kt + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(v_head + slots[:, None] * stride_vt + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        if CAUSAL:
            visible = (cols[None, :] <= row_q[:, None]) & col_ok[None, :]
        else:
            bits = tl.load(mask_row[:, None] + cols[None, :], mask=row_ok[:, None] & col_ok[None, :], other=0)
            visible = bits != 0
        m_i, l_i, acc = _online_softmax_step(q, k, v, visible, m_i, l_i, acc, qk_scale, DOT_PREC)

    # Rows that saw no key (padding rows, or a query masked from everything) end with l = 0.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    if SPLIT:
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(PartOut + split * stride_ps + tok[:, None] * stride_pt + row_h[:, None] * stride_ph + offs_d[None, :],
                 out, mask=row_ok[:, None])
        tl.store(PartLse + split * stride_ls + tok * stride_lt + row_h, lse, mask=row_ok)
    else:
        tl.store(Out + tok[:, None] * stride_ot + row_h[:, None] * stride_oh + offs_d[None, :],
                 out.to(Out.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _merge_splits(
    Out, PartOut, PartLse,
    stride_ot, stride_oh,
    stride_ps, stride_pt, stride_ph,
    stride_ls, stride_lt,
    num_splits,
    HEAD_DIM: tl.constexpr,
    SPLITS_P2: tl.constexpr,
):
    """One program per (token, query head): weight each split's output by exp2(lse - max)."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs_s = tl.arange(0, SPLITS_P2)
    offs_d = tl.arange(0, HEAD_DIM)
    s_ok = offs_s < num_splits
    lse = tl.load(PartLse + offs_s * stride_ls + t * stride_lt + h, mask=s_ok, other=float("-inf"))
    m = tl.max(lse, 0)
    m = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse - m)
    part = tl.load(PartOut + offs_s[:, None] * stride_ps + t * stride_pt + h * stride_ph + offs_d[None, :],
                   mask=s_ok[:, None], other=0.0)
    den = tl.sum(w, 0)
    den = tl.where(den == 0.0, 1.0, den)
    out = tl.sum(part * w[:, None], 0) / den
    tl.store(Out + t * stride_ot + h * stride_oh + offs_d, out.to(Out.dtype.element_ty))


def _built_for_interpreter() -> bool:
    """Whether our kernels *and* Triton's own ``@jit`` helpers (``tl.zeros``, ``tl.sum``...) were
    created under TRITON_INTERPRET=1: Triton decides at decoration time, so the variable must be
    set before ``triton`` itself is first imported."""
    jit_cls = getattr(triton.runtime, "JITFunction", None)
    if jit_cls is None:  # pragma: no cover - layout of a future Triton
        return _interpreting()
    return not isinstance(_tree_attn_fwd, jit_cls) and not isinstance(tl.zeros, jit_cls)


INTERPRETED = _built_for_interpreter()


def _next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def _check_inputs(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, meta: AttentionMeta) -> None:
    """Raise ``ValueError`` naming whatever this kernel does not support."""
    for name, t in (("q", q), ("k_pool", k_pool), ("v_pool", v_pool)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"tree_attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(f"tree_attention: {name} must be 3-D ([tokens, heads, head_dim]), got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"tree_attention: {name} has dtype {t.dtype}; supported: float32, float16, bfloat16")
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"tree_attention: {name} must be contiguous in its last (head_dim) dimension, strides {t.stride()}")
    if not (q.dtype == k_pool.dtype == v_pool.dtype):
        raise ValueError(f"tree_attention: q, k_pool and v_pool must share one dtype, got {q.dtype}, {k_pool.dtype}, {v_pool.dtype}")
    if k_pool.shape != v_pool.shape:
        raise ValueError(f"tree_attention: k_pool {tuple(k_pool.shape)} and v_pool {tuple(v_pool.shape)} differ in shape")
    _, hq, dh = q.shape
    hkv = k_pool.shape[1]
    if k_pool.shape[2] != dh:
        raise ValueError(f"tree_attention: q head_dim {dh} != k/v head_dim {k_pool.shape[2]}")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"tree_attention: {hq} query heads is not a multiple of {hkv} key/value heads (GQA needs Hq % Hkv == 0)")
    if dh < MIN_HEAD_DIM or dh > MAX_HEAD_DIM or dh & (dh - 1):
        raise ValueError(f"tree_attention: head_dim {dh} unsupported; it must be a power of two in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}]")
    dev = q.device
    if k_pool.device != dev or v_pool.device != dev:
        raise ValueError(f"tree_attention: q on {dev}, k_pool on {k_pool.device}, v_pool on {v_pool.device}; all must share one device")
    for name in ("cu_q", "cu_kv", "prefix_lens", "kv_slots", "mask", "mask_offsets"):
        t = getattr(meta, name)
        if t is not None and t.device != dev:
            raise ValueError(f"tree_attention: meta.{name} is on {t.device} but q is on {dev}")
    if dev.type == "cpu":
        if not INTERPRETED:
            raise ValueError(
                "tree_attention: CPU tensors need the Triton interpreter; set TRITON_INTERPRET=1 before "
                "triton is first imported in this process (or move the tensors to CUDA)")
    elif dev.type != "cuda":
        raise ValueError(f"tree_attention: device {dev} unsupported (CUDA, or CPU under TRITON_INTERPRET=1)")

    b = meta.batch_size
    if meta.cu_q.numel() != b + 1 or meta.cu_kv.numel() != b + 1 or meta.prefix_lens.numel() != b:
        raise ValueError(
            f"tree_attention: meta sizes disagree: {b} requests but cu_q {meta.cu_q.numel()}, "
            f"cu_kv {meta.cu_kv.numel()}, prefix_lens {meta.prefix_lens.numel()}")
    if len(meta.kv_lens) != b or len(meta.prefix_list) != b:
        raise ValueError("tree_attention: meta host lists (q_lens, kv_lens, prefix_list) have different lengths")
    if sum(meta.q_lens) != q.shape[0]:
        raise ValueError(f"tree_attention: meta has {sum(meta.q_lens)} query rows but q has {q.shape[0]}")
    if meta.kv_slots.numel() != sum(meta.kv_lens):
        raise ValueError(f"tree_attention: meta.kv_slots has {meta.kv_slots.numel()} entries, kv_lens sum to {sum(meta.kv_lens)}")
    if meta.kv_slots.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"tree_attention: meta.kv_slots must be int32 or int64, got {meta.kv_slots.dtype}")
    for name in ("cu_q", "cu_kv", "prefix_lens"):
        t = getattr(meta, name)
        if t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"tree_attention: meta.{name} must be an integer tensor, got {t.dtype}")
    for i, (n, k, p) in enumerate(zip(meta.q_lens, meta.kv_lens, meta.prefix_list)):
        if n < 0 or p < 0 or k < p:
            raise ValueError(f"tree_attention: request {i} has {n} queries, {k} keys, a prefix of {p}")
        if meta.mask is None and k - p != n:
            raise ValueError(f"tree_attention: request {i}: causal mode needs extra keys == queries ({k - p} != {n})")
    if meta.mask is not None:
        if meta.mask.dtype not in (torch.bool, torch.uint8, torch.int8):
            raise ValueError(f"tree_attention: meta.mask must be bool, got {meta.mask.dtype}")
        if meta.mask_offsets is None or meta.mask_offsets.numel() != b:
            raise ValueError("tree_attention: meta.mask needs mask_offsets with one entry per request")
        need = sum(n * (k - p) for n, k, p in zip(meta.q_lens, meta.kv_lens, meta.prefix_list))
        if meta.mask.numel() < need:
            raise ValueError(f"tree_attention: meta.mask has {meta.mask.numel()} entries, the requests need {need}")


def pick_blocks(max_rows: int, head_dim: int, elem_bytes: int = 2) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for ``max_rows = max_N * G`` packed query rows.

    16-bit inputs: BLOCK_M covers the whole group when it can (one read of the KV cache), K/V
    tiles stay <= 16 KiB each so that three pipeline stages fit in shared memory, and 8 warps
    hold a 64 x 128 accumulator without spilling (sm_90: ~210 registers a thread). fp32 is a
    correctness path (its exact dots run on FMA units): small tiles keep it out of local memory.
    """
    if elem_bytes >= 4:
        return 16, 16, 8 if head_dim >= 256 else 4
    block_m = min(64, max(16, _next_pow2(max_rows)))
    block_n = max(16, min(64, (16 * 1024) // (head_dim * elem_bytes)))
    num_warps = 8 if block_m * head_dim >= 64 * 128 else 4
    return block_m, block_n, num_warps


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def pick_num_splits(programs: int, max_prefix: int, block_n: int, device: torch.device) -> int:
    """Split the prefix only when the grid would leave SMs idle and the prefix is long."""
    if device.type != "cuda" or max_prefix < 4 * block_n:
        return 1
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    if programs >= sms:
        return 1
    want = triton.cdiv(2 * sms, max(1, programs))
    most = max(1, max_prefix // (4 * block_n))  # keep >= 4 tiles of keys per split
    return max(1, min(want, most, 64))


@dataclass(frozen=True)
class LaunchPlan:
    block_m: int
    block_n: int
    num_warps: int
    m_blocks: int  # query blocks per (request, KV head)
    num_splits: int  # prefix slices per (request, KV head, query block)
    split_len: int  # prefix keys per slice, a multiple of block_n


def plan_launch(meta: AttentionMeta, hq: int, *, hkv: int, head_dim: int, elem_bytes: int, device: torch.device,
                block_m: int | None = None, block_n: int | None = None, num_splits: int | None = None,
                num_warps: int | None = None) -> LaunchPlan:
    """Blocks, warps and split-KV for one call (host lists only: no device sync)."""
    g = hq // hkv
    max_rows = max(meta.q_lens, default=0) * g
    bm, bn, nw = pick_blocks(max_rows, head_dim, elem_bytes)
    bm, bn, nw = block_m or bm, block_n or bn, num_warps or nw
    if bm < 16 or bn < 16 or bm & (bm - 1) or bn & (bn - 1):
        raise ValueError(f"tree_attention: block_m {bm} and block_n {bn} must be powers of two >= 16")
    m_blocks = max(1, triton.cdiv(max_rows, bm))
    max_prefix = max(meta.prefix_list, default=0)
    splits = num_splits or pick_num_splits(meta.batch_size * hkv * m_blocks, max_prefix, bn, device)
    splits = max(1, min(int(splits), triton.cdiv(max_prefix, bn)))
    split_len = triton.cdiv(triton.cdiv(max(max_prefix, 1), splits), bn) * bn
    splits = max(1, triton.cdiv(max_prefix, split_len))  # no slice past the longest prefix
    return LaunchPlan(bm, bn, num_warps=nw, m_blocks=m_blocks, num_splits=splits, split_len=split_len)


def tree_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    meta: AttentionMeta,
    *,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_splits: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """q: [T, Hq, Dh]; k_pool, v_pool: [S, Hkv, Dh]. Returns [T, Hq, Dh] in q's dtype.

    Same contract as ``attention_reference``. The keyword-only knobs override the heuristics
    (tests and benchmarks); ``num_splits`` > 1 forces split-KV.
    """
    _check_inputs(q, k_pool, v_pool, meta)
    t, hq, dh = q.shape
    hkv = k_pool.shape[1]
    g = hq // hkv
    scale = dh**-0.5 if scale is None else float(scale)
    out = torch.empty_like(q)
    nb = meta.batch_size
    if t == 0 or nb == 0:
        return out
    if nb > 65535 or hkv > 65535:
        raise ValueError(f"tree_attention: {nb} requests x {hkv} KV heads exceed the launch grid (65535 each)")
    plan = plan_launch(meta, hq, hkv=hkv, head_dim=dh, elem_bytes=q.element_size(), device=q.device, block_m=block_m,
                       block_n=block_n, num_splits=num_splits, num_warps=num_warps)
    bm, bn, nw, m_blocks, splits, split_len = (plan.block_m, plan.block_n, plan.num_warps, plan.m_blocks,
                                               plan.num_splits, plan.split_len)

    i32 = lambda x: x if x.dtype == torch.int32 else x.to(torch.int32)  # noqa: E731
    cu_q, cu_kv, prefix = i32(meta.cu_q).contiguous(), i32(meta.cu_kv).contiguous(), i32(meta.prefix_lens).contiguous()
    slots = meta.kv_slots.contiguous()
    causal = meta.mask is None
    if causal:
        mask = offsets = slots  # never read: placeholders for the pointer arguments
    else:
        mask = meta.mask.contiguous()
        mask = mask.view(torch.uint8) if mask.dtype == torch.bool else mask
        if mask.numel() == 0:
            mask = slots
        offsets = meta.mask_offsets.to(torch.int64).contiguous()

    if splits > 1:
        part_out = torch.empty((splits, t, hq, dh), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((splits, t, hq), dtype=torch.float32, device=q.device)
    else:
        part_out = part_lse = out  # never written: placeholders
    launch = {"num_warps": nw}
    if num_stages is not None:
        launch["num_stages"] = num_stages
    grid = (m_blocks * splits, hkv, nb)
    upcast = INTERPRETED and q.dtype == torch.bfloat16
    _tree_attn_fwd[grid](
        q, k_pool, v_pool, out, part_out, part_lse,
        cu_q, cu_kv, prefix, slots, mask, offsets,
        scale * LOG2E,
        q.stride(0), q.stride(1),
        k_pool.stride(0), k_pool.stride(1),
        v_pool.stride(0), v_pool.stride(1),
        out.stride(0), out.stride(1),
        part_out.stride(0) if splits > 1 else 0, part_out.stride(1) if splits > 1 else 0,
        part_out.stride(2) if splits > 1 else 0,
        part_lse.stride(0) if splits > 1 else 0, part_lse.stride(1) if splits > 1 else 0,
        m_blocks, splits, split_len,
        G=g, HEAD_DIM=dh, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, SPLIT=splits > 1,
        DOT_PREC="ieee" if q.dtype == torch.float32 or upcast else "tf32",
        UPCAST=upcast,
        **launch,
    )
    if splits > 1:
        _merge_splits[(t, hq)](
            out, part_out, part_lse,
            out.stride(0), out.stride(1),
            part_out.stride(0), part_out.stride(1), part_out.stride(2),
            part_lse.stride(0), part_lse.stride(1),
            splits,
            HEAD_DIM=dh, SPLITS_P2=max(2, _next_pow2(splits)),
            num_warps=1 if dh <= 64 else 2,
        )
    return out

