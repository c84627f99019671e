"""The draft sources behind one engine: each fills a ``DraftPhase`` the rest of the step shares.

Rerank, build, verify, the accept walk, commit and the traces do not care where the candidates
came from. A draft gives the engine four things:

* ``scratch_slots(spec)``: the KV slots it takes per request and step (the engine sizes the
  pool with it), and ``start(num_slots, target_kv, cuda_graphs, draft_scratch)``: its pools, once;
* ``extend(reqs, table)``: the work on last step's committed tokens (the head's draft extend;
  nothing for the others), returning what proposes level 1 and the slots it kept;
* ``grow(reqs, table, extended, spec, chain, generator)``: the candidates. A neural draft grows
  them through ``draft.grow_tree`` (``static_tree.grow_static_tree`` for method static), level
  by level with path scores; the n-gram draft hands over its trie (``ngram.py``) whole.

``reads_pending`` says whether ``extend`` runs the request's pending pairs (``Request.pending_tokens``
/ ``pending_features``): only the head's does, so only for the head does a plain decode step,
when a policy switches speculation off, add its pair to them (``Engine._vanilla_step``); a
draft model catches up from the committed tokens themselves, the others keep no draft state.

``HeadDraft`` (the EAGLE head), ``ExitDraft`` (the target's first N layers), ``ModelDraft`` (a
separate small model with the target's tokenizer) and ``NgramDraft``; ``make_draft`` picks one
from ``SpecConfig.draft``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.attention.batch import extend_batch
from workbench.engine.config import SpecConfig
from workbench.engine.draft import DraftForward, DraftPhase, draft_extend, grow_tree, head_forward
from workbench.engine.draft import scratch_slots_per_step
from workbench.engine.draft_source import DraftSource
from workbench.engine.ngram import ngram_candidates
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.engine.static_tree import grow_static_tree, scratch_slots as static_scratch_slots
from workbench.kv import SlotAllocator, SlotTable
from workbench.kv.pool import KVPool
from workbench.models.draft import DraftHead
from workbench.models.llama import TargetModel


@dataclass
class Extended:
    """What a draft's extend left for its growth."""

    hidden: torch.Tensor | None  # [B, H]: the draft output that proposes level 1 (None: no extend)
    slots: list[list[int]]  # per request: draft KV written at committed slots, kept


def _nothing(reqs: list[Request]) -> Extended:
    return Extended(None, [[] for _ in reqs])


def _grow(model, forward: DraftForward, allocator: SlotAllocator, prefixes: list[list[int]], h_last: torch.Tensor,
          spec: SpecConfig, chain: SamplingParams | None, generator) -> DraftPhase:
    """A neural draft's tree: the static shape or EAGLE-2's dynamic growth."""
    if spec.method == "static":
        return grow_static_tree(model, forward, allocator, prefixes, h_last, spec.tree)
    return grow_tree(model, forward, allocator, prefixes, h_last, spec.num_steps, spec.topk, chain, generator)


def _tree_scratch(spec: SpecConfig) -> int:
    return static_scratch_slots(spec.tree) if spec.method == "static" else \
        scratch_slots_per_step(spec.num_steps, spec.topk)


class HeadDraft:
    """The EAGLE head: its own KV at the target's slot ids, extended each step with the pairs
    (f_t, x_{t+1}) the last step committed; level 1 comes from the extend's last row."""

    level_offset = -1  # a frontier node at depth d runs at L + d - 1 (docs/design.md §4)
    reads_pending = True

    def __init__(self, head: DraftHead, source: DraftSource = DraftSource()):
        self.head, self.name = head, source.name
        self.taps = tuple(head.fuse_layers)  # a fused head reads these target layers beside f_t
        self.kv: KVPool | None = None
        self.graphed = None  # graphs.GraphedDraft when CUDA graphs are on

    def scratch_slots(self, spec: SpecConfig) -> int:
        return _tree_scratch(spec)

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        # With graphs, one more pool slot that no request owns takes the padding tokens' K/V.
        self.kv = self.head.new_kv_pool(num_slots + (1 if cuda_graphs else 0))
        if cuda_graphs:
            from workbench.engine.graphs import GraphedDraft

            # A tree level also attends its ancestors' scratch KV: at most a step's scratch slots.
            self.graphed = GraphedDraft(self.head, self.kv, scratch_slot=num_slots, max_keys=num_slots + 1,
                                        max_extra=draft_scratch)

    def extend(self, reqs: list[Request], table: SlotTable) -> Extended:
        lens = [table.length(r.rid) for r in reqs]
        _check_pending(reqs, lens)
        hidden, slots = draft_extend(self.head, self.kv, table, [r.rid for r in reqs], [r.pending_tokens for r in reqs],
                                     [r.pending_features for r in reqs], self.graphed)
        for r, L in zip(reqs, lens):
            r.draft_length = L
        return Extended(hidden, slots)

    def grow(self, reqs: list[Request], table: SlotTable, extended: Extended, spec: SpecConfig,
             chain: SamplingParams | None, generator) -> DraftPhase:
        return _grow(self.head, head_forward(self.head, self.kv, self.graphed), table.allocator,
                     [table.slots(r.rid) for r in reqs], extended.hidden, spec, chain, generator)


class ExitDraft:
    """Self-speculation: the target's first ``num_layers`` layers, its final norm and LM head.
    For committed tokens those layers' K/V are the target's own, so there is no pool and no
    extend: level 1 runs the root at L, and each tree level writes scratch K/V of those layers
    in the target's pool, attending the committed prefix, the root and the node's ancestors."""

    level_offset = 0  # a frontier node at depth d runs at L + d, its own position
    taps = ()
    reads_pending = False

    def __init__(self, target: TargetModel, source: DraftSource):
        source.check_target(target.config.num_layers)
        self.model, self.num_layers, self.name = target, source.num_layers, source.name
        self.kv: KVPool | None = None  # the target's

    def scratch_slots(self, spec: SpecConfig) -> int:
        return 1 + _tree_scratch(spec)  # + the root

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        self.kv = target_kv

    def extend(self, reqs: list[Request], table: SlotTable) -> Extended:
        return _nothing(reqs)

    def forward(self, features: torch.Tensor, batch) -> torch.Tensor:
        """A ``DraftForward``: the tokens through the first layers (``features`` unused: the
        draft reads tokens, not the parent's output). Returns post-norm hidden [T, H]."""
        return self.model(batch, self.kv, num_layers=self.num_layers)

    def log_probs(self, hidden: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The exit's distribution at temperature 1 over the full vocabulary [R, V], as a head drafts."""
        return torch.log_softmax(self.model.logits(hidden), dim=-1), None

    def grow(self, reqs: list[Request], table: SlotTable, extended: Extended, spec: SpecConfig,
             chain: SamplingParams | None, generator) -> DraftPhase:
        alloc = table.allocator
        roots = [alloc.alloc(1) for _ in reqs]
        prefixes = [table.slots(r.rid) for r in reqs]
        batch = extend_batch([[r.root] for r in reqs], prefixes, roots, [len(p) for p in prefixes],
                             self.model.lm_head.weight.device)
        h_root = self.forward(None, batch)  # [B, H]: the root at L proposes level 1
        phase = _grow(self, self.forward, alloc, [p + s for p, s in zip(prefixes, roots)], h_root, spec, chain,
                      generator)
        phase.scratch_slots = [s + level for s, level in zip(roots, phase.scratch_slots)]
        return phase


class ModelDraft(ExitDraft):
    """A separate small model with the target's tokenizer: its own KV pool at the target's slot
    ids, extended each step with the tokens committed since (the prompt, then root + accepted),
    then grown exactly as an early exit (the root at L, each node at its own position)."""

    def __init__(self, model: TargetModel, target: TargetModel, source: DraftSource):
        if model.config.vocab_size != target.config.vocab_size:
            raise ValueError(f"{source.name}: its vocabulary ({model.config.vocab_size}) is not the target's "
                             f"({target.config.vocab_size}); a draft model needs the target's tokenizer")
        self.model, self.num_layers, self.name = model, None, source.name
        self.kv: KVPool | None = None

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        self.kv = self.model.new_kv_pool(num_slots)

    def extend(self, reqs: list[Request], table: SlotTable) -> Extended:
        """The committed tokens the draft has not seen, at their own slots and positions."""
        tokens, prefix, new = [], [], []
        for r in reqs:
            slots, start = table.slots(r.rid), r.draft_length
            tokens.append((r.prompt_ids + r.output_ids)[start : len(slots)])  # committed = all but the root
            prefix.append(slots[:start])
            new.append(slots[start:])
            r.draft_length = len(slots)
        self.model(extend_batch(tokens, prefix, new, [len(p) for p in prefix], self.model.lm_head.weight.device),
                   self.kv)
        return Extended(None, new)


class NgramDraft:
    """No model: each request's tree is looked up in its own tokens (``ngram.py``)."""

    level_offset = 0  # no levels
    taps = ()
    reads_pending = False

    def __init__(self, source: DraftSource):
        self.source, self.name = source, source.name

    def scratch_slots(self, spec: SpecConfig) -> int:
        return 0

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        pass

    def extend(self, reqs: list[Request], table: SlotTable) -> Extended:
        return _nothing(reqs)

    def grow(self, reqs: list[Request], table: SlotTable, extended: Extended, spec: SpecConfig,
             chain: SamplingParams | None, generator) -> DraftPhase:
        s = self.source
        cands = [ngram_candidates(r.prompt_ids + r.output_ids, s.min_match, s.max_match, spec.num_steps, spec.topk)
                 for r in reqs]
        return DraftPhase(cands, [[] for _ in reqs], [[] for _ in reqs])


def make_draft(spec: SpecConfig, target: TargetModel, head: DraftHead | TargetModel | None):
    """The draft ``spec.draft`` names, for ``target``; the head draft needs ``head`` (the EAGLE
    head), ``model:DIR`` the loaded draft model in its place."""
    source = spec.draft
    if source.kind == "exit":
        return ExitDraft(target, source)
    if source.kind == "ngram":
        return NgramDraft(source)
    if source.kind == "model":
        if not isinstance(head, TargetModel):
            raise ValueError(f"{source.name}: the engine needs the draft model itself (load it first)")
        return ModelDraft(head, target, source)
    if not isinstance(head, DraftHead):
        raise ValueError(f"method {spec.method} with the head draft needs a draft head")
    return HeadDraft(head, source)


def _check_pending(reqs: list[Request], lens: list[int]) -> None:
    """The draft extend writes the pending pairs at the last committed slots: the draft KV must
    cover exactly the committed positions before them (docs/design.md §4)."""
    for r, L in zip(reqs, lens):
        if r.draft_length + len(r.pending_tokens) != L:
            raise AssertionError(f"request {r.rid}: draft KV covers {r.draft_length} positions + "
                                 f"{len(r.pending_tokens)} pending pairs, but {L} are committed")
