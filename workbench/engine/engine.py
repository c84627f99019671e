"""The decode loop: prefill, then plain decode steps or EAGLE-2 steps, for a batch of requests.

One EAGLE-2 step, for every running request at once (docs/design.md §3)::

    draft    from the draft source (drafts.py): the EAGLE head extends its KV with last step's
             pairs and grows the tree (num_steps forwards; method static: a shape fixed in
             advance, static_tree.py); an early exit grows it with the target's first layers;
             the n-gram draft looks it up in the request's own tokens
    build    rerank to num_draft_tokens - 1, prepend the root, mask / positions / pointers
    verify   ONE target forward over all nodes of all requests, under the tree masks
    accept   walk retrieve_next_token / retrieve_next_sibling; bonus at the last accepted node
    commit   keep the KV slots of root + accepted drafts, free the rest; L += n + 1

Rollback is a slot-table edit (page size 1, as SGLang): the kept nodes' slots are appended to
the request's table in path order (their positions are L, L+1, ... already), the others are
freed. No KV row is copied.

With ``trace=True`` every step also fills one ``StepRecord`` per request (``record.py``):
``step_records()`` returns them, ``step()`` returns them as JSON-ready traces (``trace.py``).
With tracing off no record is built. Phase timings read the clock after a
``torch.cuda.synchronize()`` when the engine runs on CUDA, so each phase's kernels are counted
in that phase. ``debug=True`` (or ``WORKBENCH_DEBUG=1``; the tests set it) adds the
invariant checks that cost more than a comparison (docs/design.md §4).
"""

from __future__ import annotations

import os
import time

import torch

from workbench.attention.batch import ForwardBatch, extend_batch
from workbench.attention.meta import build_meta
from workbench.engine import trace as tr
from workbench.engine.accept import AcceptResult, greedy_walk, leviathan_chain, sampling_walk
from workbench.engine.config import SpecConfig, check_context
from workbench.engine.draft import DraftPhase
from workbench.engine.drafts import make_draft
from workbench.engine.graph_check import graphs_by_default
from workbench.engine.graphs import step_lock
from workbench.engine.record import DraftLevel, KVChange, StepRecord
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams, choose, target_probs
from workbench.engine.tree import DraftTree, build_tree, rerank
from workbench.kv import SlotAllocator, SlotTable
from workbench.kv.pool import KVPool
from workbench.models.draft import DraftHead
from workbench.models.llama import TargetModel


class Engine:
    def __init__(self, target: TargetModel, draft: DraftHead | TargetModel | None = None,
                 spec: SpecConfig = SpecConfig(),
                 sampling: SamplingParams = SamplingParams(), stop_ids: tuple[int, ...] = (),
                 trace: bool = False, token_text=None, debug: bool | None = None,
                 cuda_graphs: bool | None = None):
        """``draft``: the EAGLE head when ``spec.draft`` is the head, the draft model for
        ``model:DIR`` (the n-gram and early-exit drafts need none). ``cuda_graphs``: replay decode, verify and the head's forwards (tree
        levels, and the extend when it fits a bucket) from CUDA graphs (``graphs.py``); None = on
        where it can be (a CUDA device and the triton attention backend) and the start-up check
        passed for these models (``graph_check.py``)."""
        spec.check_sampling(sampling.greedy)
        self.target, self.draft, self.spec, self.sampling = target, draft, spec, sampling
        self.drafter = make_draft(spec, target, draft) if spec.speculative else None  # drafts.py
        self.stop_ids = set(stop_ids)
        self.trace, self.token_text = trace, token_text or (lambda t: str(t))
        self.debug = os.environ.get("WORKBENCH_DEBUG") == "1" if debug is None else debug
        self.device = target.lm_head.weight.device
        self.cpu_gen = torch.Generator().manual_seed(sampling.seed)
        self.dev_gen = self.cpu_gen if self.device.type == "cpu" else \
            torch.Generator(device=self.device).manual_seed(sampling.seed)
        can_graph = self.device.type == "cuda" and target.attention_backend == "triton"
        if cuda_graphs and not can_graph:
            raise ValueError("CUDA graphs need a CUDA device and the triton attention backend")
        graphed_head = draft if spec.speculative and spec.draft.kind == "head" else None  # the head's forwards
        self.cuda_graphs = graphs_by_default(target, graphed_head) if cuda_graphs is None else cuda_graphs
        self.graphed = None  # GraphedTarget: made with the KV pools
        # a fused head reads the residual stream after some target layers beside f_t
        self.capture = self.drafter.capture if spec.speculative else ()
        self.requests: list[Request] = []
        self.table: SlotTable | None = None
        self.steps = 0

    # ---- setup -------------------------------------------------------------------------------
    def add_requests(self, prompts: list[list[int]], max_new_tokens: int) -> list[Request]:
        """Queue prompts (token ids). The KV pools are sized once, for these requests."""
        if self.table is not None:
            raise RuntimeError("this engine already holds a batch; make a new Engine")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        for p in prompts:
            check_context(self.spec, self.target.config.max_position_embeddings, len(p), max_new_tokens)
        # per request: its committed tokens, plus what one step holds on top of them (the verify
        # block and the draft's scratch slots, allocated by its growth and freed before verify)
        draft_scratch = self.drafter.scratch_slots(self.spec) if self.spec.speculative else 0
        per_step = self.spec.num_draft_tokens + draft_scratch if self.spec.speculative else 1
        num_slots = sum(len(p) + max_new_tokens + per_step + 1 for p in prompts)
        self.table = SlotTable(SlotAllocator(num_slots))
        # With graphs, one more pool slot that no request owns takes the padding tokens' K/V.
        self.target_kv = self.target.new_kv_pool(num_slots + (1 if self.cuda_graphs else 0))
        if self.cuda_graphs:
            from workbench.engine.graphs import GraphedTarget

            self.graphed = GraphedTarget(self.target, self.target_kv, scratch_slot=num_slots, max_keys=num_slots + 1,
                                         capture=self.capture)
        if self.spec.speculative:
            self.drafter.start(num_slots, self.target_kv, self.cuda_graphs, draft_scratch)
        self.requests = [Request(i, list(p), max_new_tokens) for i, p in enumerate(prompts)]
        return self.requests

    @property
    def draft_kv(self) -> KVPool | None:
        """The draft's KV pool: the head's own, an early exit's is the target's, none for n-grams."""
        return getattr(self.drafter, "kv", None)

    @property
    def graphed_draft(self):
        """The head's CUDA-graph runner (``graphs.GraphedDraft``), None without graphs or a head."""
        return getattr(self.drafter, "graphed", None)

    @property
    def running(self) -> list[Request]:
        return [r for r in self.requests if not r.finished]

    @property
    def done(self) -> bool:
        return self.table is not None and not self.running

    def run(self) -> list[Request]:
        while not self.done:
            self.step()
        return self.requests

    def step(self) -> list[dict]:
        """Prefill (first call), then one decode or EAGLE-2 step. Returns one JSON-ready trace
        per request stepped when tracing, else []."""
        return [tr.step_trace(rec, self.token_text) for rec in self.step_records()]

    def step_records(self) -> list[StepRecord]:
        """Like ``step``, returning the ``StepRecord``s themselves (tracing on; else [])."""
        if self.table is None:
            raise RuntimeError("add_requests first")
        if self.done:
            return []
        with step_lock(self.device):  # on CUDA, one engine step at a time in the process (graphs.py)
            self.steps += 1
            if self.steps == 1:
                records = self._prefill()
            else:
                records = self._spec_step() if self.spec.speculative else self._vanilla_step()
            if self.debug:  # no slot leaked or shared, scratch included
                self.check_integrity()
        return records

    def _clock(self) -> float:
        """perf_counter, after the device has finished the work queued so far (CUDA is
        asynchronous: without the sync, a phase's kernels would be timed in a later phase)."""
        if self.trace and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _ms(self, t0: float) -> float:
        return (self._clock() - t0) * 1e3

    # ---- prefill and plain decoding ------------------------------------------------------------
    def _prefill(self) -> list[StepRecord]:
        t0 = self._clock()
        reqs = self.requests
        for r in reqs:
            self.table.add_request(r.rid)
            self.table.commit(r.rid, self.table.allocator.alloc(len(r.prompt_ids)))
        batch = extend_batch([r.prompt_ids for r in reqs], [[] for _ in reqs],
                             [self.table.slots(r.rid) for r in reqs], [0] * len(reqs), self.device)
        hidden = self.target(batch, self.target_kv, self.capture)  # [T, H] (fused head: [T, W])
        ends = torch.tensor([sum(len(r.prompt_ids) for r in reqs[: i + 1]) - 1 for i in range(len(reqs))])
        logits = self.target.logits(hidden[ends.to(self.device)])
        first = choose(logits, self.sampling, self.dev_gen).tolist()
        offset, emitted, slots = 0, [], [list(self.table.slots(r.rid)) for r in reqs]
        for r, tok in zip(reqs, first):
            n = len(r.prompt_ids)
            r.target_forwards += 1
            r.root = tok
            r.pending_tokens = r.prompt_ids[1:] + [tok]  # pairs (f_t, x_{t+1}) for t = 0..P-1
            r.pending_features = hidden[offset : offset + n]
            offset += n
            emitted.append(r.emit([tok], ["prefill"], self.stop_ids))
        self._release_finished()
        ms = self._ms(t0)
        if not self.trace:
            return []
        return [self._record("prefill", r, logits[i : i + 1], emitted[i], KVChange(0, slots[i], slots[i], []),
                             {"prefill_ms": ms}, prompt_len=len(r.prompt_ids)) for i, r in enumerate(reqs)]

    def _vanilla_step(self) -> list[StepRecord]:
        t0 = self._clock()
        reqs = self.running
        lens = [self.table.length(r.rid) for r in reqs]
        new = [self.table.allocator.alloc(1) for _ in reqs]
        batch = extend_batch([[r.root] for r in reqs], [list(self.table.slots(r.rid)) for r in reqs],
                             new, lens, self.device)
        _, logits = self._target_forward(batch)  # [B, V]
        nxt = choose(logits, self.sampling, self.dev_gen).tolist()
        emitted = []
        for r, slots, tok in zip(reqs, new, nxt):
            self.table.commit(r.rid, slots)
            r.target_forwards += 1
            r.root = tok
            emitted.append(r.emit([tok], ["bonus"], self.stop_ids))
            r.accept_lengths.append(len(emitted[-1]))
            r.drafts_accepted.append(0)
        self._release_finished()
        ms = self._ms(t0)
        if not self.trace:
            return []
        return [self._record("decode", r, logits[i : i + 1], emitted[i], KVChange(lens[i], new[i], new[i], []),
                             {"decode_ms": ms}) for i, r in enumerate(reqs)]

    # ---- one EAGLE-2 step ----------------------------------------------------------------------
    def _spec_step(self) -> list[StepRecord]:
        reqs = self.running
        rids = [r.rid for r in reqs]
        timing: dict[str, float] = {}
        lens = [self.table.length(rid) for rid in rids]  # L per request, before this step

        t = self._clock()
        extended = self.drafter.extend(reqs, self.table)
        timing["draft_extend_ms"] = self._ms(t)
        t = self._clock()
        chain = self.sampling if self.spec.accept_rule(self.sampling) == "leviathan" else None
        phase = self.drafter.grow(reqs, self.table, extended, self.spec, chain, self.dev_gen)
        for slots in phase.scratch_slots:  # tree-level draft KV is scratch: back to the free list
            self.table.allocator.free(slots)
        timing["draft_tree_ms"] = self._ms(t)

        t = self._clock()
        trees = []
        for r, c, L in zip(reqs, phase.candidates, lens):
            kept, dropped = rerank(c, self.spec.num_draft_tokens)
            trees.append(build_tree(r.root, c, kept, L, dropped))
        verify_slots = [self.table.allocator.alloc(tree.num_nodes) for tree in trees]
        if self.debug:
            _check_positions(trees, phase.levels, lens, self.drafter.level_offset)
        timing["build_ms"] = self._ms(t)

        t = self._clock()
        hidden, logits = self._verify(reqs, trees, verify_slots)
        timing["verify_ms"] = self._ms(t)

        t = self._clock()
        results = self._accept(trees, logits, phase)
        timing["accept_ms"] = self._ms(t)

        t = self._clock()
        changes, emitted = [], []
        for i, (r, h) in enumerate(zip(reqs, per_tree(trees, hidden))):
            kept_slots, freed, out = self._commit(r, trees[i], results[i], verify_slots[i], h)
            changes.append(KVChange(lens[i], verify_slots[i], kept_slots, freed, draft_extend=extended.slots[i],
                                    draft_scratch=phase.scratch_slots[i]))
            emitted.append(out)
        self._release_finished()
        timing["commit_ms"] = self._ms(t)
        if not self.trace:
            return []
        return [self._record("spec", r, rows, emitted[i], changes[i], dict(timing), candidates=phase.candidates[i],
                             levels=phase.levels[i], tree=trees[i], result=results[i])
                for i, (r, rows) in enumerate(zip(reqs, per_tree(trees, logits)))]

    def _record(self, kind: str, r: Request, logits: torch.Tensor, emitted: list[int], kv: KVChange,
                timing: dict[str, float], **spec_parts) -> StepRecord:
        """The record of one request's step (tracing only), with the allocator counts after it."""
        a = self.table.allocator
        kv.allocated, kv.free, kv.total = a.num_used, a.num_free, a.num_slots
        draft = self.drafter.name if self.spec.speculative else "none"
        return StepRecord(kind, self.steps, r.rid, self.spec.method, self.spec.accept_rule(self.sampling),
                          self.sampling, logits, emitted, r.finish_reason, kv, timing, draft=draft, **spec_parts)

    def _verify(self, reqs: list[Request], trees: list[DraftTree], slots: list[list[int]]):
        """One target forward over every node of every request: prefix from the cache, nodes
        under their tree mask. Returns hidden [T, W] (W = H, or a fused head's feature width) and
        logits [T, V] (row i: after node i)."""
        ids, pos, out = [], [], []
        for tree, s in zip(trees, slots):
            ids.extend(tree.tokens)
            pos.extend(tree.positions)
            out.extend(s)
        meta = build_meta([t.num_nodes for t in trees], [list(self.table.slots(r.rid)) for r in reqs], slots,
                          [t.mask for t in trees], self.device)
        i64 = dict(dtype=torch.int64, device=self.device)
        batch = ForwardBatch(torch.tensor(ids, **i64), torch.tensor(pos, **i64), torch.tensor(out, **i64), meta)
        return self._target_forward(batch)

    def _target_forward(self, batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [T, H] and logits [T, V]: from a CUDA graph when one fits, else eagerly."""
        if self.graphed is not None:
            return self.graphed(batch)
        hidden = self.target(batch, self.target_kv, self.capture)
        return hidden, self.target.logits(hidden)

    def _accept(self, trees: list[DraftTree], logits: torch.Tensor, phase: DraftPhase) -> list[AcceptResult]:
        if self.sampling.greedy:
            argmax = per_tree(trees, logits.argmax(-1).cpu())
            return [greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, a.tolist())
                    for tree, a in zip(trees, argmax)]
        probs = per_tree(trees, target_probs(logits, self.sampling).cpu())  # [N_b, V] per tree
        if phase.chain_q is not None:
            return [leviathan_chain(tree.tokens, p, q.cpu(), self.cpu_gen)
                    for tree, p, q in zip(trees, probs, phase.chain_q)]
        return [sampling_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, p, self.cpu_gen,
                              self.spec.accept_threshold_single, self.spec.accept_threshold_acc)
                for tree, p in zip(trees, probs)]

    def _commit(self, r: Request, tree: DraftTree, res: AcceptResult, slots: list[int], hidden: torch.Tensor):
        """Keep root + accepted (path order = position order), free the rest, emit n + 1 tokens (fewer
        when a stop token or max_new_tokens ends the output inside them)."""
        on_path = set(res.path)
        kept = [slots[i] for i in res.path]
        freed = [s for i, s in enumerate(slots) if i not in on_path]
        self.table.commit(r.rid, kept)
        self.table.allocator.free(freed)
        accepted = [tree.tokens[i] for i in res.path[1:]]
        r.target_forwards += 1
        emitted = r.emit(accepted + [res.bonus], ["accepted"] * len(accepted) + ["bonus"], self.stop_ids)
        r.accept_lengths.append(len(emitted))  # τ counts what the step emitted, not what the walk accepted
        r.drafts_accepted.append(len(accepted))
        r.root = res.bonus
        r.pending_tokens = accepted + [res.bonus]  # pairs (f_root, a1), ..., (f_an, bonus)
        r.pending_features = hidden[res.path]
        return kept, freed, emitted

    def _release_finished(self) -> None:
        for r in self.requests:
            if r.finished and r.rid in self.table.tables:
                self.table.release(r.rid)
                r.pending_features = None

    def check_integrity(self) -> None:
        self.table.check_integrity()


def per_tree(trees: list[DraftTree], rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The verify output ([T, ...], requests' nodes one after another) split per tree: [N_b, ...]."""
    return rows.split([t.num_nodes for t in trees])


def _check_positions(trees: list[DraftTree], levels: list[list[DraftLevel]], lens: list[int], offset: int) -> None:
    """Debug: a verified node at depth d sits at L + d; the draft ran the depth-d frontier at
    L + d + ``offset``: the head one behind (offset -1: its input at position p is paired with
    the token at p + 1), an early exit at the node's own position (offset 0)."""
    for tree, lv, L in zip(trees, levels, lens):
        if tree.positions != [L + d for d in tree.depths]:
            raise AssertionError(f"verify positions {tree.positions} != L + depth (L = {L})")
        for level in lv:
            if level.position != L + level.level + offset:
                raise AssertionError(f"draft level {level.level} ran at {level.position}, not L + level + "
                                     f"{offset} = {L + level.level + offset}")
