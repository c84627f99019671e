"""The decode loop: prefill, then plain decode steps or EAGLE-2 steps, for a batch of requests.

One EAGLE-2 step, for every running request at once (docs/design.md §3)::

    draft    extend the draft KV with last step's pairs, grow the tree (num_steps forwards;
             method static: a shape fixed in advance, static_tree.py)
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
from workbench.engine.draft import draft_extend, grow_tree, scratch_slots_per_step
from workbench.engine.graph_check import graphs_by_default
from workbench.engine.graphs import step_lock
from workbench.engine.record import DraftLevel, KVChange, StepRecord
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams, choose, target_probs
from workbench.engine.static_tree import grow_static_tree, scratch_slots as static_scratch_slots
from workbench.engine.tree import DraftTree, build_tree, rerank
from workbench.kv import SlotAllocator, SlotTable
from workbench.models.draft import DraftHead
from workbench.models.llama import TargetModel


class Engine:
    def __init__(self, target: TargetModel, draft: DraftHead | None = None, spec: SpecConfig = SpecConfig(),
                 sampling: SamplingParams = SamplingParams(), stop_ids: tuple[int, ...] = (),
                 trace: bool = False, token_text=None, debug: bool | None = None,
                 cuda_graphs: bool | None = None):
        """``cuda_graphs``: replay decode, verify and the draft's forwards (tree levels, and the
        extend when it fits a bucket) from CUDA graphs (``graphs.py``); None = on where it can
        be (a CUDA device and the triton attention backend) and the start-up check passed for
        these models (``graph_check.py``)."""
        if spec.speculative and draft is None:
            raise ValueError(f"method {spec.method} needs a draft head")
        spec.check_sampling(sampling.greedy)
        self.target, self.draft, self.spec, self.sampling = target, draft, spec, sampling
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
        self.cuda_graphs = graphs_by_default(target, draft if spec.speculative else None) \
            if cuda_graphs is None else cuda_graphs
        self.graphed = self.graphed_draft = None  # GraphedTarget, GraphedDraft: made with the KV pools
        # a fused head reads the residual stream after some target layers beside f_t
        self.capture = tuple(draft.fuse_layers) if spec.speculative else ()
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
        # block and the draft's scratch slots, allocated by grow_tree and freed before verify)
        if not self.spec.speculative:
            draft_scratch = 0
        elif self.spec.method == "static":
            draft_scratch = static_scratch_slots(self.spec.tree)
        else:
            draft_scratch = scratch_slots_per_step(self.spec.num_steps, self.spec.topk)
        per_step = self.spec.num_draft_tokens + draft_scratch if self.spec.speculative else 1
        num_slots = sum(len(p) + max_new_tokens + per_step + 1 for p in prompts)
        self.table = SlotTable(SlotAllocator(num_slots))
        # With graphs, one more pool slot that no request owns takes the padding tokens' K/V.
        self.target_kv = self.target.new_kv_pool(num_slots + (1 if self.cuda_graphs else 0))
        if self.cuda_graphs:
            from workbench.engine.graphs import GraphedTarget

            self.graphed = GraphedTarget(self.target, self.target_kv, scratch_slot=num_slots, max_keys=num_slots + 1,
                                         capture=self.capture)
        self.draft_kv = self.draft.new_kv_pool(num_slots + (1 if self.cuda_graphs else 0)) \
            if self.spec.speculative else None
        if self.cuda_graphs and self.spec.speculative:
            from workbench.engine.graphs import GraphedDraft

            # A tree level also attends its ancestors' scratch KV: at most a step's scratch slots.
            self.graphed_draft = GraphedDraft(self.draft, self.draft_kv, scratch_slot=num_slots,
                                              max_keys=num_slots + 1, max_extra=draft_scratch)
        self.requests = [Request(i, list(p), max_new_tokens) for i, p in enumerate(prompts)]
        return self.requests

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
                return self._prefill()
            return self._spec_step() if self.spec.speculative else self._vanilla_step()

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
            r.accept_lengths.append(1)
            r.root = tok
            emitted.append(r.emit([tok], ["bonus"], self.stop_ids))
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
        _check_pending(reqs, lens)

        t = self._clock()
        h_last, extend_slots = draft_extend(self.draft, self.draft_kv, self.table, rids,
                                            [r.pending_tokens for r in reqs], [r.pending_features for r in reqs],
                                            self.graphed_draft)
        for r, L in zip(reqs, lens):
            r.draft_length = L
        timing["draft_extend_ms"] = self._ms(t)
        t = self._clock()
        leviathan = self.spec.chain_rule == "leviathan" and not self.sampling.greedy
        if self.spec.method == "static":  # the same head, a shape fixed in advance
            phase = grow_static_tree(self.draft, self.draft_kv, self.table, rids, h_last, self.spec.tree,
                                     self.graphed_draft)
        else:
            phase = grow_tree(self.draft, self.draft_kv, self.table, rids, h_last, self.spec.num_steps,
                              self.spec.topk, self.sampling if leviathan else None, self.dev_gen, self.graphed_draft)
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
            _check_positions(trees, phase.levels, lens)
        timing["build_ms"] = self._ms(t)

        t = self._clock()
        hidden, logits = self._verify(reqs, trees, verify_slots)
        timing["verify_ms"] = self._ms(t)

        t = self._clock()
        results = self._accept(trees, logits, phase)
        timing["accept_ms"] = self._ms(t)

        t = self._clock()
        rows, changes, emitted = 0, [], []
        for r, tree, res, slots, L in zip(reqs, trees, results, verify_slots, lens):
            kept_slots, freed, out = self._commit(r, tree, res, slots, hidden[rows : rows + tree.num_nodes])
            rows += tree.num_nodes
            changes.append(KVChange(L, slots, kept_slots, freed))
            emitted.append(out)
        self._release_finished()
        timing["commit_ms"] = self._ms(t)
        if not self.trace:
            return []
        records, rows = [], 0
        for i, r in enumerate(reqs):
            changes[i].draft_extend, changes[i].draft_scratch = extend_slots[i], phase.scratch_slots[i]
            n = trees[i].num_nodes
            records.append(self._record("spec", r, logits[rows : rows + n], emitted[i], changes[i], dict(timing),
                                        candidates=phase.candidates[i], levels=phase.levels[i], tree=trees[i],
                                        result=results[i]))
            rows += n
        return records

    def _record(self, kind: str, r: Request, logits: torch.Tensor, emitted: list[int], kv: KVChange,
                timing: dict[str, float], **spec_parts) -> StepRecord:
        """The record of one request's step (tracing only), with the allocator counts after it."""
        a = self.table.allocator
        kv.allocated, kv.free, kv.total = a.num_used, a.num_free, a.num_slots
        rule = "greedy" if self.sampling.greedy else self.spec.chain_rule
        return StepRecord(kind, self.steps, r.rid, self.spec.method, rule, self.sampling, logits, emitted,
                          r.finish_reason, kv, timing, **spec_parts)

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

    def _accept(self, trees: list[DraftTree], logits: torch.Tensor, phase) -> list[AcceptResult]:
        if self.sampling.greedy:
            argmax = logits.argmax(-1).tolist()
            results, row = [], 0
            for tree in trees:
                results.append(greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling,
                                           argmax[row : row + tree.num_nodes]))
                row += tree.num_nodes
            return results
        probs = target_probs(logits, self.sampling).cpu()  # [T, V]
        results, row = [], 0
        for b, tree in enumerate(trees):
            p = probs[row : row + tree.num_nodes]
            row += tree.num_nodes
            if phase.chain_q is not None:
                results.append(leviathan_chain(tree.tokens, p, phase.chain_q[b].cpu(), self.cpu_gen))
            else:
                results.append(sampling_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling,
                                             p, self.cpu_gen, self.spec.accept_threshold_single,
                                             self.spec.accept_threshold_acc))
        return results

    def _commit(self, r: Request, tree: DraftTree, res: AcceptResult, slots: list[int], hidden: torch.Tensor):
        """Keep root + accepted (path order = position order), free the rest, emit n + 1 tokens."""
        on_path = set(res.path)
        kept = [slots[i] for i in res.path]
        freed = [s for i, s in enumerate(slots) if i not in on_path]
        self.table.commit(r.rid, kept)
        self.table.allocator.free(freed)
        accepted = [tree.tokens[i] for i in res.path[1:]]
        r.target_forwards += 1
        r.accept_lengths.append(len(accepted) + 1)
        emitted = r.emit(accepted + [res.bonus], ["accepted"] * len(accepted) + ["bonus"], self.stop_ids)
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


def _check_pending(reqs: list[Request], lens: list[int]) -> None:
    """The draft extend writes the pending pairs at the last committed slots: the draft KV must
    cover exactly the committed positions before them (docs/design.md §4)."""
    for r, L in zip(reqs, lens):
        if r.draft_length + len(r.pending_tokens) != L:
            raise AssertionError(f"request {r.rid}: draft KV covers {r.draft_length} positions + "
                                 f"{len(r.pending_tokens)} pending pairs, but {L} are committed")


def _check_positions(trees: list[DraftTree], levels: list[list[DraftLevel]], lens: list[int]) -> None:
    """Debug: a verified node at depth d sits at L + d; the draft ran the depth-d frontier at
    L + d - 1, one behind (its input at position p is paired with the token at p + 1)."""
    for tree, lv, L in zip(trees, levels, lens):
        if tree.positions != [L + d for d in tree.depths]:
            raise AssertionError(f"verify positions {tree.positions} != L + depth (L = {L})")
        for level in lv:
            if level.position != L + level.level - 1:
                raise AssertionError(f"draft level {level.level} ran at {level.position}, not L + level - 1 = "
                                     f"{L + level.level - 1}")
