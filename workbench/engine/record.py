"""What one step decided, per request: the engine fills a ``StepRecord``, ``trace.py`` turns it
into JSON, and nothing downstream recomputes any of it (docs/design.md §3).

Filled by ``engine.py`` only when tracing is on (a record holds the verify logits of its
request, ``[N, V]``); with tracing off the engine builds none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.engine.accept import AcceptResult
from workbench.engine.sampling import SamplingParams
from workbench.engine.tree import Candidates, DraftTree


@dataclass
class KVChange:
    """The KV slots one step touched for one request."""

    committed_before: int  # L: committed tokens (target slots in the table) before the step
    written: list[int]  # target slots written this step, in node order (prefill / decode: the new tokens)
    kept: list[int]  # the written slots committed: the first len(path), root + accepted drafts in path order
    freed: list[int]  # the rest, rolled back: back to the free list
    moved: list[tuple[int, int]] = field(default_factory=list)  # (from, to): an accepted node's rows copied to its kept slot
    draft_extend: list[int] = field(default_factory=list)  # draft KV written at committed slots, kept
    draft_scratch: list[int] = field(default_factory=list)  # draft KV of the tree levels, freed after drafting
    allocated: int = 0  # allocator counts after the step
    free: int = 0
    total: int = 0


@dataclass
class DraftLevel:
    """One draft forward after the first: the frontier at depth ``level`` runs through the draft
    and proposes the candidates at depth ``level + 1``. Its position is ``len(prefix) + level - 1``
    (``draft.Frontier.run_level``): ``L + level - 1`` for the head, one behind the target's nodes;
    ``L + level`` for an early exit or a draft model, whose prefix also holds the root
    (``level_offset`` -1 and 0 on the drafter; docs/design.md §4)."""

    level: int  # depth of the frontier nodes run by this forward
    frontier: list[int]  # their flat candidate indices, best path score first
    slots: list[int]  # scratch draft-KV slots they were written to
    position: int  # their position: L + level - 1 (the head), L + level (an early exit, a draft model)


@dataclass
class StopCause:
    """Why a speculative step's accept walk stopped where it did (filled by ``stops.py``): one
    cause of ``stops.CAUSES``, and what the record tells about the token the target wanted."""

    cause: str  # a key of stops.CAUSES: "depth", "budget", "frontier", "width", "draft", "coin", ...
    node: int  # the tree node the walk stopped at (``result.path[-1]``)
    candidate: int  # its flat candidate index (-1: the root)
    depth: int  # its depth (0: the root)
    token: int  # the target's token there: the bonus (greedy: the argmax; sampling: the draw)
    rank: int | None  # the token's rank in the draft's distribution at the stop node (0 = most likely);
    # None: no distribution (the n-gram lookup) or not among the most likely the record kept
    prob: float | None  # the draft's probability of the token there (None as for rank)
    catch: dict[str, int] = field(default_factory=dict)  # the smallest change that would have caught it,
    # where the step alone tells: {"num_draft_tokens": 9}, {"num_steps": 6}, {"topk": 5}; {} otherwise


@dataclass
class PolicyNote:
    """What a step ran, as the speculation policy chose it (``policy.Choice``, in words)."""

    name: str  # the policy: "off", "fixed", "schedule", "adaptive", ...
    choice: str  # the setting: "eagle2:8/5/4", "linear:3", "off"; "prefill" on a prefill step
    reason: str  # "batch 3 in 3-4", "fixed", "requests 4, 5 admitted", ...


@dataclass
class StepRecord:
    """Everything one step did for one request. ``kind``: "prefill", "decode" (vanilla) or "spec"."""

    kind: str
    step: int  # the engine's step count, from 1 (a prefill step: kind "prefill" for each request it admitted)
    request: int  # request id
    method: str
    rule: str  # accept rule: "greedy", "target-only", "leviathan" or "block"
    sampling: SamplingParams  # what the target distribution p shown in ``verify.top`` means
    logits: torch.Tensor  # [N, V] target logits of this request's rows (row i: the token after node i)
    emitted: list[int]  # tokens appended to the output (cut after a stop token / max_new_tokens)
    finish_reason: str | None  # "stop", "length" or None while running
    kv: KVChange
    timing_ms: dict[str, float]  # per phase
    draft: str = "head"  # the draft source (``DraftSource.name``; "none" for vanilla)
    policy: PolicyNote | None = None  # what the step ran and why
    batch: list[int] = field(default_factory=list)  # ids of every request the step ran, in batch order
    prompt_len: int | None = None  # prefill only
    # spec only: the draft phase, the verify tree and the accept walk's result
    candidates: Candidates | None = None
    levels: list[DraftLevel] = field(default_factory=list)
    tree: DraftTree | None = None
    result: AcceptResult | None = None
    stop: StopCause | None = None  # why the walk stopped (stops.py)
    draft_probs: torch.Tensor | None = None  # a chain drawn from q (leviathan, block): [n, V] q at each draft
