"""The decode loop: prefill, then plain decode steps or EAGLE-2 steps, for a batch of requests.

One EAGLE-2 step, for every running request at once (REFERENCE §2)::

    draft    extend the draft KV with last step's pairs, grow the tree (num_steps forwards)
    build    rerank to num_draft_tokens - 1, prepend the root, mask / positions / pointers
    verify   ONE target forward over all nodes of all requests, under the tree masks
    accept   walk retrieve_next_token / retrieve_next_sibling; bonus at the last accepted node
    commit   keep the KV slots of root + accepted drafts, free the rest; L += n + 1

Rollback is a slot-table edit (page size 1, as SGLang): the kept nodes' slots are appended to
the request's table in path order (their positions are L, L+1, ... already), the others are
freed. No KV row is copied. With ``trace=True`` each step returns one JSON-ready dict per
request (``trace.py``); with tracing off no trace data is built.
"""

from __future__ import annotations

import time

import torch

from workbench.engine import trace as tr
from workbench.engine.accept import AcceptResult, greedy_walk, leviathan_chain, sampling_walk
from workbench.engine.batch import ForwardBatch, extend_batch
from workbench.engine.config import SpecConfig
from workbench.engine.draft import draft_extend, grow_tree
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams, choose, target_probs
from workbench.engine.tree import DraftTree, build_tree, rerank
from workbench.attention.meta import build_meta
from workbench.kv import SlotAllocator, SlotTable
from workbench.models.draft import DraftHead
from workbench.models.llama import TargetModel


class Engine:
    def __init__(self, target: TargetModel, draft: DraftHead | None = None, spec: SpecConfig = SpecConfig(),
                 sampling: SamplingParams = SamplingParams(), stop_ids: tuple[int, ...] = (),
                 trace: bool = False, token_text=None, cuda_graphs: bool | None = None):
        """``cuda_graphs``: replay decode and verify forwards from CUDA graphs (``graphs.py``);
        None = on where it can be (a CUDA device and the triton attention backend)."""
        if spec.speculative and draft is None:
            raise ValueError(f"method {spec.method} needs a draft head")
        self.target, self.draft, self.spec, self.sampling = target, draft, spec, sampling
        self.stop_ids = set(stop_ids)
        self.trace, self.token_text = trace, token_text or (lambda t: str(t))
        self.device = target.lm_head.weight.device
        self.cpu_gen = torch.Generator().manual_seed(sampling.seed)
        self.dev_gen = self.cpu_gen if self.device.type == "cpu" else \
            torch.Generator(device=self.device).manual_seed(sampling.seed)
        can_graph = self.device.type == "cuda" and target.attention_backend == "triton"
        if cuda_graphs and not can_graph:
            raise ValueError("CUDA graphs need a CUDA device and the triton attention backend")
        self.cuda_graphs = can_graph if cuda_graphs is None else cuda_graphs
        self.graphed = None  # GraphedTarget, made with the KV pool
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
        limit = self.target.config.max_position_embeddings
        spare = self.spec.num_draft_tokens if self.spec.speculative else 1
        for p in prompts:
            if len(p) + max_new_tokens + spare > limit:
                raise ValueError(f"prompt of {len(p)} tokens + {max_new_tokens} new tokens exceeds the "
                                 f"model's context of {limit}")
        per_step = (self.spec.num_draft_tokens + self.spec.num_steps * self.spec.topk) if self.spec.speculative else 1
        num_slots = sum(len(p) + max_new_tokens + per_step + 1 for p in prompts)
        self.table = SlotTable(SlotAllocator(num_slots))
        # With graphs, one more pool slot that no request owns takes the padding tokens' K/V.
        self.target_kv = self.target.new_kv_pool(num_slots + (1 if self.cuda_graphs else 0))
        if self.cuda_graphs:
            from workbench.engine.graphs import GraphedTarget

            self.graphed = GraphedTarget(self.target, self.target_kv, scratch_slot=num_slots, max_keys=num_slots + 1)
        self.draft_kv = self.draft.new_kv_pool(num_slots) if self.spec.speculative else None
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
        """Prefill (first call), then one decode or EAGLE-2 step. Returns traces (if tracing)."""
        if self.table is None:
            raise RuntimeError("add_requests first")
        if self.done:
            return []
        self.steps += 1
        if self.steps == 1:
            return self._prefill()
        return self._spec_step() if self.spec.speculative else self._vanilla_step()

    # ---- prefill and plain decoding ------------------------------------------------------------
    def _prefill(self) -> list[dict]:
        t0 = time.perf_counter()
        reqs = self.requests
        for r in reqs:
            self.table.add_request(r.rid)
            self.table.commit(r.rid, self.table.allocator.alloc(len(r.prompt_ids)))
        batch = extend_batch([r.prompt_ids for r in reqs], [[] for _ in reqs],
                             [self.table.slots(r.rid) for r in reqs], [0] * len(reqs), self.device)
        hidden = self.target(batch, self.target_kv)  # [T, H]
        ends = torch.tensor([sum(len(r.prompt_ids) for r in reqs[: i + 1]) - 1 for i in range(len(reqs))])
        logits = self.target.logits(hidden[ends.to(self.device)])
        first = choose(logits, self.sampling, self.dev_gen).tolist()
        offset = 0
        for r, tok in zip(reqs, first):
            n = len(r.prompt_ids)
            r.target_forwards += 1
            r.root = tok
            r.pending_tokens = r.prompt_ids[1:] + [tok]  # pairs (f_t, x_{t+1}) for t = 0..P-1
            r.pending_features = hidden[offset : offset + n]
            offset += n
            r.emit([tok], ["prefill"], self.stop_ids)
        self._release_finished()
        ms = (time.perf_counter() - t0) * 1e3
        if not self.trace:
            return []
        return [tr.prefill_trace(self, r, logits[i], ms) for i, r in enumerate(reqs)]

    def _vanilla_step(self) -> list[dict]:
        t0 = time.perf_counter()
        reqs = self.running
        lens = [self.table.length(r.rid) for r in reqs]
        new = [self.table.allocator.alloc(1) for _ in reqs]
        batch = extend_batch([[r.root] for r in reqs], [list(self.table.slots(r.rid)) for r in reqs],
                             new, lens, self.device)
        _, logits = self._target_forward(batch)  # [B, V]
        nxt = choose(logits, self.sampling, self.dev_gen).tolist()
        for r, slots, tok in zip(reqs, new, nxt):
            self.table.commit(r.rid, slots)
            r.target_forwards += 1
            r.accept_lengths.append(1)
            r.root = tok
            r.emit([tok], ["bonus"], self.stop_ids)
        self._release_finished()
        ms = (time.perf_counter() - t0) * 1e3
        if not self.trace:
            return []
        return [tr.vanilla_trace(self, r, logits[i], slots, ms) for i, (r, slots) in enumerate(zip(reqs, new))]

    # ---- one EAGLE-2 step ----------------------------------------------------------------------
    def _spec_step(self) -> list[dict]:
        reqs = self.running
        rids = [r.rid for r in reqs]
        timing: dict[str, float] = {}
        lens = [self.table.length(rid) for rid in rids]  # L per request, before this step

        t = time.perf_counter()
        h_last, extend_slots = draft_extend(self.draft, self.draft_kv, self.table, rids,
                                            [r.pending_tokens for r in reqs], [r.pending_features for r in reqs])
        timing["draft_extend_ms"] = _ms(t)
        t = time.perf_counter()
        leviathan = self.spec.chain_rule == "leviathan" and not self.sampling.greedy
        phase = grow_tree(self.draft, self.draft_kv, self.table, rids, h_last, self.spec.num_steps, self.spec.topk,
                          self.sampling if leviathan else None, self.dev_gen)
        for slots in phase.scratch_slots:  # tree-level draft KV is scratch: back to the free list
            self.table.allocator.free(slots)
        timing["draft_tree_ms"] = _ms(t)

        t = time.perf_counter()
        trees, kept, dropped = [], [], []
        for r, c, L in zip(reqs, phase.candidates, lens):
            k, d = rerank(c, self.spec.num_draft_tokens)
            trees.append(build_tree(r.root, c, k, L, d))
            kept.append(k)
        verify_slots = [self.table.allocator.alloc(tree.num_nodes) for tree in trees]
        timing["build_ms"] = _ms(t)

        t = time.perf_counter()
        hidden, logits = self._verify(reqs, trees, verify_slots)
        timing["verify_ms"] = _ms(t)

        t = time.perf_counter()
        results = self._accept(trees, logits, phase)
        timing["accept_ms"] = _ms(t)

        t = time.perf_counter()
        rows, traces = 0, []
        for i, (r, tree, res, slots) in enumerate(zip(reqs, trees, results, verify_slots)):
            rows_i = slice(rows, rows + tree.num_nodes)
            rows += tree.num_nodes
            kept_slots, freed, emitted = self._commit(r, tree, res, slots, hidden[rows_i])
            if self.trace:
                traces.append(dict(request=r, tree=tree, result=res, slots=slots, kept=kept_slots, freed=freed,
                                   emitted=emitted, L=lens[i], logits=logits[rows_i],
                                   level_info=phase.levels[i], candidates=phase.candidates[i],
                                   extend_slots=extend_slots[i], scratch=phase.scratch_slots[i]))
        self._release_finished()
        timing["commit_ms"] = _ms(t)
        if not self.trace:
            return []
        return [tr.spec_trace(self, **d, timing=timing) for d in traces]

    def _verify(self, reqs: list[Request], trees: list[DraftTree], slots: list[list[int]]):
        """One target forward over every node of every request: prefix from the cache, nodes
        under their tree mask. Returns hidden [T, H] and logits [T, V] (row i: after node i)."""
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
        hidden = self.target(batch, self.target_kv)
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
                                             p, self.cpu_gen))
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


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3
