"""The i.i.d. model of a greedy chain, fitted on one half of the steps and checked on the other.

A chain of γ drafts (``topk = 1``) makes each step a run of Bernoulli trials: draft k is compared
only if drafts 1..k-1 were accepted. A step with n accepted drafts saw n successes, plus one
failure when n < γ; α is successes over trials. If every trial succeeded with the same α,
independently, a step would emit on average E[N] = (1 − α^(γ+1)) / (1 − α) tokens.

Fitting α on the very steps whose τ it then predicts is circular (α is a function of them), so
``held_out_check`` fits on the even-numbered steps and predicts the odd-numbered ones, and says
how far the prediction may be off by chance alone (twice the standard error of the held-out τ).

Both read **walk lengths**: n + 1 per step with n the drafts the walk accepted
(``Request.drafts_accepted``, or ``len(trace["accept"]["path"])``), not the tokens the step emitted.
A step the end of the output cut (a stop token, ``max_new_tokens``) emitted fewer than its walk
accepted; its trials all happened, so the walk's count is the whole observation, and counting the
cut one would read a failure that never occurred. The held-out "τ" is therefore the walk's mean,
what E[N] predicts; it differs from the emitted τ only through the cut steps.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


def chain_alpha(walk_lengths: list[int], gamma: int) -> float:
    """α from the walk lengths (n + 1 per step) of a chain of ``gamma`` drafts."""
    if not walk_lengths:
        raise ValueError("α needs at least one verify step")
    if not all(1 <= a <= gamma + 1 for a in walk_lengths):
        raise ValueError(f"a chain of {gamma} accepts 1..{gamma + 1} tokens per step, got {walk_lengths}")
    accepted = [a - 1 for a in walk_lengths]
    failures = sum(n < gamma for n in accepted)
    return sum(accepted) / (sum(accepted) + failures) if sum(accepted) + failures else 0.0


def expected_tokens(alpha: float, gamma: int) -> float:
    """E[tokens per step] of a chain of ``gamma`` drafts under i.i.d. acceptance α."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"α is a probability, got {alpha}")
    return float(gamma + 1) if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


@dataclass(frozen=True)
class HeldOut:
    alpha: float  # fitted on the even-numbered steps
    predicted: float  # E[N] from that α
    measured: float  # mean walk length of the odd-numbered steps
    noise: float  # twice the standard error of ``measured``
    fit_steps: int
    held_steps: int

    def verdict(self) -> str:
        """What the i.i.d. model did on the held-out steps: level within noise when
        |predicted − measured| is below the noise, else how far off (a phrase after "the model")."""
        gap = self.predicted - self.measured
        if abs(gap) <= self.noise:
            return f"is level with them within noise (a gap of {gap:+.2f}, noise ±{self.noise:.2f})"
        side = "over" if gap > 0 else "under"
        return f"{side}-predicts them by {abs(gap):.2f} tokens per step, beyond the noise of ±{self.noise:.2f}"


def held_out_check(walk_lengths: list[int], gamma: int) -> HeldOut:
    """Fit α on the walk lengths of steps 0, 2, 4, ... and predict the mean of steps 1, 3, 5, ...
    (at least 2 of each)."""
    fit, held = walk_lengths[0::2], walk_lengths[1::2]
    if len(held) < 2:
        raise ValueError(f"{len(walk_lengths)} steps: need at least 4 to fit on half and check the other")
    alpha = chain_alpha(fit, gamma)
    noise = 2 * statistics.stdev(held) / math.sqrt(len(held))
    return HeldOut(alpha, expected_tokens(alpha, gamma), measured=statistics.mean(held), noise=noise,
                   fit_steps=len(fit), held_steps=len(held))


def improvement_factor(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al. 2023, Theorem 3.8: the expected walltime improvement of a chain of
    ``gamma`` drafts, (1 − α^(γ+1)) / ((1 − α)(γc + 1)), with ``c`` one draft forward over one
    target forward and a verify of γ + 1 tokens costing one target forward."""
    if gamma < 1 or c < 0:
        raise ValueError(f"need γ >= 1 and c >= 0, got {gamma} and {c}")
    return expected_tokens(alpha, gamma) / (gamma * c + 1)


def best_gamma(alpha: float, c: float, largest: int = 16) -> tuple[int, float]:
    """The γ in 1..``largest`` with the highest Theorem 3.8 factor, and that factor."""
    return max(((g, improvement_factor(alpha, g, c)) for g in range(1, largest + 1)), key=lambda gf: gf[1])


def some_gamma_helps(alpha: float, c: float) -> bool:
    """Corollary 3.9 of Leviathan et al.: some γ gives an improvement factor above 1 if and only
    if α > c (γ = 1 then gives (1 + α) / (1 + c) > 1; for α <= c, E[N] <= 1 + γα <= 1 + γc)."""
    return alpha > c
