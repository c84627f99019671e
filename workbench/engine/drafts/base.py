"""What every draft source provides, and the pieces the neural drafts share.

A draft source has two halves, both in its own module of this package:

* the **source** (a ``Source``: one object per kind, listed in ``registry.SOURCES``) reads and
  writes its ``--draft`` text, checks its fields and the loaded target, names itself for the
  pages and for SGLang and vLLM, says what it needs loaded (``needs``), and builds
* the **drafter**, which fills the ``DraftPhase`` the rest of the step shares. Rerank, build,
  verify, the accept walk, commit and the traces do not care where the candidates came from.
  A drafter gives the engine: ``scratch_slots(spec)``, the KV slots it takes per request and
  step (the engine sizes the pool with it); ``start(num_slots, target_kv, cuda_graphs,
  draft_scratch)``, its pools, once; ``extend(reqs, table)``, the work on last step's committed
  tokens, returning what proposes level 1 and the slots it kept; ``grow(...)``, the candidates
  (a neural draft through ``draft.grow_tree`` or ``static_tree.grow_static_tree``, level by
  level with path scores; the n-gram draft hands over its trie whole); and the attributes
  ``kv`` (its KV pool: its own, the target's, or None), ``graphed`` (its CUDA-graph runner or
  None), ``taps`` (target layers it reads beside f_t) and ``reads_pending`` (whether ``extend``
  runs the request's pending pairs, ``Request.pending_tokens`` / ``pending_features``: only the
  head's does, so only for the head does a plain decode step add its pair to them).

A ``DraftSource`` (``draft_source.py``) is the value: a kind and its fields, part of
``SpecConfig``; ``registry.source_of`` finds its ``Source``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from workbench.engine.draft import DraftForward, DraftPhase, grow_tree, scratch_slots_per_step
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.engine.static_tree import grow_static_tree, scratch_slots as static_scratch_slots
from workbench.kv import SlotAllocator
from workbench.models.llama import TargetModel

HEAD = "<EAGLE head>"  # what SGLang's and vLLM's flags name as the head's path
FRAMEWORKS = ("SGLang", "vLLM", "EAGLE")


@dataclass(frozen=True)
class Needs:
    """What a source needs loaded besides the target, and what its drafter keeps."""

    head: bool = False  # the EAGLE head (``Workbench.draft`` a ``DraftHead``)
    model: bool = False  # a separate draft model loaded from the source's directory
    own_kv: bool = False  # a KV pool of its own at the target's slot ids (else the target's, or none)
    graphs: bool = False  # its forwards replay from CUDA graphs when the engine graphs


class Source(Protocol):
    """One kind of draft source. ``source`` below is a ``DraftSource`` of this kind; ``spec`` a
    ``SpecConfig`` drafting with it."""

    kind: str  # the DraftSource.kind, and the word before the ':' in --draft
    grammar: str  # how --draft writes it, for help texts: "ngram[:MIN-MAX]"
    choice: str  # the app's radio label
    model_free: bool  # no draft distribution: the tree is handed over whole (q is a point mass)
    needs: Needs

    def parse(self, arg: str | None) -> dict | None:
        """The text after ``kind:`` (None: no colon) -> the DraftSource fields; ValueError if malformed."""

    def check(self, source) -> None:
        """ValueError unless the fields make sense for this kind (no target needed)."""

    def check_target(self, source, num_layers: int) -> None:
        """ValueError unless ``source`` fits a target of ``num_layers`` layers."""

    def name(self, source) -> str:
        """As ``--draft`` writes it: ``head``, ``ngram:1-12``, ``exit:28``."""

    def label(self, source, num_layers: int | None = None) -> str:
        """In the pages' words: "EAGLE head", "n-gram (prompt lookup, ngram:1-12)"."""

    def frameworks(self, spec) -> dict[str, str]:
        """{framework: how to ask it for ``spec``}, in ``FRAMEWORKS`` order."""

    def build(self, source, target: TargetModel, draft):
        """The drafter for ``target``; ``draft`` is what was loaded for it (head, model or None)."""


@dataclass
class Extended:
    """What a draft's extend left for its growth."""

    hidden: torch.Tensor | None  # [B, H]: the draft output that proposes level 1 (None: no extend)
    slots: list[list[int]]  # per request: draft KV written at committed slots, kept


def nothing(reqs: list[Request]) -> Extended:
    return Extended(None, [[] for _ in reqs])


def grow_neural(model, forward: DraftForward, allocator: SlotAllocator, prefixes: list[list[int]], h_last: torch.Tensor,
          spec, chain: SamplingParams | None, generator) -> DraftPhase:
    """A neural draft's tree: the static shape or EAGLE-2's dynamic growth."""
    if spec.method == "static":
        return grow_static_tree(model, forward, allocator, prefixes, h_last, spec.tree)
    return grow_tree(model, forward, allocator, prefixes, h_last, spec.num_steps, spec.topk, chain, generator)


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


def sglang_flags(spec, algorithm: str = "EAGLE", draft: str = HEAD) -> str:
    """SGLang's launch flags for a tree drafted by a model (the head, or ``STANDALONE``)."""
    flags = (f"--speculative-algorithm {algorithm} --speculative-draft-model-path {draft} "
             f"--speculative-num-steps {spec.num_steps} --speculative-eagle-topk {spec.topk} "
             f"--speculative-num-draft-tokens {spec.num_draft_tokens}")
    if spec.lossy:
        flags += (f" --speculative-accept-threshold-single {spec.accept_threshold_single:g}"
                  f" --speculative-accept-threshold-acc {spec.accept_threshold_acc:g} (lossy)")
    if spec.method == "static":
        return flags + " (SGLang grows a dynamic tree: the nearest setting, not this fixed tree)"
    return flags


def field(text: str, arg: str | None, form: str) -> str:
    """``arg`` when given, else ValueError naming the form ``text`` should take."""
    if not arg:
        raise ValueError(f"draft source {text!r}: write it as {form}")
    return arg
