"""Start-up self-check of the Triton kernel on the device it will run on.

The Triton backend is the default on a GPU, and a kernel that fails to compile for that GPU or
computes something else there would break every forward. So before a model uses it, small
ragged problems (a tree mask after a prefix, a causal extend, GQA, a split prefix) run through
``tree_attention`` and through the reference on the actual device, in the model's dtype; any
exception or a difference past the dtype's tolerance means: use the ``torch`` backend, and say
why in one line. It costs a few compiles (cached by Triton across runs) and a few launches.

On CUDA the check also runs ``ENGINE_CASES``, shaped like the engine's large launches: a verify
of 64 nodes (16-bit inputs: ``BLOCK_M = 64``, the Hopper warp-group path) after a prefix the
default split cuts, and graph buckets of 2 to 32 tokens launched for the bucket's worst case over
the real layout, as a replayed CUDA graph is. The CPU interpreter runs them only when asked.

A GPU fault such as an illegal address is sticky: every later CUDA call in the process fails,
so no fallback can take over. ``raise_if_device_lost`` turns such a failure into
``DeviceFault``, which ends the process with one line naming what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.attention import BACKEND
from workbench.attention.meta import AttentionMeta, build_meta
from workbench.attention.reference import attention_reference

# (atol, rtol) against the fp32-softmax reference, as the kernel's tests.
TOLERANCE = {torch.float32: (2e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 1e-2)}


@dataclass(frozen=True)
class Problem:
    """One ragged problem: request b has ``q_lens[b]`` queries after ``prefix_lens[b]`` prefix
    keys and ``extra_lens[b]`` extra keys (a random tree-like mask, or causal); ``knobs`` go to
    the kernel. ``bucket_keys``: launch it as a graph bucket does, planned for one request
    holding every row after a prefix of ``bucket_keys`` keys (>= every real prefix), the
    device tensors holding the real layout."""

    name: str
    q_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...]
    extra_lens: tuple[int, ...]
    causal: bool = False
    knobs: dict = field(default_factory=dict)
    bucket_keys: int | None = None

    def __post_init__(self):
        if not len(self.q_lens) == len(self.prefix_lens) == len(self.extra_lens):
            raise ValueError(f"{self.name}: one query, prefix and extra length per request")
        if any(e < n or (self.causal and e != n) for n, e in zip(self.q_lens, self.extra_lens)):
            raise ValueError(f"{self.name}: each query is an extra key (causal: the extras are the queries)")


CASES = [
    Problem("tree levels", (4, 1), (19, 5), (6, 1)),  # queries see some extras
    Problem("prefill and extend", (3, 2), (0, 7), (3, 2), causal=True),
    Problem("split prefix", (2,), (70,), (2,), knobs={"num_splits": 2, "block_n": 16}),
]
ENGINE_CASES = [
    Problem("verify", (64, 16), (1000, 37), (64, 16)),  # default plan: BLOCK_M 64, G blocks, split prefix
    Problem("32-token graph bucket", (20, 9, 3), (600, 40, 0), (20, 9, 3), bucket_keys=700),
    Problem("draft level in a graph bucket", (10, 4), (500, 60), (30, 12), bucket_keys=620),
    Problem("decode in a graph bucket", (1, 1), (900, 3), (1, 1), causal=True, bucket_keys=1000),
]


@dataclass
class SelfCheck:
    """What the start-up check found; ``backend`` is what the model should use."""

    backend: str
    ok: bool
    message: str  # one line, for stderr and the app's header


class DeviceFault(SystemExit):
    """The GPU faulted in a way that leaves no CUDA call working in this process. A
    ``SystemExit``: uncaught, Python prints the message as one line and exits with status 1."""


# Words of CUDA's sticky errors, as torch and Triton report them.
_STICKY = ("illegal memory access", "illegal address", "illegal instruction", "misaligned address",
           "unspecified launch failure", "device-side assert", "hardware stack error")


def device_lost(device: torch.device | str, exc: BaseException) -> bool:
    """Did ``exc`` leave every later CUDA call on ``device`` failing? Yes when it names one of
    CUDA's sticky errors, or when the device still fails twice: a non-sticky error is reported
    by the next call and then cleared; a sticky one fails every call after it."""
    if torch.device(device).type != "cuda":
        return False
    if any(w in str(exc).lower() for w in _STICKY):
        return True
    for _ in range(2):
        try:
            torch.cuda.synchronize(device)
            return False
        except RuntimeError:
            continue
    return True


def raise_if_device_lost(device: torch.device | str, exc: BaseException, doing: str) -> None:
    """``DeviceFault`` when ``exc`` (raised while ``doing``) left ``device`` unusable; else
    nothing: the caller may fall back."""
    if device_lost(device, exc):
        text = " ".join(str(exc).split())[:160]
        raise DeviceFault(
            f"fatal: the GPU faulted while {doing} ({type(exc).__name__}: {text}); after such a fault no CUDA "
            "call works in this process, so nothing can fall back. Restart with --attention torch "
            "--no-cuda-graphs, and report the GPU and the torch and triton versions.") from exc


def random_tree_mask(n: int, gen: torch.Generator) -> torch.Tensor:
    """[n, n] ancestor-or-self mask of a random tree in topological order (parent[i] < i)."""
    m = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        m[i] |= m[int(torch.randint(0, i, (1,), generator=gen))]
    return m


def _random_meta(p: Problem, device, gen) -> tuple[AttentionMeta, int]:
    """``p``'s layout over shuffled pool slots, the queries being the last nodes of a random
    tree over the extras; returns (meta, pool size)."""
    size = sum(p.prefix_lens) + sum(p.extra_lens) + 3
    slots = torch.randperm(size, generator=gen).tolist()
    pre, ext, masks, pos = [], [], [], 0
    for n, k, e in zip(p.q_lens, p.prefix_lens, p.extra_lens):
        pre.append(slots[pos : pos + k])
        ext.append(slots[pos + k : pos + k + e])
        pos += k + e
        masks.append(random_tree_mask(e, gen)[e - n :])  # [n, e]
    return build_meta(list(p.q_lens), pre, extra_slots=ext, masks=None if p.causal else masks, device=device), size


def as_bucket(meta: AttentionMeta, bucket_keys: int) -> AttentionMeta:
    """``meta`` as a replayed graph launches it: the host lists (the launch plan) say one
    request with all T rows after a prefix of ``bucket_keys`` keys; the device tensors keep the
    real layout, the slot list and the mask padded to that worst case's sizes."""
    t, b = sum(meta.q_lens), meta.batch_size
    if bucket_keys < max(meta.prefix_list) or sum(meta.kv_lens) > bucket_keys + t:
        raise ValueError(f"{bucket_keys} bucket keys do not cover a prefix of {max(meta.prefix_list)} "
                         f"and {sum(meta.kv_lens)} keys")
    slots = torch.cat([meta.kv_slots, meta.kv_slots.new_zeros(bucket_keys + t - meta.kv_slots.numel())])
    mask = meta.mask
    if mask is not None:  # the host lists' T x T extras: at least t * t mask entries
        mask = torch.cat([mask, mask.new_zeros(max(0, t * t - mask.numel()))])
    return AttentionMeta(cu_q=meta.cu_q, cu_kv=meta.cu_kv, prefix_lens=meta.prefix_lens, kv_slots=slots, mask=mask,
                         mask_offsets=meta.mask_offsets, q_lens=[t] + [0] * (b - 1),
                         kv_lens=[bucket_keys + t] + [0] * (b - 1), prefix_list=[bucket_keys] + [0] * (b - 1))


def make_problem(p: Problem, hq: int, *, hkv: int, dh: int, dtype: torch.dtype, device, gen: torch.Generator):
    """Random inputs of ``p``: q [T, hq, dh], k and v [S, hkv, dh], the exact ``meta`` (for the
    reference) and the ``launched`` one (what the kernel gets: ``as_bucket`` for a bucket case).
    The layout comes from ``gen``; the values are drawn on ``device`` by a generator there, seeded
    from ``gen``, so that a benchmark's large shapes are never built on the host."""
    meta, size = _random_meta(p, device, gen)
    values = torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    q = torch.randn(sum(p.q_lens), hq, dh, generator=values, device=device, dtype=dtype)
    k = torch.randn(size, hkv, dh, generator=values, device=device, dtype=dtype)
    v = torch.randn(size, hkv, dh, generator=values, device=device, dtype=dtype)
    return q, k, v, meta, (meta if p.bucket_keys is None else as_bucket(meta, p.bucket_keys))


def tolerance_ratio(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> tuple[float, float]:
    """(max |out - ref|, max of |out - ref| / (atol + rtol |ref|)) with ``dtype``'s tolerance:
    ``out`` passes when the ratio is at most 1 (a NaN or an infinity never does)."""
    atol, rtol = TOLERANCE.get(dtype, TOLERANCE[torch.bfloat16])
    err = (out.float() - ref.float()).abs()
    if err.numel() == 0:
        return 0.0, 0.0
    return err.max().item(), (err / (atol + rtol * ref.float().abs())).max().item()


def check_kernel(device: torch.device | str, dtype: torch.dtype, *, head_dim: int = 64, num_heads: int = 4,
                 num_kv_heads: int = 2, kernel=None, cases: list[Problem] | None = None) -> str | None:
    """None when ``kernel`` (default: ``tree_attention``) matches the reference on ``cases``
    (default: ``CASES``, and ``ENGINE_CASES`` on CUDA) on ``device`` in ``dtype``; else why
    not, in a few words. ``DeviceFault`` when the failure left the GPU unusable."""
    where = torch.device(device)
    if cases is None:
        cases = CASES + (ENGINE_CASES if where.type == "cuda" else [])
    try:
        if kernel is None:
            from workbench.attention.triton_tree import tree_attention as kernel  # lazy: imports triton
        gen = torch.Generator().manual_seed(0)
        for p in cases:
            q, k, v, meta, launched = make_problem(p, num_heads, hkv=num_kv_heads, dh=head_dim, dtype=dtype,
                                                   device=where, gen=gen)
            out = kernel(q, k, v, launched, scale=None, **p.knobs)
            ref = attention_reference(q, k, v, meta, scale=None)
            if out.shape != ref.shape:
                return f"returned shape {tuple(out.shape)} on the {p.name} case, not {tuple(ref.shape)}"
            err, ratio = tolerance_ratio(out, ref, dtype)
            if not ratio <= 1:  # NaN or inf included
                return f"differs from the reference on the {p.name} case (max abs error {err:.3g})"
    except Exception as exc:  # noqa: BLE001 - any failure (compile, launch, driver) means: do not use it
        raise_if_device_lost(where, exc, "the Triton kernel's self-check ran")
        text = " ".join(str(exc).split())[:160]
        return f"failed to run: {type(exc).__name__}: {text}"
    return None


def choose_attention_backend(requested: str, device: torch.device | str, *, dtype: torch.dtype, head_dim: int,
                             num_heads: int, num_kv_heads: int, kernel=None) -> SelfCheck:
    """``requested`` unless it is ``triton`` and the kernel fails its check here: then ``torch``."""
    where = torch.device(device)
    name = torch.cuda.get_device_name(where) if where.type == "cuda" else where.type
    if not BACKEND[requested].self_check:
        return SelfCheck(requested, True, f"attention backend: {requested} on {name}")
    g = max(1, num_heads // max(1, num_kv_heads))
    problem = check_kernel(where, dtype, head_dim=head_dim, num_heads=2 * g, num_kv_heads=2,
                           kernel=kernel)  # the model's head dim and GQA ratio
    if problem is None:
        return SelfCheck("triton", True, f"attention backend: triton on {name} (self-check passed)")
    return SelfCheck("torch", False, f"attention backend: torch on {name}: the Triton kernel {problem}; "
                                     "falling back to the PyTorch backend")
