"""Expected accept length of a tree over the coins of its verify step.

Under the target-only rule (``accept.sampling_walk``) the walk at an accepted node tries its
children in order; child ``c_i`` is reached with probability ``1 - p(c_1) - ... - p(c_{i-1})``
(the mass of the children rejected before it is removed) and accepted with ``p(c_i)`` over that
mass, so it is accepted with probability exactly ``p(c_i)``, the target's probability of its
token. The walk thus follows the tree as far as a token-by-token draw from ``p`` would, and over
the coins::

    E[accept length] = 1 + sum over the non-root nodes of P(path),  P(path) = product of p along it

(the 1 is the bonus token). It reads only the tree and the verify distribution, so it has none of
the coins' noise; greedy (``p`` one-hot) gives ``len(accept.path)``, the walk's worth (a step the
output's end cuts emits fewer). The sum restricted to depth ``d`` is ``P(accept length > d)``.

Three ways in, one sum: ``expectation`` (a tree and its verify probabilities ``[N, V]``),
``step_expectation`` (a ``StepRecord``) and ``trace_expectation`` (a step trace, whose nodes
carry ``target_prob``, the target's probability of each node's token at its parent).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.engine.record import StepRecord
from workbench.engine.sampling import target_probs


@dataclass(frozen=True)
class Expectation:
    """Over the coins of one verify step: ``accept_length`` = E[accepted drafts + the bonus], ``reach[d-1]`` =
    P(the walk accepts a node at depth d), for d = 1..num_steps."""

    accept_length: float
    reach: tuple[float, ...]


def _check_order(parents: list[int]) -> None:
    for i, j in enumerate(parents[1:], start=1):
        if not 0 <= j < i:
            raise ValueError(f"node {i}: parent {j} does not come before it")


def mass_from_node_probs(parents: list[int], node_probs: list[float]) -> list[float]:
    """P(path) of every node (root 1.0); ``node_probs[i]``: the target's probability of node i's
    token at its parent (the root's is not read). Parents must come before their children (as in
    every tree the engine builds)."""
    _check_order(parents)
    mass = [1.0] * len(parents)
    for i in range(1, len(parents)):
        mass[i] = mass[parents[i]] * node_probs[i]
    return mass


def path_mass(tokens: list[int], parents: list[int], probs: torch.Tensor) -> list[float]:
    """P(path) of every node (root 1.0); ``probs[i]`` [V] is the target distribution after node i."""
    _check_order(parents)
    return mass_from_node_probs(parents, [1.0] + [float(probs[j, t]) for t, j in zip(tokens[1:], parents[1:])])


def from_mass(mass: list[float], depths: list[int], num_steps: int) -> Expectation:
    """The expectation of a tree whose node i (root first) has path probability ``mass[i]`` at
    depth ``depths[i]``."""
    reach = [0.0] * num_steps
    for m, d in zip(mass[1:], depths[1:]):
        reach[d - 1] += m
    return Expectation(1.0 + sum(mass[1:]), tuple(min(r, 1.0) for r in reach))


def expectation(tokens: list[int], parents: list[int], *, depths: list[int], probs: torch.Tensor,
                num_steps: int) -> Expectation:
    return from_mass(path_mass(tokens, parents, probs), depths, num_steps)


def step_expectation(rec: StepRecord, num_steps: int) -> Expectation:
    """The expectation of one speculative step from its record: its tree and verify logits, under
    the sampling parameters it ran with (``target_probs``, as the walk used)."""
    if rec.kind != "spec" or rec.tree is None:
        raise ValueError(f"step {rec.step} is a {rec.kind} step: only speculative steps have a tree")
    probs = target_probs(rec.logits, rec.sampling).cpu()
    return expectation(rec.tree.tokens, rec.tree.parents, depths=rec.tree.depths, probs=probs, num_steps=num_steps)


def trace_expectation(trace: dict) -> Expectation | None:
    """The expectation of one step from its trace (``engine/trace.py``), over the depths its tree
    has. None where the sum is not the walk's law: a prefill or vanilla step; greedy (the walk is
    deterministic: the step's accept length is all there is); the Leviathan chain (accepted with
    min(1, p/q)); a lossy walk (its thresholds relax p)."""
    if trace["kind"] != "spec":
        return None
    accept = trace["accept"]
    if accept["rule"] != "target-only" or "lossy" in accept:
        return None
    nodes = trace["tree"]["nodes"]
    mass = mass_from_node_probs([n["parent"] for n in nodes], [1.0] + [n["target_prob"] for n in nodes[1:]])
    return from_mass(mass, [n["depth"] for n in nodes], max(n["depth"] for n in nodes))
