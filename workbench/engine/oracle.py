"""Expected accept length of a tree, and the tree a perfect head would draft.

**Expected accept length.** Under the target-only rule (``accept.sampling_walk``) the walk at an
accepted node tries its children in order; child ``c_i`` is reached with probability
``1 - p(c_1) - ... - p(c_{i-1})`` (the mass of the children rejected before it is removed) and
accepted with ``p(c_i)`` over that mass, so it is accepted with probability exactly ``p(c_i)``,
the target's probability of its token. The walk thus follows the tree as far as a token-by-token
draw from ``p`` would, and over the coins::

    E[accept length] = 1 + sum over the non-root nodes of P(path),  P(path) = product of p along it

(the 1 is the bonus token). It reads only the tree and the verify logits a step already has, so
it has none of the coins' noise; greedy (``p`` one-hot) gives the accept length itself. The same
sum restricted to depth ``d`` is ``P(accept length > d)``, the chance the walk gets past depth d.

**A perfect head.** The draft's only part in target-only sampling is *which* tokens the tree
holds. A head that proposed from the target's own distribution would put the most probable paths
in it: ``perfect_head_trees`` grows that tree with the engine's own procedure (``draft.grow_tree``:
top-k frontier by path score, level by level; ``tree.rerank`` to ``num_draft_tokens - 1``), only
the scores are the target's probabilities, computed by target forwards over the frontier under
the tree mask. Its expected accept length is what the tree budget allows at this temperature,
whatever the head: the gap between a head's figure and it is what a better head can still win;
the gap between it and ``num_steps + 1`` is the target's own uncertainty, which no head removes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.attention.batch import extend_batch
from workbench.engine.draft import grow_tree, scratch_slots_per_step
from workbench.engine.record import StepRecord
from workbench.engine.sampling import SamplingParams, target_probs
from workbench.engine.tree import rerank
from workbench.kv import SlotAllocator, SlotTable
from workbench.models.llama import TargetModel


@dataclass(frozen=True)
class Expectation:
    """Over the coins of one verify step: ``accept_length`` = E[tokens emitted], ``reach[d-1]`` =
    P(the walk accepts a node at depth d), for d = 1..num_steps."""

    accept_length: float
    reach: tuple[float, ...]


def path_mass(tokens: list[int], parents: list[int], probs: torch.Tensor) -> list[float]:
    """P(path) of every node (root 1.0); ``probs[i]`` [V] is the target distribution after node i.
    Parents must come before their children (as in every tree the engine builds)."""
    mass = [1.0] * len(tokens)
    for i in range(1, len(tokens)):
        j = parents[i]
        if not 0 <= j < i:
            raise ValueError(f"node {i}: parent {j} does not come before it")
        mass[i] = mass[j] * float(probs[j, tokens[i]])
    return mass


def expectation(tokens: list[int], parents: list[int], depths: list[int], probs: torch.Tensor,
                num_steps: int) -> Expectation:
    mass = path_mass(tokens, parents, probs)
    reach = [0.0] * num_steps
    for m, d in zip(mass[1:], depths[1:]):
        reach[d - 1] += m
    return Expectation(1.0 + sum(mass[1:]), tuple(min(r, 1.0) for r in reach))


def step_expectation(rec: StepRecord, num_steps: int) -> Expectation:
    """The expectation of one speculative step from its record: its tree and verify logits, under
    the sampling parameters it ran with (``target_probs``, as the walk used)."""
    if rec.kind != "spec" or rec.tree is None:
        raise ValueError(f"step {rec.step} is a {rec.kind} step: only speculative steps have a tree")
    probs = target_probs(rec.logits, rec.sampling).cpu()
    return expectation(rec.tree.tokens, rec.tree.parents, rec.tree.depths, probs, num_steps)


class _TargetAsHead:
    """What ``grow_tree`` asks of a head, answered by the target: its distribution under the
    sampling parameters, as log-probabilities over the full vocabulary."""

    def __init__(self, target: TargetModel, sampling: SamplingParams):
        self.target, self.sampling = target, sampling

    def log_probs(self, hidden: torch.Tensor) -> tuple[torch.Tensor, None]:
        return torch.log(target_probs(self.target.logits(hidden), self.sampling)), None


@torch.no_grad()
def perfect_head_trees(target: TargetModel, sequences: list[list[int]], points: list[tuple[int, int]],
                       num_steps: int, topk: int, num_draft_tokens: int, sampling: SamplingParams,
                       chunk: int = 32) -> list[Expectation]:
    """The expectation of the tree a perfect head drafts at each point ``(i, L)``: the context is
    ``sequences[i][:L]`` (committed), the root ``sequences[i][L]``. Each sequence is prefilled
    once; a point reads the first ``L + 1`` of its slots (causal: a prefix's KV does not depend on
    what follows it), and its tree levels write scratch slots, freed after every ``chunk`` points."""
    for i, L in points:
        if not 0 <= i < len(sequences) or not 0 <= L < len(sequences[i]):
            raise ValueError(f"point ({i}, {L}): no such sequence position")
    device = target.lm_head.weight.device
    scratch = scratch_slots_per_step(num_steps, topk)
    allocator = SlotAllocator(sum(len(s) for s in sequences) + chunk * scratch)
    kv = target.new_kv_pool(allocator.num_slots)
    slots, hidden = [], []
    for seq in sequences:
        s = allocator.alloc(len(seq))
        slots.append(s)
        hidden.append(target(extend_batch([seq], [[]], [s], [0], device), kv))  # [len, H]
    head = _TargetAsHead(target, sampling)
    out = []
    for start in range(0, len(points), chunk):
        part = points[start : start + chunk]
        table = SlotTable(allocator)
        for b, (i, L) in enumerate(part):
            table.add_request(b)
            table.commit(b, slots[i][: L + 1])  # context + root: depth-d nodes sit at L + d
        h_root = torch.stack([hidden[i][L] for i, L in part])
        phase = grow_tree(head, kv, table, list(range(len(part))), h_root, num_steps, topk,
                          forward=lambda _features, batch: target(batch, kv))
        for s in phase.scratch_slots:
            allocator.free(s)
        for c in phase.candidates:
            kept, _ = rerank(c, num_draft_tokens)
            reach = [0.0] * num_steps
            for k in kept:
                reach[c.depths[k] - 1] += c.scores[k]
            out.append(Expectation(1.0 + sum(c.scores[k] for k in kept), tuple(min(r, 1.0) for r in reach)))
    return out
