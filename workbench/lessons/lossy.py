"""What the lossy accept thresholds do to the law of the emitted token, in closed form.

The relaxed target-only rule (``SpecConfig.accept_threshold_single`` / ``_acc``, SGLang's
``--speculative-accept-threshold-*``) draws one uniform u per node and walks the children
c_1..c_m in order: c_j is accepted when ``p(c_j) >= threshold_single`` or
``u <= (p(c_1) + ... + p(c_j)) / threshold_acc``. So u falls into consecutive intervals,
``[b_(j-1), b_j)`` for c_j with ``b_j = min(1, S_j / acc)`` (``b_j = 1`` from the first child the
single threshold takes), and a miss of every child (u >= b_m) draws the bonus from p without the
children. At both thresholds 1 the intervals have width p(c_j) and the law is p; below 1 they
widen, the children gain mass and every other token loses it.

This module derives the law from that one-coin-per-node picture; the engine's walk
(``accept.sampling_walk``) tosses one coin per child with the equivalent conditional
probabilities (``accept.relaxed_accept_prob``). The tests check the two against each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.engine.config import EXACT_THRESHOLD
from workbench.engine.sampling import SamplingParams
from workbench.lessons.draft_law import draft_next_token_law
from workbench.lessons.exact_law import next_token_laws


@dataclass
class NodeLaw:
    law: torch.Tensor  # [V] float64: P(the token this node emits), accepted child or bonus
    accept_prob: float  # P(some child is accepted) = b_m


def threshold_node_law(p: torch.Tensor, children: list[int], threshold_single: float = EXACT_THRESHOLD,
                       threshold_acc: float = EXACT_THRESHOLD) -> NodeLaw:
    """The law of the token emitted at a node with target law ``p`` [V] whose children
    ``children`` (distinct tokens, in the walk's order) are tried under the thresholds."""
    if len(set(children)) != len(children):
        raise ValueError("children must be distinct tokens")
    p = p.double() / p.double().sum()
    law = torch.zeros_like(p)
    edge, tried = 0.0, 0.0  # edge: b_(j-1), where child j's interval of the coin starts
    for c in children:
        tried += float(p[c])
        top = 1.0 if float(p[c]) >= threshold_single else min(1.0, tried / threshold_acc)
        law[c] = top - edge
        edge = top
        if edge >= 1.0:  # this child takes every coin left: later siblings are never tried
            break
    rest = p.clone()
    rest[children] = 0.0
    if float(rest.sum()) > 0:
        law += (1.0 - edge) * rest / rest.sum()
    return NodeLaw(law, edge)


def first_two_tokens_law(target, head, prompt: list[int], params: SamplingParams, topk: int,
                         threshold_single: float = EXACT_THRESHOLD,
                         threshold_acc: float = EXACT_THRESHOLD) -> torch.Tensor:
    """[V, V] float64: P(t1, t2) when t1 comes from the prefill and t2 from the root of the
    first speculative step, whose children are the head's top ``topk`` tokens after t1 (best
    first, the order the engine's tree tries them in)."""
    first = next_token_laws(target, [prompt], params)[0]  # [V]
    contexts = [prompt + [t1] for t1 in range(first.shape[0])]
    second = next_token_laws(target, contexts, params)  # [V, V]: row t1, the target's law of t2
    rows = []
    for t1, context in enumerate(contexts):
        children = torch.topk(draft_next_token_law(target, head, context, params), topk).indices.tolist()
        rows.append(threshold_node_law(second[t1], children, threshold_single, threshold_acc).law)
    return first[:, None] * torch.stack(rows)  # [V, 1] * [V, V]


def drift_sentence(settings: list[str], accepted: list[float], tv: list[float], pvalues: list[float],
                   level: float) -> str:
    """The threshold study in words. Index 0 is the exact setting; the others are lossy, each
    with its accepted drafts per step, the total variation of its output law to the target's
    and a chi-square p-value of its samples against the target's law."""
    if not len(settings) == len(accepted) == len(tv) == len(pvalues) >= 2:
        raise ValueError("one value per setting, the exact one first and at least one lossy setting")
    lossy = range(1, len(settings))
    gained = [i for i in lossy if accepted[i] > accepted[0]]
    told = [i for i in lossy if pvalues[i] < level]
    best = max(lossy, key=lambda i: accepted[i])
    text = (f"{len(gained)} of {len(lossy)} lossy settings accepted more drafts per step than the exact rule "
            f"({accepted[0]:.2f}; the most, {settings[best]}: {accepted[best]:.2f}, "
            f"{accepted[best] / accepted[0] - 1:+.0%}). ")
    moved = [i for i in lossy if tv[i] > tv[0]]
    text += (f"{len(moved)} of {len(lossy)} moved the output law away from the target's (total variation "
             f"{min(tv[i] for i in lossy):.3f} to {max(tv[i] for i in lossy):.3f}, against {tv[0]:.3f} for the "
             f"exact rule), and the chi-square test tells {len(told)} of {len(lossy)} apart from the target at "
             f"p < {level:g}.")
    if len(gained) == len(moved) == len(lossy):
        text += " At every setting here the extra acceptance came with a moved output law."
    return text
