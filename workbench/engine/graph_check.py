"""Start-up check of CUDA-graph replay on the device it will run on, like the kernel's.

The graph runners (``graphs.py``) are tested against eager forwards on the CPU (padding, the
static buffers, the worst-case launch plan) and, GPU-marked, on a GPU; but a graph that replays
something else on a GPU no test has met would silently change every token. So the first engine
whose ``cuda_graphs`` is left to its default, on a CUDA device with the triton backend, runs
this check once per model (the result is kept for the model's life):

* the target: its forward + logits on two requests after prefixes of ``PREFIXES`` tokens, a
  decode (a 2-token bucket) and a verify of ``VERIFY_NODES`` tree nodes (a 32-token bucket with
  a padding request: a launch planned for the worst case, the prefix split, ``BLOCK_M = 64``);
* the draft head, for a speculative engine: one tree level of ``LEVEL_ROWS`` rows a request,
  each seeing its ancestor from an earlier level (a 16-token bucket, extra keys past the rows).

Each runs eagerly and replayed from a freshly captured graph. Replay must give the same tokens
(argmax; a row whose top two eager logits are within the tolerance may go either way) and
logits within ``TOLERANCE`` x (1 + the largest |logit|). Otherwise, or when a capture raises,
the engines' default is eager for that model, and stderr gets one line, ``warning: CUDA graphs
off on <GPU>: ...``; after a graph failed in an engine on that device (``graphs.FAILED``, said
there), the check answers off without another line. A fault that leaves the GPU unusable ends
the process (``DeviceFault``).
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, replace

import torch

from workbench.attention import BACKEND
from workbench.attention.batch import ForwardBatch, extend_batch, tree_batch
from workbench.attention.selfcheck import raise_if_device_lost, random_tree_mask
from workbench.engine import graphs
from workbench.kv import SlotAllocator

# max |graph logit - eager logit| allowed, relative to 1 + the largest |eager logit|. Chosen, not
# measured: replay may differ from eager by rounding (padded GEMM shapes, another launch plan).
TOLERANCE = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}
PREFIXES = (600, 37)  # committed tokens of the two requests (at most half the context)
VERIFY_NODES = (20, 9)  # tree nodes verified per request: 29 rows, a 32-token bucket
LEVEL_ROWS = 5  # draft rows per request: 10 rows, a 16-token bucket


@dataclass(frozen=True)
class GraphCheck:
    ok: bool
    message: str  # one line
    error: float | None = None  # the largest |graph - eager| logit seen, over 1 + the largest |logit|


# model -> ((device, dtype, backend), GraphCheck): a check costs captures, so it runs once a model.
_RESULTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def graphs_by_default(target, draft=None) -> bool:
    """The engine's default for ``cuda_graphs``: a CUDA device, the triton backend and a
    graphable attention backend (``attention.BACKEND``) and a
    passed check of the target (and of ``draft``, when given)."""
    device = target.lm_head.weight.device
    if not graphs.is_cuda(device) or not BACKEND[target.attention_backend].graphable:
        return False
    return check_graphs(target, draft).ok


def check_graphs(target, draft=None) -> GraphCheck:
    """The check of ``target`` (and ``draft``), run once per model on its device, dtype and
    backend; the one warning line is printed when a check fails."""
    w = target.lm_head.weight
    key = (w.device, w.dtype, target.attention_backend)
    found = _checked(target, key, "target forward", lambda: _check_target(target))
    if found.ok and draft is not None:
        drafted = _checked(draft, key, "draft forward", lambda: _check_draft(draft))
        found = drafted if not drafted.ok else replace(found, error=max(found.error, drafted.error))
    return found


def _checked(module, key: tuple, what: str, run) -> GraphCheck:
    """``module``'s kept result for ``key`` (device, dtype, backend), else ``run()``'s (under the
    step lock: its captures must not meet another thread's step, nor two threads check twice)."""
    device = key[0]
    with graphs.step_lock(device):
        if str(device) in graphs.FAILED:  # a graph already failed here, and said so: off, silently
            return GraphCheck(False, f"CUDA graphs off on {device}: {graphs.FAILED[str(device)]}; running eagerly")
        if module in _RESULTS and _RESULTS[module][0] == key:
            return _RESULTS[module][1]
        try:
            problem, error = run()
        except Exception as exc:  # noqa: BLE001 - whatever fails here would fail in the engine: eager
            raise_if_device_lost(device, exc, f"the CUDA-graph check of the {what} ran")
            problem, error = (f"could not be captured and replayed ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:160]})"), None
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
        if problem is None:
            result = GraphCheck(True, f"CUDA graphs on {name} (replay equals eager: logit error {error:.2g} of "
                                      "the scale)", error)
        else:
            result = GraphCheck(False, f"CUDA graphs off on {name}: the {what} {problem}; running eagerly", error)
            print(f"warning: {result.message}", file=sys.stderr, flush=True)
        _RESULTS[module] = (key, result)
        return result


def _compare(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> tuple[str | None, float | None]:
    """(why logits ``got`` [R, V] (replayed) are not ``want`` (eager), or None; their largest
    difference over 1 + the largest |eager logit|)."""
    got, want = got.float(), want.float()
    if got.shape != want.shape or not torch.isfinite(got).all():
        return f"replayed gives logits of shape {tuple(got.shape)}, not all finite", None
    scale = 1 + want.abs().max().item()
    error = (got - want).abs().max().item() / scale
    tol = TOLERANCE.get(dtype, TOLERANCE[torch.bfloat16])
    if error > tol:
        return f"replayed differs from eager (logit error {error:.3g} of the scale > {tol:g})", error
    top2 = want.topk(min(2, want.shape[-1]), dim=-1).values
    clear = top2[:, 0] - top2[:, -1] > tol * scale  # rows whose eager token is not a near-tie
    flipped = ((got.argmax(-1) != want.argmax(-1)) & clear).sum().item()
    return (f"replayed picks another token than eager in {flipped} rows" if flipped else None), error


def _replay(runner, batch: ForwardBatch, features=None) -> tuple[torch.Tensor, ...]:
    """Capture ``batch``'s bucket (raising, not falling back, when that fails), then replay."""
    bucket = runner.bucket_for(batch)
    if bucket is None:
        raise ValueError(f"the check's batch of {batch.num_tokens} tokens fits no bucket")
    runner.capture(bucket, batch.meta.mask is not None)
    replays = runner.replays
    out = runner.run(batch, features)
    if runner.replays != replays + 1:
        raise RuntimeError("the captured graph did not replay")
    return out


def _prefilled(target, forward, *, new_pool, device, gen, spare: int):
    """A pool from ``new_pool`` (+ one scratch slot) holding the K/V that ``forward(batch, pool)``
    writes for a prefill of the two requests (random tokens of ``target``'s vocabulary).
    Returns pool, allocator, prefix lengths and slots."""
    lens = [min(p, target.config.max_position_embeddings // 2) for p in PREFIXES]
    alloc = SlotAllocator(sum(lens) + spare)
    kv = new_pool(alloc.num_slots + 1)
    slots = [alloc.alloc(n) for n in lens]
    prompts = [torch.randint(target.config.vocab_size, (n,), generator=gen).tolist() for n in lens]
    forward(extend_batch(tokens=prompts, prefix_slots=[[] for _ in lens], new_slots=slots, device=device), kv)
    return kv, alloc, lens, slots


def _tree_batch(lens, slots, *, new, earlier, masks, gen, vocab, device) -> ForwardBatch:
    """Per request b, the nodes ``new[b]`` after its prefix, seeing ``earlier[b] + new[b]``
    under ``masks[b]`` (ancestors and self), at position prefix + depth."""
    pos = [[n + int(row.sum()) - 1 for row in m] for n, m in zip(lens, masks)]  # depth: ancestors seen
    ids = [torch.randint(vocab, (len(p),), generator=gen).tolist() for p in pos]
    return tree_batch(tokens=ids, positions=pos, prefix_slots=slots, new_slots=new,
                      seen_slots=[e + s for e, s in zip(earlier, new)], masks=masks, device=device)


def _check_target(target) -> tuple[str | None, float | None]:
    device, dtype = target.lm_head.weight.device, target.lm_head.weight.dtype
    gen = torch.Generator().manual_seed(0)
    kv, alloc, lens, slots = _prefilled(target, target, new_pool=target.new_kv_pool, device=device, gen=gen,
                                        spare=2 + sum(VERIFY_NODES))
    runner = graphs.GraphedTarget(target, kv, alloc.num_slots, alloc.num_slots + 1)
    vocab = target.config.vocab_size
    decode = extend_batch(tokens=[[1] for _ in lens], prefix_slots=slots, new_slots=[alloc.alloc(1) for _ in lens],
                          device=device)
    new = [alloc.alloc(n) for n in VERIFY_NODES]
    verify = _tree_batch(lens, slots, new=new, earlier=[[] for _ in new],
                         masks=[random_tree_mask(n, gen) for n in VERIFY_NODES], gen=gen, vocab=vocab, device=device)
    errors = []
    for name, batch in (("decode", decode), ("verify", verify)):
        want = runner.run_eager(batch)[1]
        problem, error = _compare(_replay(runner, batch)[1], want, dtype)
        if problem:
            return f"({name}) {problem}", error
        errors.append(error)
    return None, max(errors)


def _check_draft(head) -> tuple[str | None, float | None]:
    device, dtype = head.fc.weight.device, head.fc.weight.dtype
    gen = torch.Generator().manual_seed(1)
    hsz, n = head.config.hidden_size, LEVEL_ROWS

    def forward(batch, pool):  # random input features
        head(torch.randn(batch.num_tokens, hsz, generator=gen).to(device, dtype), batch, pool)

    kv, alloc, lens, slots = _prefilled(head.target, forward, new_pool=head.new_kv_pool, device=device, gen=gen,
                                        spare=4 * n)
    runner = graphs.GraphedDraft(head, kv, alloc.num_slots, alloc.num_slots + 1, max_extra=2 * n)
    earlier, level = [alloc.alloc(n) for _ in lens], [alloc.alloc(n) for _ in lens]
    mask = torch.cat([torch.eye(n, dtype=torch.bool)] * 2, dim=1)  # row r: earlier node r, then itself
    batch = _tree_batch(lens, slots, new=level, earlier=earlier, masks=[mask] * len(lens), gen=gen,
                        vocab=head.target.config.vocab_size, device=device)
    feats = torch.randn(batch.num_tokens, hsz, generator=gen).to(device, dtype)
    want = head.log_probs(runner.run_eager(batch, feats)[0])[0]
    problem, error = _compare(head.log_probs(_replay(runner, batch, feats)[0])[0], want, dtype)
    return (f"(a tree level) {problem}" if problem else None), error
