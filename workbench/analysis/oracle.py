"""The trees a perfect head and an early exit of the target would draft, and what each is worth
(``expectation.py``: the expected accept length of a tree over the coins).

**A perfect head.** The draft's only part in target-only sampling is *which* tokens the tree
holds. A head that proposed from the target's own distribution would put the most probable paths
in it: ``perfect_head_trees`` grows that tree with the engine's own procedure (``draft.grow_tree``:
top-k frontier by path score, level by level; ``tree.rerank`` to ``num_draft_tokens - 1``), only
the scores are the target's probabilities, computed by target forwards over the frontier under
the tree mask. Its expected accept length is a greedy reference for the budget, not an upper
bound: the frontier keeps only the newest level's top-k, so a head that ranked differently could
hold a better tree (notebook 04 computes such a case). A head's gap to the reference is what a
better head can win within this procedure; the reference's gap to ``num_steps + 1`` is mostly
the target's own uncertainty.

**Drafts of known quality.** Between our head and a perfect one, ``early_exit_trees`` drafts with
the target cut short: its first ``n`` layers, then its final norm and lm_head (an early exit, as
self-speculative decoding drafts), through the same procedure and budget. Fewer layers make a
worse draft; all of them is the perfect head (greedy: a head with perfect top-1 that still ranks
its tree by its own confidence). Each tree is verified by the whole target at the same context,
so its expectation is what that draft's tree is worth; beside it, how often the exit's top token
is the whole target's (a head's ``--agreement`` top-1). Together they trace what accept length a
draft of a given agreement buys, measured rather than extrapolated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.analysis.expectation import Expectation, expectation, from_mass
from workbench.attention.batch import extend_batch, tree_batch
from workbench.engine.draft import grow_tree, scratch_slots_per_step
from workbench.engine.drafts.exit import ExitDraft
from workbench.engine.sampling import SamplingParams, target_probs
from workbench.engine.tree import build_tree, rerank
from workbench.kv import SlotAllocator
from workbench.models.llama import TargetModel


class _TargetAsHead:
    """What ``grow_tree`` asks of a head, answered by the target: its distribution under the
    sampling parameters, as log-probabilities over the full vocabulary."""

    def __init__(self, target: TargetModel, sampling: SamplingParams):
        self.target, self.sampling = target, sampling

    def log_probs(self, hidden: torch.Tensor) -> tuple[torch.Tensor, None]:
        return torch.log(target_probs(self.target.logits(hidden), self.sampling)), None


def _prefill(target: TargetModel, sequences: list[list[int]], points: list[tuple[int, int]], room: int,
             taps: tuple[int, ...] = ()):
    """Check the points, then prefill every sequence once into a new pool with ``room`` more
    slots; returns the allocator, the pool, each sequence's slots and its forward's output."""
    for i, L in points:
        if not 0 <= i < len(sequences) or not 0 <= L < len(sequences[i]):
            raise ValueError(f"point ({i}, {L}): no such sequence position")
    device = target.lm_head.weight.device
    allocator = SlotAllocator(sum(len(s) for s in sequences) + room)
    kv = target.new_kv_pool(allocator.num_slots)
    slots, out = [], []
    for seq in sequences:
        s = allocator.alloc(len(seq))
        slots.append(s)
        out.append(target(extend_batch(tokens=[seq], prefix_slots=[[]], new_slots=[s],
                                       device=device), kv, taps))  # [len, W]
    return allocator, kv, slots, out


def _grown(head, allocator: SlotAllocator, *, slots: list[list[int]], points: list[tuple[int, int]],
           roots, num_steps: int, topk: int, forward, chunk: int):
    """The engine's tree growth at each point, ``chunk`` points at a time: the context and root
    committed (so depth-d nodes sit at L + d), ``roots(part)`` the hidden states that draft level 1.
    Yields (part, candidates); each chunk's scratch slots are freed before it is yielded."""
    for start in range(0, len(points), chunk):
        part = points[start : start + chunk]
        prefixes = [slots[i][: L + 1] for i, L in part]
        phase = grow_tree(head, forward, allocator=allocator, prefixes=prefixes, h_last=roots(part),
                          num_steps=num_steps, topk=topk)
        for s in phase.scratch_slots:
            allocator.free(s)
        yield part, phase.candidates


@torch.no_grad()
def perfect_head_trees(target: TargetModel, sequences: list[list[int]], points: list[tuple[int, int]],
                       num_steps: int, topk: int, num_draft_tokens: int, sampling: SamplingParams,
                       chunk: int = 32) -> list[Expectation]:
    """The expectation of the tree a perfect head drafts at each point ``(i, L)``: the context is
    ``sequences[i][:L]`` (committed), the root ``sequences[i][L]``. Each sequence is prefilled
    once; a point reads the first ``L + 1`` of its slots (causal: a prefix's KV does not depend on
    what follows it), and its tree levels write scratch slots, freed after every ``chunk`` points."""
    allocator, kv, slots, hidden = _prefill(target, sequences, points, chunk * scratch_slots_per_step(num_steps, topk))
    out = []
    for _, candidates in _grown(_TargetAsHead(target, sampling), allocator, slots=slots, points=points,
                                roots=lambda part: torch.stack([hidden[i][L] for i, L in part]), num_steps=num_steps,
                                topk=topk,
                                forward=lambda _features, batch: target(batch, kv), chunk=chunk):
        for c in candidates:
            kept, _ = rerank(c, num_draft_tokens)  # a path's score is its probability under the target
            out.append(from_mass([1.0] + [c.scores[k] for k in kept], [0] + [c.depths[k] for k in kept], num_steps))
    return out


@dataclass(frozen=True)
class EarlyExit:
    """One early-exit draft: the expectation of its tree at each point, and its agreement: the
    share of answer positions where its most likely token is the whole target's."""

    num_layers: int
    expectations: list[Expectation]
    agreement: float
    positions: int


@torch.no_grad()
def early_exit_trees(target: TargetModel, sequences: list[list[int]], answer_starts: list[int],
                     points: list[tuple[int, int]], num_layers: int, num_steps: int, topk: int,
                     num_draft_tokens: int, sampling: SamplingParams, chunk: int = 32) -> EarlyExit:
    """Draft with the target's first ``num_layers`` layers at each point ``(i, L)`` (as
    ``perfect_head_trees``), verify each tree with the whole target, and return its expectation
    under ``sampling``. ``answer_starts[i]``: where sequence i's answer begins; agreement counts
    the positions that predict an answer token."""
    n_layers = len(target.model.layers)
    if not 1 <= num_layers <= n_layers:
        raise ValueError(f"num_layers {num_layers}: the target has {n_layers} layers")
    if len(answer_starts) != len(sequences):
        raise ValueError(f"{len(answer_starts)} answer starts for {len(sequences)} sequences")
    room = chunk * (scratch_slots_per_step(num_steps, topk) + num_draft_tokens - 1)
    allocator, kv, slots, out = _prefill(target, sequences, points, room, taps=(num_layers - 1,))
    hid, device = target.config.hidden_size, target.lm_head.weight.device
    exit_hidden = [target.model.norm(o[:, :hid]) for o in out]  # [len, H]: what the cut-short target ends with
    full_hidden = [o[:, hid:] for o in out]
    agree = positions = 0
    for seq, start, e, f in zip(sequences, answer_starts, exit_hidden, full_hidden):
        rows = slice(max(start, 1) - 1, len(seq) - 1)  # the positions whose next token is an answer token
        agree += int((target.logits(e[rows]).argmax(-1) == target.logits(f[rows]).argmax(-1)).sum())
        positions += max(0, len(seq) - max(start, 1))
    expectations = []
    drafter = ExitDraft(target, num_layers, f"exit:{num_layers}", kv)  # the engine's early exit, on this pool
    for part, candidates in _grown(drafter, allocator, slots=slots, points=points,
                                   roots=lambda part: torch.stack([exit_hidden[i][L] for i, L in part]),
                                   num_steps=num_steps, topk=topk,
                                   forward=drafter.forward, chunk=chunk):
        trees = []
        for (i, L), c in zip(part, candidates):
            kept, dropped = rerank(c, num_draft_tokens)
            trees.append(build_tree(sequences[i][L], c, kept, prefix_len=L, dropped=dropped))
        new = [allocator.alloc(t.num_nodes - 1) for t in trees]
        batch = tree_batch(  # the verify: every drafted node (the root is in the prefix), under the tree mask
            tokens=[t.tokens[1:] for t in trees], positions=[t.positions[1:] for t in trees],
            prefix_slots=[slots[i][: L + 1] for i, L in part], new_slots=new, masks=[t.mask[1:, 1:] for t in trees],
            device=device)
        verified = target(batch, kv).split([t.num_nodes - 1 for t in trees])
        for (i, L), t, h in zip(part, trees, verified):
            probs = target_probs(target.logits(torch.cat([full_hidden[i][L : L + 1], h])), sampling).cpu()
            expectations.append(expectation(t.tokens, t.parents, depths=t.depths, probs=probs, num_steps=num_steps))
        for n in new:
            allocator.free(n)
    return EarlyExit(num_layers, expectations, agree / max(1, positions), positions)
