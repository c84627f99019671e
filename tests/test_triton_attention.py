"""The Triton tree-attention kernel against the PyTorch specification (``attention_reference``).

Without CUDA the kernel runs in Triton's interpreter on the CPU. Triton reads
``TRITON_INTERPRET`` when a ``@triton.jit`` function is *defined* -- its own ``tl.zeros``,
``tl.sum``... at ``import triton`` -- so the variable must be set before anything in the
pytest process imports triton: ``tests/conftest.py`` sets it, and so does the top of this
module (for runs that bypass the conftest). If triton was imported earlier without it, this
module fails at collection with that explanation. Shapes stay small: the interpreter is slow.

Tolerances against the fp32-softmax reference, inputs ~N(0, 1), checked elementwise as
``|out - ref| <= atol + rtol * |ref|``: fp32 (2e-5, 1e-5), fp16 (2e-3, 2e-3), bf16 (2e-2, 1e-2).
On the GPU the probabilities are rounded to the input dtype before the P @ V product (the
reference keeps them in fp32) and both outputs are rounded to the input dtype, which may then
differ by one ulp (1/64 for bf16 values in [2, 4)): hence the relative part. The interpreter
computes bf16 in fp32 (it has no bf16 arithmetic), so there the error is mostly the rounding.
"""

from __future__ import annotations

import os
import random

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from workbench.attention import attend, attention_reference, build_meta  # noqa: E402
from workbench.attention import triton_tree  # noqa: E402

if not torch.cuda.is_available() and not triton_tree.INTERPRETED:
    raise RuntimeError(
        "no CUDA and triton was imported before TRITON_INTERPRET=1 was set: run "
        "`TRITON_INTERPRET=1 pytest ...` or keep triton imports out of earlier conftests/modules")

tree_attention = triton_tree.tree_attention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: (2e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 1e-2)}  # atol, rtol
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


# ----------------------------------------------------------------------------------------------
# Case builders


def tree_rows(n_nodes: int, rng: random.Random) -> torch.Tensor:
    """[n, n] ancestor-or-self mask of a random tree whose nodes are in topological order."""
    m = torch.zeros(n_nodes, n_nodes, dtype=torch.bool)
    for i in range(n_nodes):
        if i:
            m[i] = m[rng.randrange(i)]  # parent < i
        m[i, i] = True
    return m


def make_case(
    q_lens, prefix_lens, extra_lens=None, *, hq=4, hkv=2, dh=32, dtype=torch.float32,
    causal=False, mask_kind="tree", seed=0, pool_slack=23, device=DEVICE,
):
    """Random ragged batch: shuffled (non-contiguous) pool slots, per-request masks.

    ``mask_kind``: "tree" -> the N queries are the last N nodes of a random tree over the E
    extras (E >= N: a draft tree level seeing its ancestors); "random" -> independent bits.
    """
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    extra_lens = list(q_lens) if extra_lens is None else list(extra_lens)
    total = sum(prefix_lens) + sum(extra_lens)
    n_slots = total + pool_slack
    perm = torch.randperm(n_slots, generator=gen).tolist()
    pre, ext, masks, pos = [], [], [], 0
    for n, p, e in zip(q_lens, prefix_lens, extra_lens):
        pre.append(perm[pos : pos + p])
        pos += p
        ext.append(perm[pos : pos + e])
        pos += e
        if mask_kind == "tree" and e >= n:
            masks.append(tree_rows(e, rng)[e - n :])
        else:
            masks.append(torch.rand(n, e, generator=gen) < 0.5)
    meta = build_meta(list(q_lens), pre, extra_slots=ext, masks=None if causal else masks, device=device)
    q = torch.randn(sum(q_lens), hq, dh, generator=gen).to(device=device, dtype=dtype)
    k = torch.randn(n_slots, hkv, dh, generator=gen).to(device=device, dtype=dtype)
    v = torch.randn(n_slots, hkv, dh, generator=gen).to(device=device, dtype=dtype)
    return q, k, v, meta


def check(q, k, v, meta, scale=None, **knobs):
    out = tree_attention(q, k, v, meta, scale=scale, **knobs)
    ref = attention_reference(q, k, v, meta, scale=scale)
    assert out.shape == ref.shape and out.dtype == q.dtype and out.device == q.device
    assert torch.isfinite(out.float()).all()
    assert_close(out, ref)
    return out


def assert_close(out, ref):
    if not out.numel():
        return
    atol, rtol = TOL[out.dtype]
    err = (out.float() - ref.float()).abs()
    bound = atol + rtol * ref.float().abs()
    worst = (err / bound).max().item()
    assert worst <= 1.0, f"max abs error {err.max().item():.3g}: {worst:.2f}x the tolerance (atol {atol}, rtol {rtol})"


# ----------------------------------------------------------------------------------------------
# Tree masks


@pytest.mark.parametrize("prefix", [0, 1, 37, 300])
@pytest.mark.parametrize("hq,hkv", [(2, 2), (3, 1), (8, 1)])
def test_tree_mask_prefixes_and_gqa(prefix, hq, hkv):
    q, k, v, meta = make_case([9], [prefix], hq=hq, hkv=hkv, seed=prefix + hq)
    check(q, k, v, meta)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv", [(2, 2), (6, 2), (8, 1)])
def test_tree_mask_half_dtypes(dtype, hq, hkv):
    q, k, v, meta = make_case([7, 12], [37, 5], hq=hq, hkv=hkv, dh=64, dtype=dtype, seed=hq)
    check(q, k, v, meta)


def test_ragged_batch_of_trees():
    q, k, v, meta = make_case([5, 16, 1], [37, 0, 300], hq=6, hkv=2, dh=64, seed=3)
    check(q, k, v, meta)


def test_large_tree_many_query_blocks():
    # N = 64 nodes x G = 3 heads = 192 packed rows: several query blocks per request.
    q, k, v, meta = make_case([64], [40], hq=3, hkv=1, dh=16, seed=4)
    check(q, k, v, meta)


@pytest.mark.parametrize("n,e", [(4, 11), (8, 24), (6, 3)])
def test_rectangular_masks(n, e):
    # Draft tree levels: N new nodes attend E extras (ancestors from earlier levels + themselves).
    q, k, v, meta = make_case([n, n + 1], [37, 2], [e, e + 2], hq=4, hkv=2, seed=n * e)
    check(q, k, v, meta)


def test_random_masks_and_row_without_keys():
    q, k, v, meta = make_case([6, 5], [0, 3], [7, 4], mask_kind="random", hq=4, hkv=1, seed=7)
    # Request 0 has no prefix: blank one of its rows; that query sees nothing and must give 0.
    meta.mask[2 * 7 : 3 * 7] = False
    out = check(q, k, v, meta)
    assert out[2].abs().max().item() == 0.0


# ----------------------------------------------------------------------------------------------
# Causal (prefill / extend: N queries = E extras)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (3, 1), (8, 1)])
def test_causal_ragged(hq, hkv):
    q, k, v, meta = make_case([5, 17, 1], [0, 37, 300], causal=True, hq=hq, hkv=hkv, seed=hq)
    assert meta.mask is None
    check(q, k, v, meta)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_causal_half_dtypes(dtype):
    q, k, v, meta = make_case([20, 3], [1, 50], causal=True, hq=4, hkv=1, dh=64, dtype=dtype, seed=11)
    check(q, k, v, meta)


def test_causal_small_blocks():
    # BLOCK_M = BLOCK_N = 16 -> several query blocks and key tiles, causal loop bound per block.
    q, k, v, meta = make_case([33], [20], causal=True, hq=2, hkv=1, dh=16, seed=12)
    check(q, k, v, meta, block_m=16, block_n=16)


# ----------------------------------------------------------------------------------------------
# Split-KV, blocks, strides, scale, corner cases


@pytest.mark.parametrize("causal", [False, True])
def test_split_kv(causal):
    # 3 splits of the longest prefix; request 1's prefix only fills the first split.
    q, k, v, meta = make_case([4, 6, 2], [300, 40, 0], causal=causal, hq=4, hkv=2, seed=13)
    check(q, k, v, meta, num_splits=3)


def test_split_kv_half():
    q, k, v, meta = make_case([3], [200], hq=8, hkv=1, dh=64, dtype=torch.float16, seed=14)
    check(q, k, v, meta, num_splits=4, block_n=32)


def test_strided_views_and_scale():
    # q sliced out of a fused qkv buffer, K/V sliced out of one [S, 2, Hkv, Dh] pool.
    q0, k0, v0, meta = make_case([5, 3], [37, 12], hq=4, hkv=2, seed=15)
    t, s = q0.shape[0], k0.shape[0]
    qkv = torch.zeros(t, 4 + 2 * 2, 32, device=DEVICE)
    qkv[:, :4] = q0
    kv = torch.stack([k0, v0], dim=1)
    q, k, v = qkv[:, :4], kv[:, 0], kv[:, 1]
    assert not q.is_contiguous() and not k.is_contiguous()
    check(q, k, v, meta, scale=0.3)


def test_empty_requests_and_empty_call():
    q, k, v, meta = make_case([0, 4, 0], [5, 9, 0], hq=2, hkv=1, seed=16)
    check(q, k, v, meta)
    q, k, v, meta = make_case([0], [3], hq=2, hkv=1, seed=17)
    assert tree_attention(q, k, v, meta).shape == (0, 2, 32)


def test_dispatcher():
    q, k, v, meta = make_case([4], [10], hq=2, hkv=1, seed=18)
    out = attend(q, k, v, meta, scale=32**-0.5, backend="triton")
    ref = attend(q, k, v, meta, scale=32**-0.5, backend="torch")
    assert_close(out, ref)


# ----------------------------------------------------------------------------------------------
# Rejected input


def _small():
    return make_case([3], [4], hq=4, hkv=2, seed=19)


def test_rejects_dtype_mismatch():
    q, k, v, meta = _small()
    with pytest.raises(ValueError, match="share one dtype"):
        tree_attention(q.half(), k, v, meta)
    with pytest.raises(ValueError, match="supported: float32, float16, bfloat16"):
        tree_attention(q.double(), k.double(), v.double(), meta)


def test_rejects_bad_head_ratio():
    q, k, v, meta = _small()
    with pytest.raises(ValueError, match="not a multiple of"):
        tree_attention(q[:, :3], k, v, meta)


@pytest.mark.parametrize("dh", [8, 48, 512])
def test_rejects_unsupported_head_dim(dh):
    q, k, v, meta = make_case([3], [4], hq=2, hkv=1, dh=dh, seed=20)
    with pytest.raises(ValueError, match=f"head_dim {dh} unsupported"):
        tree_attention(q, k, v, meta)


def test_rejects_bad_layouts_and_meta():
    q, k, v, meta = _small()
    with pytest.raises(ValueError, match="contiguous in its last"):
        tree_attention(q.transpose(0, 2).contiguous().transpose(0, 2), k, v, meta)
    with pytest.raises(ValueError, match="3-D"):
        tree_attention(q.flatten(1), k, v, meta)
    with pytest.raises(ValueError, match="query rows"):
        tree_attention(q[:2], k, v, meta)
    with pytest.raises(ValueError, match="differ in shape"):
        tree_attention(q, k, v[:-1], meta)


def test_rejects_cpu_without_interpreter(monkeypatch):
    q, k, v, meta = _small()
    if q.device.type != "cpu":
        pytest.skip("CPU-only check")
    monkeypatch.setattr(triton_tree, "INTERPRETED", False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        tree_attention(q, k, v, meta)


# ----------------------------------------------------------------------------------------------
# CUDA only: production shapes


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_llama_shapes(dtype):
    q, k, v, meta = make_case([64, 8, 1, 33], [2000, 511, 4096, 0], hq=32, hkv=8, dh=128, dtype=dtype,
                              seed=21, device="cuda")
    check(q, k, v, meta)
    check(q, k, v, meta, num_splits=5)
    q, k, v, meta = make_case([40, 7], [1000, 3], causal=True, hq=32, hkv=8, dh=128, dtype=dtype,
                              seed=22, device="cuda")
    check(q, k, v, meta)


@gpu
@needs_cuda
@pytest.mark.parametrize("dh,hq,hkv", [(64, 12, 4), (128, 24, 3), (32, 8, 8), (256, 8, 1)])
def test_gpu_head_dims(dh, hq, hkv):
    q, k, v, meta = make_case([16, 5], [700, 90], [20, 5], hq=hq, hkv=hkv, dh=dh, dtype=torch.bfloat16,
                              seed=dh, device="cuda")
    check(q, k, v, meta)


# ----------------------------------------------------------------------------------------------
# CPU-only machines: compile (not run) the kernels for an sm_90 GPU, so that GPU-only compile
# errors (control flow, layouts, shared memory) show up without a GPU. A subprocess, because
# this process runs Triton in interpreter mode.

_COMPILE_FOR_SM90 = r"""
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from workbench.attention import triton_tree as tt

fwd, merge = tt._tree_attn_fwd, tt._merge_splits
CONST = ("G", "HEAD_DIM", "BLOCK_M", "BLOCK_N", "CAUSAL", "SPLIT", "DOT_PREC", "UPCAST", "SPLITS_P2")
INDEX = {"CuQ", "CuKV", "PrefixLens"}

def compile_one(fn, ptr_types, const, num_warps):
    names = fn.arg_names
    sig, attrs = {}, {}
    for i, n in enumerate(names):
        if n in CONST:
            sig[n] = "constexpr"
        elif n in ptr_types:
            sig[n] = ptr_types[n]
            if n not in INDEX:
                attrs[(i,)] = [["tt.divisibility", 16]]  # what the JIT sees for aligned tensors
        else:
            sig[n] = "fp32" if n == "qk_scale" else "i32"
            if n.startswith("stride") or n == "split_len":
                attrs[(i,)] = [["tt.divisibility", 16]]
    k = triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": num_warps})
    assert k.metadata.shared <= 227 * 1024, k.metadata.shared
    return k.metadata.shared

def fwd_ptrs(dt, causal, split):
    p = "*" + dt
    return {"Q": p, "K": p, "V": p, "Out": p, "PartOut": "*fp32" if split else p,
            "PartLse": "*fp32" if split else p, "CuQ": "*i32", "CuKV": "*i32", "PrefixLens": "*i32",
            "KvSlots": "*i64", "Mask": "*i64" if causal else "*u8", "MaskOffsets": "*i64"}

for dt, g, dh, causal, split in [("bf16", 4, 128, False, False), ("fp16", 3, 64, True, True),
                                 ("fp32", 8, 128, False, True)]:
    bm, bn, nw = tt.pick_blocks(64 * g, dh, 4 if dt == "fp32" else 2)
    const = dict(G=g, HEAD_DIM=dh, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, SPLIT=split,
                 DOT_PREC="ieee" if dt == "fp32" else "tf32", UPCAST=False)
    print(dt, bm, bn, nw, compile_one(fwd, fwd_ptrs(dt, causal, split), const, nw))
print("merge", compile_one(merge, {"Out": "*bf16", "PartOut": "*fp32", "PartLse": "*fp32"},
                           dict(HEAD_DIM=128, SPLITS_P2=8), 2))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU tests compile and run the kernels")
def test_kernels_compile_for_sm90():
    import subprocess
    import sys

    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import ASTSource  # noqa: F401
        import triton.backends.nvidia  # noqa: F401
    except ImportError as err:
        pytest.skip(f"this Triton cannot compile for NVIDIA here: {err}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90], env=env, cwd=root,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode and ("TypeError" in proc.stderr or "AttributeError" in proc.stderr) \
            and "CompilationError" not in proc.stderr:
        pytest.skip(f"ahead-of-time compile API differs in this Triton: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_engine_with_triton_backend_matches_torch_backend(tmp_path):
    """End to end: greedy eagle2 on a tiny model through the Triton kernel (the interpreter on a
    CPU) gives the same tokens as through the PyTorch reference."""
    from helpers import random_prompts, tiny_pair
    from workbench.engine.config import SpecConfig
    from workbench.engine.engine import Engine

    target, head = tiny_pair(tmp_path)
    prompts = random_prompts(2, 16, seed=4)
    outputs = {}
    for backend in ("torch", "triton"):
        target.attention_backend = backend
        eng = Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6))
        eng.add_requests(prompts, 8)
        eng.run()
        outputs[backend] = [r.output_ids for r in eng.requests]
    target.attention_backend = "torch"
    assert outputs["triton"] == outputs["torch"]
