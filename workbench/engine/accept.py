"""The accept walk: which drafts the target agrees with, and the bonus token.

Logits row i of the verify forward is the target's distribution of the token **after** node i
(the shift by one), so row i is compared with the *children* of i, never with i itself. From the
root, the walk scans the children of the current node along ``retrieve_next_token`` (first
child) then ``retrieve_next_sibling`` (next sibling); a match is accepted and the walk descends;
no match, or a leaf, stops it. The target's choice at the last accepted node is the bonus, so
every step emits between 1 and ``num_steps + 1`` tokens.

Three rules, all lossless (and one lossy relaxation):

* ``greedy_walk``: match = the child is the target's argmax.
* ``sampling_walk`` (EAGLE-2 / SGLang for trees, drafts chosen by top-k): accept child c with
  probability p(c) / (remaining mass); on a miss set p(c) = 0; if every child misses, the bonus
  is drawn from what is left (the residual); at a leaf, from p. Its thresholds (SGLang
  ``--speculative-accept-threshold-single`` / ``-acc``, 1.0 = exact) make it **lossy** below 1:
  see ``relaxed_accept_prob``.
* ``leviathan_chain`` (Leviathan et al. / Chen et al. Algorithm 1, a chain *sampled* from the
  draft distribution q): accept x with min(1, p(x)/q(x)); on the first miss draw the bonus from
  norm(max(0, p - q)); if all are accepted draw it from p after the last draft.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

EXACT_THRESHOLD = 1.0  # accept thresholds (SpecConfig): 1.0 = the exact rule, below = lossy


@dataclass
class Move:
    """One pointer move of the walk: ``child`` was tried under ``node``."""

    node: int
    child: int
    via: str  # "next_token" (first child) or "next_sibling"
    read: int  # whose pointer was read: ``node`` for next_token, the previous sibling for next_sibling
    match: bool
    target_prob: float | None = None  # sampling: p(child) before the coin (renormalised)
    draft_prob: float | None = None  # leviathan: q(child)
    coin: float | None = None  # sampling: the uniform draw compared with the acceptance probability
    accept_prob: float | None = None  # lossy walk only: the relaxed acceptance probability the coin met


@dataclass
class AcceptResult:
    path: list[int]  # accepted node indices, root (0) first
    bonus: int  # token id of the bonus
    stop: str  # why the walk ended at path[-1]: "leaf" (no child to try) or "no_match" (every child missed)
    moves: list[Move] = field(default_factory=list)
    bonus_from: str = "target"  # "target" (argmax or p at the last node) or "residual"
    residual_top: list[tuple[int, float]] = field(default_factory=list)  # sampling: top of the residual
    thresholds: tuple[float, float] | None = None  # lossy walk only: (threshold_single, threshold_acc)

    @property
    def num_accepted(self) -> int:
        """Correct drafts n; the step emits n + 1 tokens."""
        return len(self.path) - 1


def _children(node: int, next_token: list[int], next_sibling: list[int]):
    """(child, pointer read, whose pointer) for each child of ``node``, best first."""
    child, via, read = next_token[node], "next_token", node
    while child != -1:
        yield child, via, read
        child, via, read = next_sibling[child], "next_sibling", child


def children(node: int, next_token: list[int], next_sibling: list[int]) -> list[int]:
    """The children of ``node`` in the order every walk tries them (views read the tree this way)."""
    return [child for child, _, _ in _children(node, next_token, next_sibling)]


def _stop(node: int, next_token: list[int]) -> str:
    return "leaf" if next_token[node] == -1 else "no_match"


def greedy_walk(tokens: list[int], next_token: list[int], next_sibling: list[int],
                target_argmax: list[int]) -> AcceptResult:
    """``target_argmax[i]``: the target's argmax at row i (the token after node i)."""
    path, moves, node = [0], [], 0
    while True:
        for child, via, read in _children(node, next_token, next_sibling):
            hit = tokens[child] == target_argmax[node]
            moves.append(Move(node, child, via=via, read=read, match=hit))
            if hit:
                path.append(child)
                node = child
                break
        else:  # no child matched, or a leaf
            return AcceptResult(path, target_argmax[node], stop=_stop(node, next_token), moves=moves)


def sampling_walk(tokens: list[int], next_token: list[int], next_sibling: list[int],
                  probs: torch.Tensor, generator: torch.Generator | None,
                  threshold_single: float = EXACT_THRESHOLD, threshold_acc: float = EXACT_THRESHOLD) -> AcceptResult:
    """``probs`` [N, V]: the target distribution at each node (temperature/top-k/top-p applied).

    Thresholds at 1 (the default): the exact rule. Below 1: **lossy**, each child's acceptance
    probability is ``relaxed_accept_prob`` (more drafts accepted, the output law moves); the
    bonus is drawn as in the exact rule."""
    exact = min(threshold_single, threshold_acc) >= EXACT_THRESHOLD
    path, moves, node = [0], [], 0
    while True:
        p = probs[node].clone()
        tried, missed = 0.0, False  # tried: target mass of the children already missed here
        for child, via, read in _children(node, next_token, next_sibling):
            tok = tokens[child]
            target_prob = float(p[tok] / p.sum())
            relaxed = None if exact else relaxed_accept_prob(float(probs[node, tok]), tried, threshold_single,
                                                             threshold_acc)
            coin = float(torch.rand((), generator=generator))
            hit = coin < (target_prob if exact else relaxed)
            moves.append(Move(node, child, via=via, read=read, match=hit, target_prob=target_prob, coin=coin,
                              accept_prob=relaxed))
            if hit:
                path.append(child)
                node = child
                break
            tried += float(probs[node, tok])
            p[tok] = 0.0  # a rejected child cannot be the bonus either
            missed = True
        else:
            residual = p / p.sum()
            bonus = int(torch.multinomial(residual, 1, generator=generator))
            return AcceptResult(path, bonus, stop=_stop(node, next_token), moves=moves,
                                bonus_from="residual" if missed else "target",
                                residual_top=_top(residual),
                                thresholds=None if exact else (threshold_single, threshold_acc))


def relaxed_accept_prob(target_prob: float, tried: float, threshold_single: float, threshold_acc: float) -> float:
    """P(accept a child | its earlier siblings were missed) under the lossy thresholds.

    The relaxed rule (SGLang's tree sampling kernel) draws one uniform u per node and accepts the
    first child c, in order, with ``p(c) >= threshold_single`` or ``u <= (tried + p(c)) /
    threshold_acc``, ``tried`` being the target mass p of the siblings before c. Reaching c
    means u > tried / threshold_acc, so with ``lo = min(1, tried / acc)`` and
    ``hi = min(1, (tried + p(c)) / acc)`` c is accepted with ``(hi - lo) / (1 - lo)``: one coin
    per child gives the same law as the one coin per node. At both thresholds 1 this is
    p(c) / (1 - tried), the exact rule; dividing by acc < 1 stretches every child's share, and a
    single threshold below 1 accepts any child the target gives that much outright."""
    if target_prob >= threshold_single:
        return 1.0
    lo = min(1.0, tried / threshold_acc)  # < 1: an earlier sibling with hi = 1 was accepted for sure
    hi = min(1.0, (tried + target_prob) / threshold_acc)
    return (hi - lo) / (1.0 - lo)


def leviathan_chain(tokens: list[int], probs: torch.Tensor, draft_probs: torch.Tensor,
                    generator: torch.Generator | None) -> AcceptResult:
    """Chain only: ``tokens`` = [root, x1..xn] with x_i ~ q_i = ``draft_probs[i-1]`` [n, V];
    ``probs`` [n+1, V] the target distribution at each node."""
    path, moves = [0], []
    for i in range(1, len(tokens)):
        p, q, x = probs[i - 1], draft_probs[i - 1], tokens[i]
        ratio = float(p[x] / q[x]) if q[x] > 0 else 0.0
        coin = float(torch.rand((), generator=generator))
        hit = coin < min(1.0, ratio)
        moves.append(Move(i - 1, i, via="next_token", read=i - 1, match=hit, target_prob=float(p[x]),
                          draft_prob=float(q[x]), coin=coin))
        if not hit:
            residual = (p - q).clamp_min(0.0)
            if float(residual.sum()) <= 0.0:  # p == q: nothing left to correct, sample p
                residual = p
            residual = residual / residual.sum()
            bonus = int(torch.multinomial(residual, 1, generator=generator))
            return AcceptResult(path, bonus, stop="no_match", moves=moves, bonus_from="residual",
                                residual_top=_top(residual))
        path.append(i)
    bonus = int(torch.multinomial(probs[len(tokens) - 1], 1, generator=generator))
    return AcceptResult(path, bonus, stop="leaf", moves=moves, bonus_from="target")


def _top(dist: torch.Tensor, k: int = 5) -> list[tuple[int, float]]:
    vals, ids = torch.topk(dist, min(k, dist.shape[-1]))
    return [(int(i), float(v)) for i, v in zip(ids, vals) if v > 0]
