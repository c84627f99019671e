"""Start-up self-check of the Triton kernel on the device it will run on.

The Triton backend is the default on a GPU, and a kernel that fails to compile for that GPU or
computes something else there would break every forward. So before a model uses it, a few small
ragged problems (a tree mask after a prefix, a causal extend, GQA, a split prefix) run through
``tree_attention`` and through the reference on the actual device, in the model's dtype; any
exception or a difference past the dtype's tolerance means: use the ``torch`` backend, and say
why in one line. It costs a compile (cached by Triton across runs) and a few launches: about a
second on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.attention.meta import build_meta
from workbench.attention.reference import attention_reference

# (atol, rtol) against the fp32-softmax reference, as the kernel's tests.
TOLERANCE = {torch.float32: (2e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 1e-2)}
# (q_lens, prefix_lens, extra_lens, causal, knobs) of each small problem.
CASES = [
    ([4, 1], [19, 5], [6, 1], False, {}),  # tree-level masks: queries see some extras
    ([3, 2], [0, 7], [3, 2], True, {}),  # prefill and extend, causal
    ([2], [70], [2], False, {"num_splits": 2, "block_n": 16}),  # the split-prefix path
]


@dataclass
class SelfCheck:
    """What the start-up check found; ``backend`` is what the model should use."""

    backend: str
    ok: bool
    message: str  # one line, for stderr and the app's header


def _case(q_lens, prefix_lens, extra_lens, causal, hq, hkv, dh, dtype, device, gen):
    slots = torch.randperm(sum(prefix_lens) + sum(extra_lens) + 3, generator=gen).tolist()
    pre, ext, masks, pos = [], [], [], 0
    for n, p, e in zip(q_lens, prefix_lens, extra_lens):
        pre.append(slots[pos : pos + p])
        ext.append(slots[pos + p : pos + p + e])
        pos += p + e
        m = (torch.rand(n, e, generator=gen) < 0.5).tril(e - n)
        m[torch.arange(n), torch.arange(e - n, e)] = True  # every node sees itself
        masks.append(m)
    meta = build_meta(list(q_lens), pre, ext, None if causal else masks, device=device)
    size = len(slots)
    q = torch.randn(sum(q_lens), hq, dh, generator=gen).to(device, dtype)
    k = torch.randn(size, hkv, dh, generator=gen).to(device, dtype)
    v = torch.randn(size, hkv, dh, generator=gen).to(device, dtype)
    return q, k, v, meta


def check_kernel(device: torch.device | str, dtype: torch.dtype, head_dim: int = 64, num_heads: int = 4,
                 num_kv_heads: int = 2, kernel=None) -> str | None:
    """None when ``kernel`` (default: ``tree_attention``) matches the reference on small problems
    on ``device`` in ``dtype``; else why not, in a few words."""
    try:
        if kernel is None:
            from workbench.attention.triton_tree import tree_attention as kernel  # lazy: imports triton
        gen = torch.Generator().manual_seed(0)
        atol, rtol = TOLERANCE.get(dtype, TOLERANCE[torch.bfloat16])
        for q_lens, prefixes, extras, causal, knobs in CASES:
            q, k, v, meta = _case(q_lens, prefixes, extras, causal, num_heads, num_kv_heads, head_dim, dtype,
                                  device, gen)
            out = kernel(q, k, v, meta, None, **knobs).float()
            ref = attention_reference(q, k, v, meta, None).float()
            err = (out - ref).abs()
            if out.shape != ref.shape or not torch.isfinite(out).all() or (err > atol + rtol * ref.abs()).any():
                return f"differs from the reference (max abs error {err.max().item():.3g})"
    except Exception as exc:  # noqa: BLE001 - any failure (compile, launch, driver) means: do not use it
        text = " ".join(str(exc).split())[:160]
        return f"failed to run: {type(exc).__name__}: {text}"
    return None


def choose_attention_backend(requested: str, device: torch.device | str, dtype: torch.dtype, head_dim: int,
                             num_heads: int, num_kv_heads: int, kernel=None) -> SelfCheck:
    """``requested`` unless it is ``triton`` and the kernel fails its check here: then ``torch``."""
    where = torch.device(device)
    name = torch.cuda.get_device_name(where) if where.type == "cuda" else where.type
    if requested != "triton":
        return SelfCheck(requested, True, f"attention backend: {requested} on {name}")
    g = max(1, num_heads // max(1, num_kv_heads))
    problem = check_kernel(where, dtype, head_dim, 2 * g, 2, kernel)  # the model's head dim and GQA ratio
    if problem is None:
        return SelfCheck("triton", True, f"attention backend: triton on {name} (self-check passed)")
    return SelfCheck("torch", False, f"attention backend: torch on {name}: the Triton kernel {problem}; "
                                     "falling back to the PyTorch backend")
