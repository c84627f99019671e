"""Takeaway sentences computed from measured numbers, so that a notebook's conclusion changes
when its measurements do (and is tested here, not buried in an f-string)."""

from __future__ import annotations

# One threshold for "a verify token is nearly free": the extra cost of one more token in the
# forward, as a fraction of a decode step. Below it, a bigger verify block costs little.
NEARLY_FREE = 0.05
# Above this, each extra token costs a large share of a decode step: compute-bound.
COMPUTE_BOUND = 0.3


def plural(n: int, suffix: str = "s") -> str:
    return "" if n == 1 else suffix


def regime(extra_token_cost: float) -> str:
    """Where a machine sits, from the extra cost of one more verify token (fraction of a decode)."""
    if extra_token_cost < NEARLY_FREE:
        return "close to memory-bound: a large verify block is nearly free"
    if extra_token_cost > COMPUTE_BOUND:
        return "compute-bound within a few tokens: the verify block has to stay small"
    return ("between the two regimes: every extra verify token costs a noticeable share of a decode step, "
            "so the verify block has to stay small")


def trend(first: float, last: float, tolerance: float = 0.02) -> str:
    """'shrinks', 'grows' or 'hardly changes' from ``first`` to ``last``."""
    if last < first - tolerance:
        return "shrinks"
    if last > first + tolerance:
        return "grows"
    return "hardly changes"


def batch_sentence(batches: list[int], speedups: list[float]) -> str:
    """Where a predicted speedup over batch sizes falls below 1, in words."""
    if len(batches) != len(speedups) or not batches:
        raise ValueError("one speedup per batch size, at least one")
    below = [b for b, s in zip(batches, speedups) if s < 1]
    if not below:
        return "it stays above 1 over this range"
    if below[0] == batches[0]:
        return "speculation is slower than plain decoding at every batch size here"
    return f"from batch {below[0]} on, speculation is slower than plain decoding"


def lossless_verdict(pvalues: list[float], level: float) -> str:
    """What chi-square p-values of lossless rules say, at a test ``level``."""
    if all(p > level for p in pvalues):
        return "match the exact law within sampling noise"
    return (f"should match the exact law, yet one has p < {level:g} (a 1-in-{round(1 / level)} "
            "draw for a lossless rule)")
