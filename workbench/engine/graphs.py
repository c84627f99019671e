"""CUDA-graph replay of the target forward and of the draft head's levels at padded
(batch x tokens) sizes.

At batch 1 on a GPU a 30-layer step is hundreds of small kernel launches, and launch overhead,
not arithmetic, sets its speed; a speculative step pays it once per draft level and once for
verify. A CUDA graph records those launches once and replays them with one call. A graph fixes
every shape and every pointer, so:

* each forward is **padded** up to a bucket ``(batch, tokens)``: the real requests first, then
  dummy requests. All padding tokens belong to the first dummy request, which has no prefix,
  attends only its own tokens, and writes its K/V to one reserved scratch slot of the module's
  KV pool; attention is per request, so real rows do not change (``tests/test_graphs.py`` runs
  the padded batch eagerly on the CPU against the unpadded one);
* the inputs (token ids, positions, slots, the attention bookkeeping, and the draft head's input
  features) are copied into **static buffers** the graph was captured with; ``kv_slots`` and the
  flat mask are read only up to what ``cu_kv`` / ``mask_offsets`` say, so their buffers are
  sized for the most a bucket may hold (a draft tree level also attends its ancestors from
  earlier levels: up to a step's draft scratch slots, ``max_extra``);
* the Triton kernel is launched with a grid for the worst case of the bucket (all query rows in
  one request, the longest prefix the pool can hold); its programs read the real lengths from
  the device tensors and the ones past a request's rows or prefix exit at once;
* the cos/sin tables are read by address too: before its first capture a runner grows the
  shared RoPE table once, to the model's context length, and each graph keeps a reference to
  the tables it read (a later rebuild, by an eager forward past the context, cannot free them
  under it); a request with more keys than the context (positions past the table) runs eagerly;
* a shape outside every bucket (or a prefill) runs eagerly; so does everything on that device in
  this process after a failed capture or replay: one warning line on stderr, every runner there
  runs eagerly without another try, and the start-up check (``graph_check.py``) says graphs are
  off. A failure that left the device unusable (an illegal address is sticky) ends the process
  with one line (``DeviceFault``);
* one memory pool per runner (``torch.cuda.graph_pool_handle``) is shared by its buckets'
  graphs: they replay one at a time, on one stream, so one's intermediates may reuse another's;
* an engine step (and any capture inside it) holds ``step_lock``, one process-wide lock on
  CUDA: the app steps sessions in parallel threads, and a capture must not see another thread's
  allocations (``capture_error_mode="thread_local"`` keeps other threads' CUDA work outside a
  step, such as a new engine's KV pools, from invalidating one).

``GraphedForward`` holds that machinery for any module with a KV pool; ``GraphedTarget`` runs
the target forward + logits (decode, verify), ``GraphedDraft`` the draft head's forward (each
tree level, and ``draft_extend`` when its shape fits a bucket). The engine makes both when
``cuda_graphs`` is on, by default when the start-up check passes (replay equals eager on the
actual device; the graph-vs-eager tests are GPU-marked, and ``make gpu-check`` has not yet run
on a GPU, so a failing graph falls back to eager as above). Only the ``triton`` attention backend is
captured: the ``torch`` backend loops over requests on the host, which a graph cannot replay.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass

import torch

from workbench.attention import BACKEND
from workbench.attention.meta import AttentionMeta
from workbench.attention.batch import ForwardBatch
from workbench.attention.selfcheck import raise_if_device_lost

DEFAULT_BATCHES = (1, 2, 4, 8)
DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32, 64)
# One per process: a graph capture fails when another thread allocates or syncs meanwhile.
_STEP_LOCK = threading.RLock()
# str(device) -> why a capture or replay failed there: every runner on that device runs eagerly
# from then on, and the start-up check reads it (the process's one record of it, as the lock).
FAILED: dict[str, str] = {}


def is_cuda(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda"


def step_lock(device: torch.device | str):
    """The context that an engine step (and a graph capture) on ``device`` runs in: the
    process-wide lock on CUDA (re-entrant: a capture inside a step takes it again), nothing
    elsewhere."""
    return _STEP_LOCK if is_cuda(device) else contextlib.nullcontext()


@dataclass(frozen=True)
class Bucket:
    batch: int  # requests, dummies included
    tokens: int  # query tokens, padding included


def make_buckets(batches=DEFAULT_BATCHES, tokens=DEFAULT_TOKENS) -> list[Bucket]:
    """Every (batch, tokens) pair with tokens >= batch (each real request has a token)."""
    if not batches or not tokens or min(batches) < 1 or min(tokens) < 1:
        raise ValueError(f"bucket sizes must be positive, got batches {batches}, tokens {tokens}")
    return sorted((Bucket(b, t) for b in batches for t in tokens if t >= b), key=lambda k: (k.tokens, k.batch))


def pick_bucket(buckets: list[Bucket], num_requests: int, num_tokens: int) -> Bucket | None:
    """The smallest bucket that holds the batch; padding tokens need one dummy request of room.
    None: run eagerly."""
    for k in buckets:
        if k.tokens >= num_tokens and k.batch >= num_requests + (k.tokens > num_tokens):
            return k
    return None


def pad_batch(batch: ForwardBatch, bucket: Bucket, scratch_slot: int) -> ForwardBatch:
    """``batch`` grown to ``bucket``: dummy requests after the real ones, every padding token in
    the first of them (positions 0, token 0, K/V written to ``scratch_slot``, attending only its
    own padding tokens: causally, or under a lower-triangular mask in mask mode)."""
    meta = batch.meta
    b, t = meta.batch_size, batch.num_tokens
    if pick_bucket([bucket], b, t) is None:
        raise ValueError(f"a batch of {b} requests and {t} tokens does not fit bucket {bucket}")
    pad = bucket.tokens - t
    q_lens = meta.q_lens + [pad] + [0] * (bucket.batch - b - 1) if bucket.batch > b else list(meta.q_lens)
    extra = [pad] + [0] * (bucket.batch - b - 1) if bucket.batch > b else []
    dev = batch.input_ids.device
    i64 = dict(dtype=torch.int64, device=dev)
    cu_q = torch.tensor([0] + q_lens, **i64).cumsum(0).to(meta.cu_q.dtype)
    kv_lens = meta.kv_lens + extra
    cu_kv = torch.tensor([0] + kv_lens, **i64).cumsum(0).to(meta.cu_kv.dtype)
    prefix = torch.cat([meta.prefix_lens, torch.zeros(len(extra), dtype=meta.prefix_lens.dtype, device=dev)])
    scratch = torch.full((pad,), scratch_slot, **i64)
    kv_slots = torch.cat([meta.kv_slots, scratch.to(meta.kv_slots.dtype)])
    mask = offsets = None
    if meta.mask is not None:
        used = sum(n * (k - p) for n, k, p in zip(meta.q_lens, meta.kv_lens, meta.prefix_list))
        own = torch.ones(pad, pad, dtype=torch.bool, device=dev).tril().reshape(-1)
        mask = torch.cat([meta.mask[:used], own])
        offsets = torch.cat([meta.mask_offsets, torch.full((len(extra),), used, **i64).to(meta.mask_offsets.dtype)])
    padded = AttentionMeta(cu_q=cu_q, cu_kv=cu_kv, prefix_lens=prefix, kv_slots=kv_slots, mask=mask,
                           mask_offsets=offsets, q_lens=q_lens, kv_lens=kv_lens,
                           prefix_list=meta.prefix_list + [0] * len(extra))
    zeros = torch.zeros(pad, **i64)
    return ForwardBatch(torch.cat([batch.input_ids, zeros]), torch.cat([batch.positions, zeros]),
                        torch.cat([batch.out_slots, scratch]), padded)


def pad_features(features: torch.Tensor, bucket: Bucket) -> torch.Tensor:
    """A draft forward's input features [T, H] grown to the bucket's tokens with zero rows (the
    padding tokens' features; their outputs are dropped)."""
    pad = bucket.tokens - features.shape[0]
    if pad < 0:
        raise ValueError(f"{features.shape[0]} feature rows do not fit bucket {bucket}")
    return torch.cat([features, features.new_zeros(pad, *features.shape[1:])])


class _Captured:
    """One graph and the static buffers it reads and writes. ``max_extra``: the most extra keys
    (keys after the prefix) one request may have beyond its own query rows (draft tree levels
    also see their ancestors from earlier levels); ``features``: the width of an input-feature
    buffer (the draft head's), None for none."""

    def __init__(self, bucket: Bucket, masked: bool, *, max_keys: int, device: torch.device, max_extra: int = 0,
                 features: int | None = None, feature_dtype: torch.dtype = torch.float32):
        b, t = bucket.batch, bucket.tokens
        i32, i64 = dict(dtype=torch.int32, device=device), dict(dtype=torch.int64, device=device)
        self.input_ids, self.positions, self.out_slots = (torch.zeros(t, **i64) for _ in range(3))
        self.features = None if features is None else torch.zeros(t, features, dtype=feature_dtype, device=device)
        self.cu_q, self.cu_kv = torch.zeros(b + 1, **i32), torch.zeros(b + 1, **i32)
        self.prefix_lens = torch.zeros(b, **i32)
        # Every key of a batch is a distinct pool slot (at most max_keys of them), except the
        # padding tokens' copies of the scratch slot (fewer than t): the slot list's capacity.
        self.kv_slots = torch.zeros(max_keys + t, **i64)
        # Mask mode: a request of n rows has at most max(n, max_extra) extra keys, so the mask
        # bits of the whole bucket (padding included) are at most t * max(t, max_extra).
        self.mask = torch.zeros(t * max(t, max_extra), dtype=torch.bool, device=device) if masked else None
        self.mask_offsets = torch.zeros(b, **i64) if masked else None
        # The launch plan is made for the worst case: one request with every row and the longest
        # prefix (max_keys); the host lists say just that (the device buffers hold the real
        # layout). The prefix must be the longest possible: the kernel's prefix slices are
        # planned from it. The extra keys are looped over up to the device lengths, so the host
        # lists' t extras do not bound them.
        self.meta = AttentionMeta(
            cu_q=self.cu_q, cu_kv=self.cu_kv, prefix_lens=self.prefix_lens, kv_slots=self.kv_slots,
            mask=self.mask, mask_offsets=self.mask_offsets, q_lens=[t] + [0] * (b - 1),
            kv_lens=[max_keys + t] + [0] * (b - 1), prefix_list=[max_keys] + [0] * (b - 1))
        self.batch = ForwardBatch(self.input_ids, self.positions, self.out_slots, self.meta)
        self.graph = None
        self.outputs: tuple[torch.Tensor, ...] = ()
        # Tensors the graph reads by address without owning them (the RoPE tables): held here so
        # that nothing frees them while the graph may replay.
        self.reads: tuple[torch.Tensor, ...] = ()

    def load(self, padded: ForwardBatch, features: torch.Tensor | None = None) -> None:
        """Copy one padded batch (and its padded features) into the static buffers (no
        allocation the graph could see)."""
        m = padded.meta
        self.input_ids.copy_(padded.input_ids)
        self.positions.copy_(padded.positions)
        self.out_slots.copy_(padded.out_slots)
        self.cu_q.copy_(m.cu_q)
        self.cu_kv.copy_(m.cu_kv)
        self.prefix_lens.copy_(m.prefix_lens)
        self.kv_slots[: m.kv_slots.numel()].copy_(m.kv_slots)
        if self.mask is not None:
            self.mask[: m.mask.numel()].copy_(m.mask)
            self.mask_offsets.copy_(m.mask_offsets)
        if self.features is not None:
            self.features.copy_(features)


class GraphedForward:
    """The bucketing, padding, static buffers, capture and eager fallback shared by the graphed
    forwards: a module with a KV pool whose forward is ``run(batch)`` (``features=None``) or
    ``run(batch, features)`` (``features``: the width of the input features, one more static
    buffer). Subclasses say what runs (``run_eager``) and which cos/sin tables it reads
    (``_rope_tables``). ``max_keys``: the most keys a batch's requests may see in all (the pool
    size is always enough); ``scratch_slot``: a pool slot no request owns; ``max_extra``: the
    most extra keys a request may have beyond its own query rows (0: decode, verify and extend
    have exactly their rows); ``context``: the positions the RoPE tables are grown to (the
    model's context length)."""

    name = "forward"

    def __init__(self, device: torch.device, kv, *, scratch_slot: int, max_keys: int, context: int,
                 buckets: list[Bucket] | None = None, max_extra: int = 0, features: int | None = None,
                 feature_dtype: torch.dtype = torch.float32):
        if scratch_slot < 0 or scratch_slot >= kv.num_slots:
            raise ValueError(f"scratch slot {scratch_slot} is outside the KV pool of {kv.num_slots} slots")
        self.device, self.kv, self.scratch_slot, self.max_keys = device, kv, scratch_slot, max_keys
        self.context, self.max_extra, self.features, self.feature_dtype = context, max_extra, features, feature_dtype
        self.buckets = buckets if buckets is not None else make_buckets()
        self.graphs: dict[tuple[Bucket, bool], _Captured] = {}
        self.pool = None  # this runner's graph memory pool, made at its first capture
        self.replays = self.eager = 0  # counters, for tests and benchmarks
        self.failed: str | None = FAILED.get(str(device))  # why a graph failed here (everything then runs eagerly)
        if self.failed is not None:
            self.buckets = []  # said when it failed: eager without another try

    def run_eager(self, batch: ForwardBatch, features: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def _rope_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def bucket_for(self, batch: ForwardBatch) -> Bucket | None:
        """The bucket this batch replays in, or None: it runs eagerly (no bucket holds it, or a
        request has more keys or extra keys than the static buffers were sized for, or more
        keys than the context: a position past the RoPE table)."""
        meta = batch.meta
        if (max(meta.prefix_list, default=0) > self.max_keys or sum(meta.kv_lens) > self.max_keys
                or max(meta.kv_lens, default=0) > self.context
                or any(k - p > max(n, self.max_extra) for n, k, p in zip(meta.q_lens, meta.kv_lens, meta.prefix_list))):
            return None
        return pick_bucket(self.buckets, meta.batch_size, batch.num_tokens)

    def run(self, batch: ForwardBatch, features: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        bucket = self.bucket_for(batch)
        if bucket is None:
            self.eager += 1
            return self.run_eager(batch, features)
        key = (bucket, batch.meta.mask is not None)
        try:
            cap = self.graphs.get(key) or self.capture(*key)
            cap.load(pad_batch(batch, bucket, self.scratch_slot),
                     None if features is None else pad_features(features.to(self.feature_dtype), bucket))
            cap.graph.replay()
        except Exception as exc:  # noqa: BLE001 - a graph that cannot be captured or replayed: eager, said once
            self._give_up(bucket, exc)
            self.eager += 1
            return self.run_eager(batch, features)
        self.replays += 1
        t = batch.num_tokens
        return tuple(o[:t] for o in cap.outputs)

    def _give_up(self, bucket: Bucket, exc: Exception) -> None:
        """After a failed capture or replay: every runner on this device runs eagerly from now on,
        said in one line (``DeviceFault`` instead when the device is lost)."""
        raise_if_device_lost(self.device, exc, f"capturing or replaying a CUDA graph of the {self.name}")
        self.failed = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        self.buckets = []  # whatever broke one graph is likely to break the others
        if str(self.device) not in FAILED:
            FAILED[str(self.device)] = f"the {self.name} at {bucket}: {self.failed}"
            print(f"warning: CUDA graphs off on {self.device}: a graph of the {self.name} at {bucket} failed "
                  f"({self.failed}); running eagerly from now on", file=sys.stderr, flush=True)

    def capture(self, bucket: Bucket, masked: bool) -> _Captured:
        """The static buffers of ``bucket`` with a valid dummy layout, and their graph."""
        cap = _Captured(bucket, masked, max_keys=self.max_keys, device=self.device, max_extra=self.max_extra,
                        features=self.features, feature_dtype=self.feature_dtype)
        # A valid dummy layout for warm-up and capture: every row in the first request, seeing
        # only the scratch slot (the static buffers are overwritten before each replay).
        t = bucket.tokens
        cap.out_slots.fill_(self.scratch_slot)
        cap.kv_slots.fill_(self.scratch_slot)
        cap.cu_q[1:] = t
        cap.cu_kv[1:] = t
        if masked:
            cap.mask[: t * t] = torch.ones(t, t, dtype=torch.bool, device=self.device).tril().reshape(-1)
            cap.mask_offsets.zero_()
        # The cos/sin tables are read by address: built for the whole context now (once: no
        # engine's forward regrows them), and held by the graph.
        cap.reads = self._rope_tables()
        with step_lock(self.device):
            self._record(cap)
        self.graphs[(bucket, masked)] = cap
        return cap

    def _record(self, cap: _Captured) -> None:
        """Warm up, then capture ``cap``'s forward into ``cap.graph`` and its outputs (CUDA)."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):  # warm-up off the default stream (Triton compiles here)
            for _ in range(2):
                self.run_eager(cap.batch, cap.features)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        cap.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cap.graph, pool=self.pool, capture_error_mode="thread_local"):
            cap.outputs = self.run_eager(cap.batch, cap.features)


def _check_graphable(target) -> None:
    if not BACKEND[target.attention_backend].graphable:
        raise ValueError(f"CUDA graphs need a graphable attention backend (triton), not {target.attention_backend} "
                         "(it loops over requests on the host)")


def _grown(rope, rotary, *, positions: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """The cos/sin tables of ``rope`` (a model's ``rope(positions, dtype)``, which makes its
    ``Rotary`` on first use; ``rotary()`` returns it), grown to ``positions``."""
    rope(torch.zeros(1, dtype=torch.int64, device=device), dtype)
    return rotary().tables(positions)


class GraphedTarget(GraphedForward):
    """``hidden, logits = runner(batch)``: the target forward + logits, replayed from a CUDA graph
    when the batch fits a bucket, else run eagerly (arguments as ``GraphedForward``). Replayed
    outputs are views of the graph's buffers: valid until this runner's next replay, of any
    bucket (its graphs share one memory pool)."""

    name = "target forward"

    def __init__(self, target, kv, scratch_slot: int, max_keys: int, buckets: list[Bucket] | None = None,
                 taps: tuple[int, ...] = ()):
        _check_graphable(target)
        self.target, self.taps = target, tuple(taps)  # TargetModel.forward's layer taps, for a fused head
        super().__init__(target.lm_head.weight.device, kv, scratch_slot=scratch_slot, max_keys=max_keys,
                         context=target.config.max_position_embeddings, buckets=buckets)

    def run_eager(self, batch: ForwardBatch, features=None) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.target(batch, self.kv, self.taps)
        return hidden, self.target.logits(hidden)

    def _rope_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.target
        return _grown(t.rope, lambda: t.rotary, positions=self.context, device=self.device,
                      dtype=t.lm_head.weight.dtype)

    def __call__(self, batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.run(batch)


class GraphedDraft(GraphedForward):
    """``hidden = runner(features, batch)``: the draft head's forward (a tree level, or the extend
    when it fits a bucket) in its own KV pool, replayed from a CUDA graph when the batch fits a
    bucket, else run eagerly; the input features are one more static buffer. ``max_extra``: the
    draft-KV scratch slots of one step (a tree level attends its ancestors from earlier levels).
    Returns a fresh tensor: the graph's output buffer is reused by the next replay."""

    name = "draft forward"

    def __init__(self, head, kv, scratch_slot: int, max_keys: int, max_extra: int = 0,
                 buckets: list[Bucket] | None = None):
        from workbench.models.draft import same_rope

        if head.target is None:
            raise ValueError("the draft head must be attached to its target first")
        _check_graphable(head.target)
        self.head, self.shares_rope = head, same_rope(head.target.config, head.config)
        w = head.fc.weight
        context = (head.target if self.shares_rope else head).config.max_position_embeddings
        super().__init__(w.device, kv, scratch_slot=scratch_slot, max_keys=max_keys, context=context, buckets=buckets,
                         max_extra=max_extra,
                         features=head.config.hidden_size, feature_dtype=w.dtype)

    def run_eager(self, batch: ForwardBatch, features: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.head(features, batch, self.kv),)

    def _rope_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        head, target = self.head, self.head.target
        if self.shares_rope:  # the target's table: grown as GraphedTarget grows it
            return _grown(target.rope, lambda: target.rotary, positions=self.context, device=self.device,
                          dtype=self.feature_dtype)
        return _grown(head._own_rope, lambda: head._rotary, positions=self.context, device=self.device,
                      dtype=self.feature_dtype)

    def __call__(self, features: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        if features.shape[0] != batch.num_tokens:
            raise ValueError(f"{features.shape[0]} feature rows for {batch.num_tokens} tokens")
        if features.shape[-1] != self.features:  # a fused head's target features (the extend): eager
            self.eager += 1
            return self.run_eager(batch, features)[0]
        replays = self.replays
        (hidden,) = self.run(batch, features)
        return hidden.clone() if self.replays > replays else hidden
