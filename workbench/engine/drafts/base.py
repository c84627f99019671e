"""What every draft source is, and the pieces the neural drafts share.

A draft source has two halves, both in its own module of this package:

* the **source** (a ``DraftSource``): a frozen dataclass of its fields, checked in
  ``__post_init__``, whose class says everything else the project needs to know about it: how
  ``--draft`` writes it (``parse``, ``name``, ``grammar``), what the pages call it and draw it in
  (``choice``, ``label``, ``colour``), which fields the app shows as number boxes (``knob``),
  whether it fits a target (``check_target``), what a draft forward costs (``draft_cost``), what
  it needs loaded (``needs``, ``load``), how SGLang, vLLM and EAGLE ask for it (``frameworks``,
  ``vllm_draft``; ``engine/frameworks.py`` writes the flags and checks them against each engine's
  rule), and the drafter it builds. ``registry.SOURCES`` lists them; the CLI, the app, the bench,
  the step cost, the figures and the messages iterate it.
* the **drafter** (a ``Drafter``), which the engine calls each step to fill the ``DraftPhase`` the
  rest of the step shares. Rerank, build, verify, the accept walk, commit and the traces do not
  care where the candidates came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, ClassVar, Protocol

import torch

from workbench.engine.draft import DraftForward, DraftPhase, grow_tree, scratch_slots_per_step
from workbench.engine.frameworks import FRAMEWORKS
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.engine.static_tree import grow_static_tree, scratch_slots as static_scratch_slots
from workbench.kv import SlotAllocator, SlotTable
from workbench.kv.pool import KVPool
from workbench.models.config import ModelConfig


@dataclass(frozen=True)
class Needs:
    """What a source needs loaded besides the target, and what its drafter keeps."""

    head: bool = False  # the EAGLE head (``Workbench.draft`` a ``DraftHead``)
    model: bool = False  # a separate draft model loaded from the source's directory
    own_kv: bool = False  # a KV pool of its own at the target's slot ids (else the target's, or none)
    graphs: bool = False  # its forwards replay from CUDA graphs when the engine graphs

    @property
    def loaded(self) -> bool:
        """Whether it drafts with something loaded beside the target (one per workbench)."""
        return self.head or self.model


def knob(default: int, box: str, words: str, most: Callable[[ModelConfig], int] | None = None):
    """A source's integer field that the app shows as a number box: its default, the box's
    name (the page's input and the API's parameter), its words in messages, and the largest
    value a target takes (``most(config)``: the box's range, and its first value at most that)."""
    return field(default=default, metadata={"box": box, "words": words, "most": most})


@dataclass(frozen=True)
class Box:
    """One source field as the app's number box (see ``knob``)."""

    field: str
    name: str
    words: str
    default: int
    most: Callable[[ModelConfig], int] | None

    def first(self, target: ModelConfig) -> int:
        """The box's first value on a page for ``target``: the default, at most what it takes."""
        return self.default if self.most is None else min(self.default, self.most(target))

    def label(self, target: ModelConfig) -> str:
        return self.words if self.most is None else f"{self.words} (1..{self.most(target)})"


def boxes(source) -> tuple[Box, ...]:
    """The number boxes of a ``DraftSource`` (class or value), in field order."""
    return tuple(Box(f.name, f.metadata["box"], words=f.metadata["words"], default=f.default, most=f.metadata["most"])
                 for f in fields(source) if "box" in f.metadata)


class DraftSource:
    """One kind of draft source, subclassed by a frozen dataclass of its fields in its module;
    the defaults suit a source with no fields, no model and no forward."""

    kind: ClassVar[str]  # the word before the ':' in --draft, the registry's key
    grammar: ClassVar[str]  # how --draft writes it, for help texts and messages: "ngram[:MIN-MAX]"
    choice: ClassVar[str]  # the app's radio label
    colour: ClassVar[str]  # its runs' colour in every figure (an Okabe-Ito hue, as viz/style.py)
    model_free: ClassVar[bool] = False  # no draft distribution: the tree is handed over whole (q is a point mass)
    nothing_drafted: ClassVar[str] = "no candidate"  # why a step may draft nothing, for the pages
    # the stop cause (``engine/stops.py``) where the walk stopped at a node the draft proposed
    # nothing below: a dynamic tree's node left out of its level's frontier
    unexpanded_cause: ClassVar[str] = "frontier"
    needs: ClassVar[Needs] = Needs()

    @classmethod
    def parse(cls, arg: str | None):
        """The text after ``kind:`` (None: no colon) -> the source; ValueError if malformed."""
        if arg is not None:
            raise ValueError(f"draft source '{cls.kind}:{arg}': write it as {cls.grammar}")
        return cls()

    @property
    def name(self) -> str:
        """As ``--draft`` writes it: ``head``, ``ngram:1-12``, ``exit:28``."""
        return self.kind

    def label(self, num_layers: int | None = None) -> str:
        """In the pages' words: "EAGLE head", "n-gram (prompt lookup, ngram:1-12)"."""
        return self.choice

    def check_target(self, target: ModelConfig) -> None:
        """ValueError unless this source fits ``target`` (the one home of the fit check)."""

    def miss_cause(self, rank: int | None, reach: int) -> str:
        """The stop cause (``engine/stops.py``) where the draft ran at the stop node and did not
        propose the target's token: ``rank`` is the token's rank in the draft's distribution there
        (0 = most likely; None: not among the ``reach`` most likely the record kept). Within reach a
        wider tree (a larger ``topk``) would have proposed it ("width"); beyond, the draft disagreed."""
        return "width" if rank is not None and rank < reach else "draft"

    def frameworks(self, spec) -> dict[str, str]:
        """{framework: how to ask it for ``spec``}, in ``FRAMEWORKS`` order (``frameworks.py``
        writes the flags and checks them against each engine's rule)."""
        return {name: f"no {self.kind} draft" for name in FRAMEWORKS}

    def vllm_draft(self) -> dict | None:
        """The keys of vLLM's ``speculative_config`` that name this draft (``method`` and its own
        fields); None: vLLM has no such draft."""
        return None

    def draft_cost(self, timers) -> list[tuple[int, float]]:
        """Its draft forward's (rows, ms) at a few row counts ([]: no forward), for ``auto``'s step
        cost; ``timers`` (``measure.step_cost.Timers``) has the target's ``verify`` points and
        ``num_layers``, and times the loaded ``head()`` or draft ``model()``."""
        return []

    def load(self, target):
        """What it drafts with besides the target (a draft model), loaded like ``target``."""

    def build(self, target, draft) -> Drafter:
        """The drafter for ``target``; ``draft`` is what was loaded for it (head, model or None)."""


@dataclass
class Extended:
    """What a draft's extend left for its growth."""

    hidden: torch.Tensor | None  # [B, H]: the draft output that proposes level 1 (None: no extend)
    slots: list[list[int]]  # per request: draft KV written at committed slots, kept


class Drafter(Protocol):
    """What the engine calls each step. Subclass it for the defaults (no KV, no extend, no scratch)."""

    name: str  # the source as --draft writes it (the traces' ``draft_source``)
    kv: KVPool | None = None  # its KV pool: its own, the target's, or None
    graphed = None  # its CUDA-graph runner (graphs.GraphedDraft) or None
    taps: tuple[int, ...] = ()  # target layers it reads beside f_t (a fused head)
    # whether ``extend`` runs the request's pending pairs (``Request.pending_tokens`` /
    # ``pending_features``): only then does a plain decode step add its pair to them
    reads_pending: bool = False
    level_offset: int = 0  # a frontier node at depth d runs at L + d + level_offset
    # set by the engine when it keeps stop causes (tracing): how many of the draft's most likely
    # tokens ``grow`` keeps at each node it runs, so a record can rank the target's token there
    keep_top: int = 0

    def scratch_slots(self, spec) -> int:
        """The KV slots ``grow`` takes per request and step for ``spec`` (the engine sizes the pool)."""
        return 0

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        """Its pools, once, for ``num_slots`` slots."""

    def extend(self, reqs: list[Request], table: SlotTable) -> Extended:
        """The work on last step's committed tokens: what proposes level 1, and the slots it kept."""
        return Extended(None, [[] for _ in reqs])

    def grow(self, reqs: list[Request], table: SlotTable, *, extended: Extended, spec,
             chain: SamplingParams | None, generator) -> DraftPhase:
        """The candidates, with every scratch slot it took already freed (``freed``); with
        ``keep_top`` > 0, a draft with a distribution keeps its most likely tokens at each node it
        ran (``Candidates.top``)."""

    def proposes(self, token: int) -> bool:
        """Whether this draft can propose ``token`` at all (a head with hot draft tokens: only those)."""
        return True


def freed(allocator: SlotAllocator, phase: DraftPhase) -> DraftPhase:
    """``phase`` after its scratch slots went back to the free list (they stay in it, for the record)."""
    for slots in phase.scratch_slots:
        allocator.free(slots)
    return phase


def grow_neural(model, forward: DraftForward, *, allocator: SlotAllocator, prefixes: list[list[int]],
                h_last: torch.Tensor, spec, chain: SamplingParams | None, generator, keep_top: int = 0) -> DraftPhase:
    """A neural draft's tree: the static shape or EAGLE-2's dynamic growth."""
    if spec.method == "static":
        return grow_static_tree(model, forward, allocator=allocator, prefixes=prefixes, h_last=h_last, paths=spec.tree,
                                keep_top=keep_top)
    return grow_tree(model, forward, allocator=allocator, prefixes=prefixes, h_last=h_last, num_steps=spec.num_steps,
                     topk=spec.topk, sampled_chain=chain, generator=generator, keep_top=keep_top)


def tree_scratch(spec) -> int:
    return static_scratch_slots(spec.tree) if spec.method == "static" else \
        scratch_slots_per_step(spec.num_steps, spec.topk)


def check_pending(reqs: list[Request], lens: list[int]) -> None:
    """The draft extend writes the pending pairs at the last committed slots: the draft KV must
    cover exactly the committed positions before them (docs/design.md §4)."""
    for r, L in zip(reqs, lens):
        if r.draft_length + len(r.pending_tokens) != L:
            raise AssertionError(f"request {r.rid}: draft KV covers {r.draft_length} positions + "
                                 f"{len(r.pending_tokens)} pending pairs, but {L} are committed")

