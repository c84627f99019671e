"""Why the two sampling rules are lossless, at one position, in closed form.

With p the target's law and q the draft's at one position:

* Algorithm 1 (Leviathan et al.; Chen et al.) draws x ~ q and accepts it with min(1, p(x)/q(x)),
  so token x is emitted through acceptance with probability q(x) · min(1, p(x)/q(x)) = min(p, q)(x).
  Acceptance happens with β = Σ min(p, q); after a rejection the bonus is drawn from the
  residual r = max(0, p − q) / (1 − β). In total min(p, q) + (1 − β) r = min(p, q) + max(0, p − q) = p.
* The target-only rule (EAGLE-2 trees) tries fixed children c1..cm: c1 is accepted with p(c1);
  after a miss c1's mass is removed and c2 is accepted with p(c2) / (1 − p(c1)), and so on; if all
  miss, the bonus is drawn from p without the tried children. Each child is emitted with exactly
  p(c), every other token with p too.

``skip_residual_law`` is the shortcut that draws the bonus from p after a rejection: it emits
min(p, q) + (1 − β) p: too much wherever acceptance alone already gives a token more
than its share β·p (always where q ≥ p), too little elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _check(p: torch.Tensor, q: torch.Tensor | None = None) -> None:
    for name, d in (("p", p), ("q", q)):
        if d is None:
            continue
        if d.dim() != 1 or bool((d < 0).any()) or abs(float(d.sum()) - 1) > 1e-4:
            raise ValueError(f"{name} must be a 1-d probability vector (non-negative, sums to 1), "
                             f"got shape {tuple(d.shape)} summing to {float(d.sum()):.6f}")
    if q is not None and p.shape != q.shape:
        raise ValueError(f"p and q have different vocabularies: {tuple(p.shape)} vs {tuple(q.shape)}")


@dataclass
class AcceptanceParts:
    p: torch.Tensor  # [V] target law
    q: torch.Tensor  # [V] draft law
    overlap: torch.Tensor  # [V] min(p, q): what acceptance emits
    accept_prob: float  # β = Σ min(p, q): chance that the draft is accepted
    residual: torch.Tensor  # [V] max(0, p − q) / (1 − β): the bonus law after a rejection


def acceptance_parts(p: torch.Tensor, q: torch.Tensor) -> AcceptanceParts:
    """The pieces of Algorithm 1 at one position (float64)."""
    _check(p, q)
    p, q = p.double() / p.double().sum(), q.double() / q.double().sum()  # fp32 softmax rounding aside
    overlap = torch.minimum(p, q)
    beta = float(overlap.sum())
    excess = (p - q).clamp_min(0.0)
    residual = excess / excess.sum() if float(excess.sum()) > 0 else p.clone()  # p == q: never used
    return AcceptanceParts(p, q, overlap=overlap, accept_prob=beta, residual=residual)


def chain_rule_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Law of the token Algorithm 1 emits at one position: min(p, q) + (1 − β) · residual (= p)."""
    a = acceptance_parts(p, q)
    return a.overlap + (1 - a.accept_prob) * a.residual


def skip_residual_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The wrong shortcut's law: min(p, q) + (1 − β) · p, not p unless p == q."""
    a = acceptance_parts(p, q)
    return a.overlap + (1 - a.accept_prob) * a.p


def target_only_law(p: torch.Tensor, children: list[int]) -> torch.Tensor:
    """Law of the token the target-only rule emits at a node whose children are ``children``
    (tried in order; the emitted token is an accepted child or the bonus)."""
    _check(p)
    p = p.double() / p.double().sum()
    if len(set(children)) != len(children):
        raise ValueError("children must be distinct tokens")
    remaining = p.clone()
    law = torch.zeros_like(remaining)
    reach = 1.0  # chance that the walk is still at this node, every earlier child rejected
    for c in children:
        accept = float(remaining[c] / remaining.sum()) if float(remaining.sum()) > 0 else 0.0
        law[c] += reach * accept
        reach *= 1 - accept
        remaining[c] = 0.0
    if reach > 0:
        law += reach * remaining / remaining.sum()
    return law
