"""The decode loop: requests come and go; each step prefills newcomers, or runs plain decoding
or an EAGLE-2 step for the batch, in the setting a policy picks.

One EAGLE-2 step, for every running request at once, is ``_spec_step``: its five phases (draft,
build, verify, accept, commit) one call each, as docs/design.md §3 describes them. The drafts
come from the draft source (``drafts/``), the tree from ``tree.py``, the walk from ``accept.py``.

Commit keeps the root and the accepted drafts, rolls the rest back: the accepted nodes' K/V rows
move to the front of the step's slots (the node at depth d to the d-th slot written, as the EAGLE
repository copies them; at most ``num_steps`` rows a layer), those slots are appended to the
request's table (their positions are L, L+1, ... already) and the others are freed (page size 1,
as SGLang). Each request takes its slots from a run set aside for it at admission, as long as
its worst case (``kv/allocator.py``, ``reserve``), so its cache stays one run of slots, alone or
in a batch, which attention reads as a view where any other order is gathered over the whole
prefix at every layer (``attention/sdpa.py``; docs/design.md §2, after the table of data
structures).

Requests come and go (docs/design.md §3, "The request lifecycle"): ``submit`` queues one, the
scheduler (``scheduler.py``) admits waiting requests first come first served while the fixed KV
capacity (``kv_slots``) holds their worst case. A step with newcomers is a **prefill step** for
them alone (the next decode step includes them); else it is one **decode step** of the whole
batch in the setting the policy (``policy/``) picks: plain decoding, or one of its speculative
settings, all drafted by one draft built once, with pools sized for the largest. A finished
request leaves at once, its slots freed. ``add_requests`` is the one-batch case (without
``kv_slots``, sized for that batch).

With ``trace=True`` every step also fills one ``StepRecord`` per request (``record.py``):
``step_records()`` returns them, ``step()`` as JSON-ready traces (``trace.py``). Each phase is
timed as a context (``with timings.phase("verify"):``, ``timings.py``), after a
``torch.cuda.synchronize()`` when tracing on CUDA (each phase's kernels counted in it).
``debug=True`` (or ``WORKBENCH_DEBUG=1``; the tests set it) adds the invariant checks that cost
more than a comparison (docs/design.md §4).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from workbench.attention import BACKEND
from workbench.attention.batch import ForwardBatch, extend_batch, tree_batch
from workbench.engine import trace as tr
from workbench.engine.accept import CHAIN_WALKS, AcceptResult, greedy_walk, sampling_walk
from workbench.engine.config import SpecConfig, check_context
from workbench.engine.draft import DraftPhase
from workbench.engine.graph_check import graphs_by_default
from workbench.engine.graphs import step_lock
from workbench.engine.policy import Choice, SpecPolicy, draft_source_of, policy_for
from workbench.engine.record import DraftLevel, KVChange, PolicyNote, StepRecord, StopCause
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams, choose, target_probs
from workbench.engine.scheduler import Scheduler
from workbench.engine.stops import REACH, stop_cause
from workbench.engine.timings import StepProfile, StepTimings
from workbench.engine.tree import DraftTree, build_tree, rerank
from workbench.kv import SlotAllocator, SlotTable
from workbench.kv.pool import KVPool
from workbench.models.draft import DraftHead
from workbench.models.llama import TargetModel


class Engine:
    def __init__(self, target: TargetModel, draft: DraftHead | TargetModel | None = None,
                 spec: SpecConfig | None = None, *,
                 sampling: SamplingParams = SamplingParams(), stop_ids: tuple[int, ...] = (),
                 trace: bool = False, token_text=None, debug: bool | None = None,
                 cuda_graphs: bool | None = None, policy: SpecPolicy | None = None, kv_slots: int | None = None,
                 stops: bool = False):
        """``spec``: the one setting every step runs (default ``SpecConfig()``); or ``policy``
        (``policy/``), which picks each decode step's setting from the running batch: give one
        of the two. ``draft``: the EAGLE head when the settings draft with the head, the draft
        model for ``model:DIR`` (the n-gram and early-exit drafts need none). ``kv_slots``: the
        KV capacity in slots, for requests that come and go (``submit``); without it the first
        ``add_requests`` sizes the pools for exactly its batch. ``cuda_graphs``: replay decode,
        verify and the head's forwards (tree levels, and the extend when it fits a bucket) from
        CUDA graphs (``graphs.py``); None = on where it can be (a CUDA device and the triton
        attention backend) and the start-up check passed for these models (``graph_check.py``).
        ``stops``: keep why each speculative step stopped on its request (``Request.stop_causes``,
        ``stops.py``) without tracing too; a trace always says it."""
        if spec is not None and policy is not None:
            raise ValueError("give the engine a spec (one setting) or a policy (a setting per step), not both")
        self.policy = policy if policy is not None else policy_for(spec if spec is not None else SpecConfig())
        self.settings = settings = tuple(self.policy.settings())
        for s in settings:
            s.check_sampling(sampling.greedy)
        source = draft_source_of(settings)  # one draft for every setting the policy may pick
        self.target, self.sampling = target, sampling
        speculative = [s for s in settings if s.speculative]
        self.drafter = source.build(target, draft) if speculative else None  # drafts/: a Drafter
        self.keep_stops = stops or trace
        if self.drafter is not None and self.keep_stops:  # the draft's top at each node, for the stop's rank
            self.drafter.keep_top = REACH
        # Per request and step, on top of its committed tokens: the verify block and the draft's
        # scratch slots (allocated by its growth, freed before verify), for the largest setting.
        need = {s: s.num_draft_tokens + self.drafter.scratch_slots(s) if s.speculative else 1 for s in settings}
        self.spec = max(settings, key=need.get)  # the largest setting: what the pools are sized for
        # (each step's own setting is in its record: ``StepRecord.policy``)
        self.per_step = need[self.spec]
        self.draft_scratch = max((self.drafter.scratch_slots(s) for s in speculative), default=0)
        self.stop_ids = set(stop_ids)
        self.trace, self.token_text = trace, token_text or (lambda t: str(t))
        self.debug = os.environ.get("WORKBENCH_DEBUG") == "1" if debug is None else debug
        self.device = target.lm_head.weight.device
        self.cpu_gen = torch.Generator().manual_seed(sampling.seed)
        self.dev_gen = self.cpu_gen if self.device.type == "cpu" else \
            torch.Generator(device=self.device).manual_seed(sampling.seed)
        can_graph = self.device.type == "cuda" and BACKEND[target.attention_backend].graphable
        if cuda_graphs and not can_graph:
            raise ValueError("CUDA graphs need a CUDA device and the triton attention backend")
        graphed_head = draft if source is not None and source.needs.graphs else None  # the head's forwards
        self.cuda_graphs = graphs_by_default(target, graphed_head) if cuda_graphs is None else cuda_graphs
        self.graphed = None  # GraphedTarget: made with the KV pools
        # a fused head reads the residual stream after some target layers beside f_t
        self.taps = self.drafter.taps if self.drafter is not None else ()
        self.requests: list[Request] = []  # every request submitted, in arrival order (rid = index)
        self.batch: list[Request] = []  # admitted and not finished: prefilled, or waiting for the next step's
        self.newcomers: list[Request] = []  # admitted, prefilled by the next step
        self.scheduler: Scheduler | None = None
        self.table: SlotTable | None = None
        self.steps = 0
        self.profile = StepProfile()  # each step's phases, summed per setting (``timings.py``)
        self._timed: StepTimings | None = None  # the phases of the step running now
        if kv_slots is not None:
            self._start(kv_slots)

    # ---- setup and the request lifecycle (docs/design.md §3) -------------------------------------
    def _start(self, num_slots: int) -> None:
        """The KV pools, once, with a fixed capacity of ``num_slots`` slots."""
        self.scheduler = Scheduler(num_slots)
        self.table = SlotTable(SlotAllocator(num_slots))
        # With graphs, one more pool slot that no request owns takes the padding tokens' K/V.
        self.target_kv = self.target.new_kv_pool(num_slots + (1 if self.cuda_graphs else 0))
        if self.cuda_graphs:
            from workbench.engine.graphs import GraphedTarget

            self.graphed = GraphedTarget(self.target, self.target_kv, scratch_slot=num_slots, max_keys=num_slots + 1,
                                         taps=self.taps)
        if self.drafter is not None:
            self.drafter.start(num_slots, self.target_kv, self.cuda_graphs, self.draft_scratch)

    def slots_needed(self, prompt_len: int, max_new_tokens: int) -> int:
        """The most KV slots a request holds at once: its committed tokens (at most the prompt
        and every output token but the last) plus one step of the largest setting on top."""
        return prompt_len + max_new_tokens + self.per_step + 1

    def _check_request(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        if len(prompt_ids) == 0:
            raise ValueError("every prompt needs at least one token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        for s in self.settings:
            check_context(s, self.target.config.max_position_embeddings, len(prompt_ids), max_new_tokens)

    def submit(self, prompt_ids: list[int], max_new_tokens: int) -> Request:
        """Queue one request (token ids); the next step admits it, first come first served,
        once the KV capacity holds its worst case (``slots_needed``), and prefills it. Needs an
        engine made with ``kv_slots``; ValueError when the request could never fit it."""
        if self.scheduler is None:
            raise RuntimeError("submit needs an engine with a KV capacity: Engine(..., kv_slots=N); "
                               "add_requests sizes one for a single batch")
        self._check_request(prompt_ids, max_new_tokens)
        r = Request(len(self.requests), list(prompt_ids), max_new_tokens)
        self.scheduler.submit(r, self.slots_needed(len(r.prompt_ids), max_new_tokens))
        self.requests.append(r)
        return r

    def add_requests(self, prompts: list[list[int]], max_new_tokens: int) -> list[Request]:
        """Submit a batch and admit what fits at once. On an engine without ``kv_slots`` the
        first call sizes the KV pools for exactly this batch, so all of it is admitted and the
        next step prefills it (``running`` lists it before that step). Returns the new requests."""
        if not prompts:
            raise ValueError("every prompt needs at least one token")
        for p in prompts:
            self._check_request(p, max_new_tokens)
        needs = [self.slots_needed(len(p), max_new_tokens) for p in prompts]
        if self.scheduler is None:
            self._start(sum(needs))
        for p, need in zip(prompts, needs):  # all or nothing: check every request before queueing one
            self.scheduler.check_fits(len(p), max_new_tokens, need)
        new = [self.submit(p, max_new_tokens) for p in prompts]
        self._admit()
        return new

    def _admit(self) -> None:
        admitted = self.scheduler.admit()
        self.batch += admitted
        self.newcomers += admitted

    @property
    def waiting(self) -> list[Request]:
        """Submitted, not yet admitted (the KV capacity cannot hold them yet), oldest first."""
        return [r for r, _ in self.scheduler.waiting] if self.scheduler is not None else []

    @property
    def capacity(self) -> int | None:
        """The KV pool's slots (None before ``add_requests`` sizes it)."""
        return self.scheduler.capacity if self.scheduler is not None else None

    @property
    def draft_kv(self) -> KVPool | None:
        """The draft's KV pool: the head's own, an early exit's is the target's, none for n-grams."""
        return self.drafter.kv if self.drafter is not None else None

    @property
    def graphed_draft(self):
        """The head's CUDA-graph runner (``graphs.GraphedDraft``), None without graphs or a head."""
        return self.drafter.graphed if self.drafter is not None else None

    @property
    def running(self) -> list[Request]:
        """The batch: admitted and not finished (a newcomer from admission on, before its prefill)."""
        return [r for r in self.batch if not r.finished]

    @property
    def done(self) -> bool:
        """Nothing running and nothing waiting (False before the pools exist)."""
        return self.scheduler is not None and not self.running and not self.scheduler.waiting

    def run(self) -> list[Request]:
        while not self.done:
            self.step()
        return self.requests

    def step(self) -> list[dict]:
        """One step: a prefill of the newly admitted requests when there are any, else one
        decode or speculative step of the batch in the setting the policy picks. Returns one
        JSON-ready trace per request stepped when tracing, else []."""
        return [tr.step_trace(rec, self.token_text) for rec in self.step_records()]

    def step_records(self) -> list[StepRecord]:
        """Like ``step``, returning the ``StepRecord``s themselves (tracing on; else [])."""
        if self.scheduler is None:
            raise RuntimeError("add_requests or submit first")
        with step_lock(self.device):  # on CUDA, one engine step at a time in the process (graphs.py)
            start = time.perf_counter()
            self._admit()
            if not self.newcomers and not self.running:
                return []
            self.steps += 1
            if self.newcomers:  # newcomers first: a step is a prefill or a decode step, never both
                newcomers, self.newcomers = self.newcomers, []
                setting, stepped = "prefill", len(newcomers)
                records = self._prefill(newcomers)
            else:
                batch = self.running
                choice = self.policy.choose(batch)
                setting, stepped = choice.label, len(batch)
                if choice.spec not in self.settings:  # the pools are sized for those alone
                    raise ValueError(f"policy {self.policy.name} chose {choice.label}, which its settings() "
                                     "do not list")
                step = self._spec_step if choice.spec.speculative else self._vanilla_step
                records = step(batch, choice)
                self.policy.observe(choice, batch)
            if self.debug:  # no slot leaked or shared, scratch included; none over its reservation
                self.check_integrity()
            self.profile.add(setting=setting, requests=stepped, phases_ms=self._timed.ms,
                             wall_ms=(time.perf_counter() - start) * 1e3)
        return records

    @property
    def last_phases_ms(self) -> dict[str, float]:
        """The last step's phase times, ``"<phase>_ms"`` -> ms (``timings.py``; empty before any)."""
        timed = getattr(self, "_timed", None)
        return dict(timed.ms) if timed is not None else {}

    def _timings(self) -> StepTimings:
        """A step's phase times; read after a sync when tracing on CUDA (``timings.py``)."""
        self._timed = StepTimings(self.device, sync=self.trace)
        return self._timed

    # ---- prefill and plain decoding ------------------------------------------------------------
    def _prefill(self, reqs: list[Request]) -> list[StepRecord]:
        """The newly admitted requests' prompts, in one target forward: their KV, their first
        token, and the pairs their draft extend will run."""
        timings = self._timings()
        with timings.phase("prefill"):
            for r in reqs:  # each request's cache in one run of slots, its worst case set aside (kv/allocator.py)
                self.table.add_request(r.rid)
                self.table.allocator.reserve(r.rid, self.scheduler.reserved[r.rid])
                self.table.commit(r.rid, self.table.allocator.alloc(len(r.prompt_ids), owner=r.rid))
            batch = extend_batch(tokens=[r.prompt_ids for r in reqs], prefix_slots=[[] for _ in reqs],
                                 new_slots=[self.table.slots(r.rid) for r in reqs], device=self.device)
            hidden = self.target(batch, self.target_kv, self.taps)  # [T, H] (fused head: [T, W])
            ends = torch.tensor([len(r.prompt_ids) for r in reqs]).cumsum(0) - 1  # each prompt's last row
            logits = self.target.logits(hidden[ends.to(self.device)])
            first = choose(logits, self.sampling, self.dev_gen).tolist()
            offset, emitted, slots = 0, [], [list(self.table.slots(r.rid)) for r in reqs]
            for r, tok in zip(reqs, first):
                n = len(r.prompt_ids)
                r.target_forwards += 1
                r.root = tok
                # pairs (f_t, x_{t+1}) for t = 0..P-1
                r.set_pending(r.prompt_ids[1:] + [tok], hidden[offset : offset + n])
                offset += n
                emitted.append(r.emit([tok], ["prefill"], self.stop_ids))
            self._release_finished()
        if not self.trace:
            return []
        ids = [r.rid for r in reqs]
        choice = Choice(self.policy.name, None, f"request{'s' * (len(ids) > 1)} {', '.join(map(str, ids))} admitted")
        return [self._record(kind="prefill", request=r, spec=self.spec, choice=choice, batch=ids,
                             logits=logits[i : i + 1], emitted=emitted[i], kv=KVChange(0, slots[i], slots[i], []),
                             timing=timings.ms, prompt_len=len(r.prompt_ids))
                for i, r in enumerate(reqs)]

    def _vanilla_step(self, reqs: list[Request], choice: Choice) -> list[StepRecord]:
        """One plain decode step of the batch. With a draft that extends from pending pairs (the
        head), each step's pair (f_root, next token) joins them, so that the next speculative
        step's extend catches up on every token committed meanwhile (docs/design.md §4). The
        pair's feature row is copied (a graph's output buffer is overwritten by the next replay)
        and added beside the earlier ones, not concatenated to them: a plain step's work does not
        grow with the pairs pending."""
        timings = self._timings()
        keep_pairs = self.drafter is not None and self.drafter.reads_pending
        lens = [self.table.length(r.rid) for r in reqs]
        with timings.phase("decode"):
            new = [self.table.allocator.alloc(1, owner=r.rid) for r in reqs]
            batch = extend_batch(tokens=[[r.root] for r in reqs], prefix_slots=[self.table.slots(r.rid) for r in reqs],
                                 new_slots=new, device=self.device)
        hidden, logits = self._target_forward(batch, timings, "decode")  # [B, W], [B, V]
        with timings.phase("sample"):
            nxt = choose(logits, self.sampling, self.dev_gen).tolist()
        with timings.phase("commit"):
            emitted = []
            for i, (r, slots, tok) in enumerate(zip(reqs, new, nxt)):
                self.table.commit(r.rid, slots)
                r.target_forwards += 1
                if keep_pairs:  # the root is committed now: its pair waits for the draft
                    r.add_pending(tok, hidden[i : i + 1].clone())
                r.root = tok
                emitted.append(r.emit([tok], ["bonus"], self.stop_ids))
                r.accept_lengths.append(len(emitted[-1]))
                r.drafts_accepted.append(0)
                r.drafts_verified.append(0)
            self._release_finished()
        if not self.trace:
            return []
        ids = [r.rid for r in reqs]
        return [self._record(kind="decode", request=r, spec=choice.spec, choice=choice, batch=ids,
                             logits=logits[i : i + 1], emitted=emitted[i], kv=KVChange(lens[i], new[i], new[i], []),
                             timing=timings.ms)
                for i, r in enumerate(reqs)]

    # ---- one EAGLE-2 step ----------------------------------------------------------------------
    def _spec_step(self, reqs: list[Request], choice: Choice) -> list[StepRecord]:
        """One EAGLE-2 step of the batch, its phases in order (docs/design.md §3), each timed."""
        spec, timings = choice.spec, self._timings()
        lens = [self.table.length(r.rid) for r in reqs]  # L per request, before this step
        with timings.phase("draft_extend"):
            extended = self.drafter.extend(reqs, self.table)
        with timings.phase("draft_tree"):
            phase = self._draft(reqs, spec, extended)
        with timings.phase("build"):
            trees, verify_slots = self._build(reqs, spec, phase, lens)
        hidden, logits = self._verify(reqs, trees, verify_slots, timings)  # timed as "verify", then "logits"
        with timings.phase("accept"):
            results = self._accept(spec, trees, logits, phase)
        with timings.phase("commit"):
            commits = [self._commit(r, tree, res=res, slots=slots, hidden=h)
                       for r, tree, res, slots, h in zip(reqs, trees, results, verify_slots, per_tree(trees, hidden))]
            self.target_kv.move([m for c in commits for m in c.moved])
            self._release_finished()
        with timings.phase("stops"):  # why each walk stopped (its own phase: the benchmark keeps it on)
            causes = [self._stop(spec, c, tree, res) for c, tree, res in zip(phase.candidates, trees, results)] \
                if self.keep_stops else [None] * len(reqs)
        for r, cause in zip(reqs, causes):
            if cause is not None:
                r.stop_causes.append(cause.cause)
        if not self.trace:
            return []
        rids = [r.rid for r in reqs]
        return [self._record(kind="spec", request=r, spec=spec, choice=choice, batch=rids, logits=rows,
                             emitted=c.emitted, timing=timings.ms,
                             kv=KVChange(lens[i], verify_slots[i], c.kept, c.freed, moved=c.moved,
                                         draft_extend=extended.slots[i], draft_scratch=phase.scratch_slots[i]),
                             candidates=phase.candidates[i], levels=phase.levels[i], tree=trees[i], result=results[i],
                             stop=causes[i],
                             draft_probs=None if phase.chain_q is None else phase.chain_q[i].cpu())
                for i, (r, rows, c) in enumerate(zip(reqs, per_tree(trees, logits), commits))]

    def _stop(self, spec: SpecConfig, cands, tree: DraftTree, result: AcceptResult) -> StopCause:
        """Why one request's walk stopped (``stops.py``; kept when tracing or ``stops``)."""
        return stop_cause(cands=cands, tree=tree, result=result, rule=spec.accept_rule(self.sampling),
                          method=spec.method, spec=spec, source=spec.draft, proposes=self.drafter.proposes)

    def _draft(self, reqs: list[Request], spec: SpecConfig, extended) -> DraftPhase:
        """Every request's candidate tree, grown from its extend's output (``extended``); the tree
        levels' draft KV is scratch, back on the free list before the verify."""
        chain = self.sampling if spec.accept_rule(self.sampling) in CHAIN_WALKS else None
        return self.drafter.grow(reqs, self.table, extended=extended, spec=spec, chain=chain,
                                 generator=self.dev_gen)  # it frees its scratch KV

    def _build(self, reqs: list[Request], spec: SpecConfig, phase: DraftPhase,
               lens: list[int]) -> tuple[list[DraftTree], list[list[int]]]:
        """Each request's verify tree (its ``num_draft_tokens`` best candidates under the root,
        at L + depth) and the slots its nodes' K/V will take."""
        trees = []
        for r, c, L in zip(reqs, phase.candidates, lens):
            kept, dropped = rerank(c, spec.num_draft_tokens)
            trees.append(build_tree(r.root, c, kept, prefix_len=L, dropped=dropped))
        if self.debug:
            _check_positions(trees, phase.levels, lens, self.drafter.level_offset)
        return trees, [self.table.allocator.alloc(tree.num_nodes, owner=r.rid) for r, tree in zip(reqs, trees)]

    def _record(self, *, kind: str, request: Request, spec: SpecConfig, choice: Choice, batch: list[int],
                logits: torch.Tensor, emitted: list[int], kv: KVChange, timing: dict[str, float],
                **spec_parts) -> StepRecord:
        """The record of one request's step (tracing only), with the allocator counts after it.
        ``spec``: the setting the step ran (a prefill: the largest); ``batch``: the step's requests;
        ``timing``: the step's phase times (copied: each record owns its dict)."""
        a = self.table.allocator
        kv.allocated, kv.free, kv.total = a.num_used, a.num_free, a.num_slots
        draft = self.drafter.name if spec.speculative else "none"
        return StepRecord(kind=kind, step=self.steps, request=request.rid, method=spec.method,
                          rule=spec.accept_rule(self.sampling), sampling=self.sampling, logits=logits,
                          emitted=emitted, finish_reason=request.finish_reason, kv=kv, timing_ms=dict(timing),
                          draft=draft, policy=PolicyNote(choice.policy, choice.label, choice.reason), batch=batch,
                          **spec_parts)

    def _verify(self, reqs: list[Request], trees: list[DraftTree], slots: list[list[int]], timings: StepTimings):
        """One target forward over every node of every request: prefix from the cache, nodes
        under their tree mask. Returns hidden [T, W] (W = H, or a fused head's feature width) and
        logits [T, V] (row i: after node i)."""
        with timings.phase("verify"):
            batch = tree_batch(tokens=[t.tokens for t in trees], positions=[t.positions for t in trees],
                               prefix_slots=[self.table.slots(r.rid) for r in reqs], new_slots=slots,
                               masks=[t.mask for t in trees], device=self.device)
        return self._target_forward(batch, timings, "verify")

    def _target_forward(self, batch: ForwardBatch, timings: StepTimings,
                        phase: str) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [T, H] and logits [T, V]: from a CUDA graph when one fits (one replay, timed as
        ``phase``), else eagerly, the forward timed as ``phase`` and the logits as ``logits``."""
        if self.graphed is not None:
            with timings.phase(phase):
                return self.graphed(batch)
        with timings.phase(phase):
            hidden = self.target(batch, self.target_kv, self.taps)
        with timings.phase("logits"):
            return hidden, self.target.logits(hidden)

    def _accept(self, spec: SpecConfig, trees: list[DraftTree], logits: torch.Tensor,
                phase: DraftPhase) -> list[AcceptResult]:
        if self.sampling.greedy:
            argmax = per_tree(trees, logits.argmax(-1).cpu())
            return [greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, a.tolist())
                    for tree, a in zip(trees, argmax)]
        probs = per_tree(trees, target_probs(logits, self.sampling).cpu())  # [N_b, V] per tree
        if phase.chain_q is not None:  # a chain drawn from q: leviathan_chain or block_chain
            walk = CHAIN_WALKS[spec.accept_rule(self.sampling)]
            return [walk(tree.tokens, p, q.cpu(), self.cpu_gen) for tree, p, q in zip(trees, probs, phase.chain_q)]
        return [sampling_walk(tree.tokens, tree.retrieve_next_token, next_sibling=tree.retrieve_next_sibling, probs=p,
                              generator=self.cpu_gen, threshold_single=spec.accept_threshold_single,
                              threshold_acc=spec.accept_threshold_acc)
                for tree, p in zip(trees, probs)]

    def _commit(self, r: Request, tree: DraftTree, res: AcceptResult, slots: list[int], hidden: torch.Tensor) -> Commit:
        """Keep root + accepted, free the rest, emit n + 1 tokens (fewer when a stop token or
        max_new_tokens ends the output inside them). The kept slots are the first ``len(path)``
        of the step's: node path[i]'s row belongs in slots[i] (``Commit.moved``, copied by the
        caller for the whole batch at once)."""
        kept, freed, moved = self._kept_slots(slots, res.path)
        self.table.commit(r.rid, kept)
        self.table.allocator.free(freed)
        accepted = [tree.tokens[i] for i in res.path[1:]]
        r.target_forwards += 1
        emitted = r.emit(accepted + [res.bonus], ["accepted"] * len(accepted) + ["bonus"], self.stop_ids)
        r.accept_lengths.append(len(emitted))  # τ counts what the step emitted, not what the walk accepted
        r.drafts_accepted.append(len(accepted))
        r.drafts_verified.append(tree.num_nodes - 1)
        r.root = res.bonus
        r.set_pending(accepted + [res.bonus], hidden[res.path])  # pairs (f_root, a1), ..., (f_an, bonus)
        return Commit(kept, freed, moved, emitted)

    @staticmethod
    def _kept_slots(slots: list[int], path: list[int]) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """(kept, freed, moved) of a step's ``slots`` (one per node) under the accepted ``path``:
        the first len(path) kept, node path[i]'s rows moved to slots[i] where they are not there
        already (``experiments/commit_move.py`` times the other choice, the path's own slots)."""
        n = len(path)
        return slots[:n], slots[n:], [(slots[p], slots[i]) for i, p in enumerate(path) if p != i]

    def _release_finished(self) -> None:
        """A finished request leaves the batch at once: its target and draft KV slots go back
        to the free list (the draft's live at the same ids), its reservation to the scheduler."""
        for r in self.batch:
            if r.finished:
                self.table.release(r.rid)
                self.table.allocator.unreserve(r.rid)
                self.scheduler.retire(r.rid)
                r.drop_features()
        self.batch = [r for r in self.batch if not r.finished]

    def check_integrity(self) -> None:
        """Every slot free or owned by exactly one request; none holds more than it reserved."""
        self.table.check_integrity()
        self.scheduler.check({rid: len(slots) for rid, slots in self.table.tables.items()})


@dataclass
class Commit:
    """What one request's commit did: the slots kept (root + accepted, in position order) and
    freed, the rows to move there ((from slot, to slot): a node accepted off the front of the
    step's slots), and the tokens emitted."""

    kept: list[int]
    freed: list[int]
    moved: list[tuple[int, int]]
    emitted: list[int]


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
