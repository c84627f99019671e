"""The accept walk: which drafts the target agrees with, and the bonus token.

Logits row i of the verify forward is the target's distribution of the token **after** node i
(the shift by one), so row i is compared with the *children* of i, never with i itself. From the
root, the walk scans the children of the current node along ``retrieve_next_token`` (first
child) then ``retrieve_next_sibling`` (next sibling); a match is accepted and the walk descends;
no match, or a leaf, stops it. The target's choice at the last accepted node is the bonus, so
every step emits between 1 and ``num_steps + 1`` tokens.

Four rules, all lossless (and one lossy relaxation):

* ``greedy_walk``: match = the child is the target's argmax.
* ``sampling_walk`` (EAGLE-2 / SGLang for trees, drafts chosen by top-k): accept child c with
  probability p(c) / (remaining mass); on a miss set p(c) = 0; if every child misses, the bonus
  is drawn from what is left (the residual); at a leaf, from p. Its thresholds (SGLang
  ``--speculative-accept-threshold-single`` / ``-acc``, 1.0 = exact) make it **lossy** below 1:
  see ``relaxed_accept_prob``.
* ``leviathan_chain`` (Leviathan et al. / Chen et al. Algorithm 1, a chain *sampled* from the
  draft distribution q): accept x with min(1, p(x)/q(x)); on the first miss draw the bonus from
  norm(max(0, p - q)); if all are accepted draw it from p after the last draft.
* ``block_chain`` (Sun et al., "Block Verification Accelerates Speculative Decoding", arXiv
  2403.10444, Algorithm 2; vLLM's model runner v2, vllm-project/vllm#46781): the same sampled
  chain, judged as a block. It keeps a prefix weight ``w_i = min(1, w_(i-1) p(x_i) / q(x_i))``
  (w_0 = 1), accepts the prefix of length i with ``h_i`` (``block_weights``), takes the
  **longest** prefix whose coin fell under its h_i (a rejected draft inside it is accepted
  anyway: its deficit is paid for by the later drafts) and draws the bonus from the block
  residual ``norm(max(0, w_tau p - q))`` after that prefix (``block_residual``). Lossless, and
  never fewer accepted drafts than ``leviathan_chain`` in expectation over the drafts (the
  paper's Theorem 2); for one drawn chain it can be either way.
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
    accept_prob: float | None = None  # lossy walk: the relaxed acceptance probability; block: h_i of the prefix
    weight: float | None = None  # block: the prefix weight w_i = min(1, w_(i-1) p(x_i) / q(x_i))


@dataclass
class AcceptResult:
    path: list[int]  # accepted node indices, root (0) first
    bonus: int  # token id of the bonus
    stop: str  # how the walk ended at path[-1]: "leaf" (no child to try) or "no_match" (every child missed);
    # why the tree had no child the target took there: stops.py
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


def block_weights(tokens: list[int], probs: torch.Tensor, draft_probs: torch.Tensor) -> tuple[list[float], list[float]]:
    """(w, h) for the chain ``tokens`` = [root, x1..xn], each a list of n floats (index i-1 for
    the prefix x1..xi); shapes as ``leviathan_chain``.

    ``w_i = min(1, w_(i-1) p_i(x_i) / q_i(x_i))``, w_0 = 1: how much of the target's law of the
    prefix the draft's law covers, capped at 1. ``h_i = r_i / (r_i + 1 - w_i)`` with the residual
    mass ``r_i = sum_x max(0, w_i p_(i+1)(x) - q_(i+1)(x))`` (the next position's distributions;
    1 when both are 0, which happens only at w_i = 1 with nothing left to correct); the last
    prefix has no next draft, so ``h_n = w_n``. Why: h_i is the chance that prefix i is the one
    to keep given that no longer one was kept, chosen so that every prefix ends up output with
    exactly the target's probability (the paper's Lemma 2)."""
    n = len(tokens) - 1
    weights, accept = [], []
    w = 1.0
    for i in range(1, n + 1):
        p, q, x = probs[i - 1], draft_probs[i - 1], tokens[i]
        w = min(1.0, w * float(p[x] / q[x])) if q[x] > 0 else 0.0  # a draft q never proposes: nothing covered
        weights.append(w)
        if i == n:
            accept.append(w)
            break
        mass = float((w * probs[i] - draft_probs[i]).clamp_min(0.0).sum())
        denom = mass + 1.0 - w
        accept.append(mass / denom if denom > 0 else 1.0)
    return weights, accept


def block_residual(tau: int, weight: float, probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """[V]: the law of the bonus after the accepted prefix of length ``tau`` < n whose weight is
    ``weight`` (1 for tau = 0): norm(max(0, weight p_(tau+1) - q_(tau+1))). When that is empty
    (the law cannot reach it), the target's own p, as ``leviathan_chain`` does."""
    residual = (weight * probs[tau] - draft_probs[tau]).clamp_min(0.0)
    if float(residual.sum()) <= 0.0:
        residual = probs[tau]
    return residual / residual.sum()


def block_chain(tokens: list[int], probs: torch.Tensor, draft_probs: torch.Tensor,
                generator: torch.Generator | None) -> AcceptResult:
    """Block verification of a chain drawn from the draft (shapes as ``leviathan_chain``).

    One coin per draft, all drawn first; scanning back from the last draft, the first prefix i
    whose coin is below h_i is kept (tau = 0 when none is). Every draft of that prefix is
    accepted, whatever its own ratio p/q: each ``Move`` records w_i (``weight``), h_i
    (``accept_prob``), its coin and ``match`` = inside the kept prefix."""
    n = len(tokens) - 1
    weights, accept = block_weights(tokens, probs, draft_probs)
    coins = torch.rand(n, generator=generator).tolist() if n else []
    tau = max((i for i in range(1, n + 1) if coins[i - 1] < accept[i - 1]), default=0)
    moves = [Move(i - 1, i, via="next_token", read=i - 1, match=i <= tau, target_prob=float(probs[i - 1, tokens[i]]),
                  draft_prob=float(draft_probs[i - 1, tokens[i]]), coin=coins[i - 1], accept_prob=accept[i - 1],
                  weight=weights[i - 1])
             for i in range(1, n + 1)]
    path = list(range(tau + 1))
    if tau == n:
        bonus = int(torch.multinomial(probs[n], 1, generator=generator))
        return AcceptResult(path, bonus, stop="leaf", moves=moves, bonus_from="target")
    residual = block_residual(tau, weights[tau - 1] if tau else 1.0, probs, draft_probs)
    bonus = int(torch.multinomial(residual, 1, generator=generator))
    return AcceptResult(path, bonus, stop="no_match", moves=moves, bonus_from="residual", residual_top=_top(residual))


CHAIN_WALKS = {"leviathan": leviathan_chain, "block": block_chain}  # the rules of a chain drawn from q


def _top(dist: torch.Tensor, k: int = 5) -> list[tuple[int, float]]:
    vals, ids = torch.topk(dist, min(k, dist.shape[-1]))
    return [(int(i), float(v)) for i, v in zip(ids, vals) if v > 0]
