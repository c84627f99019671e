"""Takeaway sentences computed from measured numbers, so that a notebook's conclusion changes
when its measurements do (and is tested here, not buried in an f-string)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from workbench.cost_model import Curve
from workbench.timing import NOISE, Spread, Verdict

# How a forward's cost follows its size N between two measured sizes: the elasticity
# log(t(n2) / t(n1)) / log(n2 / n1), 0 when the cost stays flat (reading the weights dominates:
# memory-bound), 1 when it grows in proportion to N (the arithmetic dominates: compute-bound).
MEMORY_BOUND = 0.1  # below: a bigger verify block is nearly free (8 tokens under 1.23 decode steps)
COMPUTE_BOUND = 0.7  # above: every verify token costs nearly its share of a decode step
BEND = 0.5  # the segment where the cost starts to follow N more than it stays flat


# Two fp32 computations of the same numbers in a different order (a verify row against a fresh
# forward, a cache against a fresh prefill) round differently, by about 1e-5 on this model; tokens
# are compared for equality, numbers against this absolute tolerance (as tests/test_engine.py
# compares a cache with a fresh prefill).
FP32_ATOL = 1e-4


def plural(n: int, suffix: str = "s") -> str:
    return "" if n == 1 else suffix


def within(difference: float, tolerance: float = FP32_ATOL) -> str:
    """How a measured largest difference between two computations of the same numbers reads:
    equal only when it is 0; else within, or beyond, ``tolerance``, with both numbers printed."""
    if difference < 0 or tolerance <= 0:
        raise ValueError(f"a difference >= 0 and a tolerance > 0, got {difference} and {tolerance}")
    if difference == 0:
        return "equal, bit for bit"
    side = "within" if difference <= tolerance else "beyond"
    return f"{side} the tolerance of {tolerance:.0e} (largest difference {difference:.1e})"


def elasticity(curve: Curve, lo: float, hi: float) -> float:
    """How the forward's cost follows its size from ``lo`` to ``hi`` tokens (0 flat, 1 proportional)."""
    if not lo < hi:
        raise ValueError(f"need lo < hi, got {lo} and {hi}")
    return math.log(curve.at(hi, extrapolate=False) / curve.at(lo, extrapolate=False)) / math.log(hi / lo)


REGIMES = ("memory-bound", "between the two regimes", "compute-bound")  # in order of elasticity


def _regime_name(e: float) -> str:
    return REGIMES[0] if e < MEMORY_BOUND else REGIMES[2] if e > COMPUTE_BOUND else REGIMES[1]


@dataclass(frozen=True)
class Regime:
    """Where a machine sits for a verify block of ``tokens`` tokens, from its measured cost curve."""

    tokens: int
    ratio: float  # the forward over ``tokens`` tokens, in decode steps (N = 1)
    elasticity: float  # over the last factor of 8 up to ``tokens``
    name: str  # "memory-bound", "compute-bound" or "between the two regimes"

    def sentence(self) -> str:
        """'memory-bound up to 8 tokens: a forward over 8 tokens costs 1.1 decode steps, ...'."""
        cost = f"a forward over {self.tokens} tokens costs {self.ratio:.2f} decode steps"
        if self.name == "memory-bound":
            return f"memory-bound up to {self.tokens} tokens: {cost}, so extra verify nodes are nearly free"
        if self.name == "compute-bound":
            return f"compute-bound by {self.tokens} tokens: {cost}, so every verify node costs"
        return (f"between the two regimes at {self.tokens} tokens: {cost}, so every extra verify node "
                "costs a noticeable share of a decode step")


def regime(curve: Curve, tokens: int) -> Regime:
    """The regime of a verify block of ``tokens`` tokens (> 1): how the cost follows N over the
    last factor of 8 up to it (from N = 1 for blocks of 8 or fewer), local enough to see a bend and
    wide enough that one noisy point does not decide it. The ratio is against a decode step (N = 1)."""
    if tokens <= curve.sizes[0]:
        raise ValueError(f"a verify block of {tokens} tokens is not bigger than a decode step")
    lo = max(curve.sizes[0], tokens / 8)
    e = elasticity(curve, lo, tokens)
    return Regime(tokens, curve.at(tokens) / curve.at(1), elasticity=e, name=_regime_name(e))


def bend(curve: Curve) -> int | None:
    """The measured size N from which the cost follows N: every segment from N on has an
    elasticity of at least ``BEND`` (a single steep segment between flat ones is noise, not a
    bend). None if the last segment is still flat."""
    sizes = curve.sizes
    steep = [elasticity(curve, lo, hi) >= BEND for lo, hi in zip(sizes, sizes[1:])]
    start = len(steep)
    while start > 0 and steep[start - 1]:
        start -= 1
    return sizes[start] if start < len(steep) else None


def bend_sentence(fit: Curve) -> str:
    """Where the fit bends: from which size on the cost follows N, or that it never does."""
    knee = bend(fit)
    if knee is None:
        return f"The cost never starts to follow N within {fit.sizes[-1]} tokens: no bend in the measured range."
    return (f"From N = {knee} on, every segment of the fit has an elasticity of at least {BEND}, so each "
            f"doubling of the block costs at least {2 ** BEND:.2f}× more (the cost follows N); before it, the cost "
            "grows more slowly.")


def versus(value: float, measured: Spread) -> str:
    """'above', 'below' or 'level within noise': ``value`` against a measurement's range."""
    if value > measured.high:
        return "above"
    if value < measured.low:
        return "below"
    return "level within noise"


def compare_means(a: list[float], b: list[float]) -> str:
    """'above', 'below' or 'level within noise': the mean of ``a`` against the mean of ``b``
    (e.g. the accept lengths of two trees), noise = twice the standard error of the difference."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("each side needs at least 2 values to estimate its noise")
    gap = statistics.mean(a) - statistics.mean(b)
    noise = 2 * math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return "level within noise" if abs(gap) <= noise else "above" if gap > 0 else "below"


def compare(a: Spread, b: Spread) -> str:
    """'above', 'below' or 'level within noise': ``a`` against ``b``; overlapping ranges are noise."""
    if a.low > b.high:
        return "above"
    if a.high < b.low:
        return "below"
    return "level within noise"


def same_work_sentence(ratio: Spread, what: str) -> str:
    """Two settings that do the same work at ``what`` (the prefill: speculation does not touch it),
    timed round by round: ``ratio`` is the first's ms over the second's, one value per round. Level
    within noise where its range holds 1; else how far apart, said as what the rounds show and
    not as a gain, since the work is the same."""
    said = f"{ratio.median:.2f}× per round, paired, range {ratio.low:.2f}–{ratio.high:.2f}"
    if ratio.low <= 1 <= ratio.high:
        return f"{said}: level within noise, as the same {what} should be"
    side = "faster" if ratio.low > 1 else "slower"
    return (f"{said}: {side} in every round, though the {what} is the same work in both: read it as how far "
            f"two timings of one {what} can differ here, not as a gain")


def best_sentence(v: Verdict, what: str) -> str:
    """A verdict (``workbench.timing.verdict``) in words: the best ``what`` named only when its
    range is clear of every other's; else the settings level with it, and no best named."""
    if v.winner is not None and len(v.level) == 1:
        return f"the best {what} is {v.winner}: its range is clear of every other's"
    return (f"{', '.join(v.level)} are {NOISE} at the top (their ranges overlap the best median's), "
            f"so no single best {what} is named")


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
    if len(below) == len(batches):
        return "speculation is slower than plain decoding at every batch size here"
    if below == batches[batches.index(below[0]):]:
        return f"from batch {below[0]} on, speculation is slower than plain decoding"
    return f"speculation is slower than plain decoding at batch {', '.join(map(str, below))}"


def lossless_verdict(pvalues: list[float], level: float) -> str:
    """What chi-square p-values of lossless rules say, at a test ``level``."""
    if all(p > level for p in pvalues):
        return "match the exact law within sampling noise"
    return (f"should match the exact law, yet one has p < {level:g} (a 1-in-{round(1 / level)} "
            "draw for a lossless rule)")


def gap(predicted: float, measured: Spread, unit: str = "×", digits: int = 2) -> str:
    """A prediction beside its measurement, the gap in words: inside the measured range, just
    outside it (by less than the digits shown: both then printed one digit finer), or how far
    above or below the measured median, beyond the range."""
    u = unit if unit == "×" else f" {unit}"  # 1.20×, 64.7 ms
    said = (f"predicted {predicted:.{digits}f}{u}, measured {measured.median:.{digits}f}{u} "
            f"({measured.low:.{digits}f}–{measured.high:.{digits}f}{u} over {measured.runs} run{plural(measured.runs)})")
    where = versus(predicted, measured)
    if where == "level within noise":
        return f"{said}: the prediction lies inside the measured range"
    edge, side = (measured.low, "lowest") if predicted < measured.low else (measured.high, "highest")
    if f"{predicted:.{digits}f}" == f"{edge:.{digits}f}":  # outside by less than the digits shown
        return (f"{said}: the prediction lies just outside the measured range, "
                f"{predicted:.{digits + 1}f}{u} against its {side} round's {edge:.{digits + 1}f}{u}")
    return (f"{said}: the prediction is {abs(predicted / measured.median - 1):.0%} {where} the measured median, "
            "beyond the range")


def gaps_sentence(pairs: dict[str, tuple[float, Spread]]) -> str:
    """How a set of predictions (``{name: (predicted, measured)}``) fared against their
    measurements: how many fell inside the measured range, and the widest gap."""
    if not pairs:
        raise ValueError("no prediction to compare")
    inside = [n for n, (p, m) in pairs.items() if versus(p, m) == "level within noise"]
    worst = max(pairs, key=lambda n: abs(pairs[n][0] / pairs[n][1].median - 1))
    p, m = pairs[worst]
    return (f"{len(inside)} of {len(pairs)} predictions lie inside their measured range; the widest gap is "
            f"at {worst}, {p / m.median - 1:+.0%} of the measured median")


def threads_sentence(notebook: int, readme: int, decode_ms: dict[int, float | None]) -> str:
    """Which torch threads the notebooks and the README's figures ran with, and a decode step's
    cost at each as the step costs measured here say (None: none cached at those threads)."""
    def cost(threads: int) -> str:
        ms = decode_ms.get(threads)
        return f"{ms:.1f} ms" if ms is not None else "not measured on this machine"

    if notebook == readme:
        return (f"These numbers are at {notebook} torch thread{plural(notebook)}, as the README's are "
                f"(a decode step: {cost(notebook)}).")
    said = (f"These numbers are at {notebook} torch thread{plural(notebook)}; the README's figures are at {readme}. "
            f"A decode step costs {cost(notebook)} at {notebook} and {cost(readme)} at {readme} on this machine")
    if decode_ms.get(notebook) and decode_ms.get(readme):
        said += f" ({decode_ms[notebook] / decode_ms[readme]:.2f}× as long at {notebook})"
    return said + ": compare ratios (speedups, τ) across the two, not milliseconds."


def theorem_sentence(layers: int, alpha: float, c: float, gamma: int, measured: float) -> str:
    """Leviathan et al.'s Theorem 3.8 and Corollary 3.9 for one draft, beside its measured speedup."""
    from workbench.lessons.chain_model import best_gamma, improvement_factor, some_gamma_helps

    factor = improvement_factor(alpha, gamma, c)
    g, best = best_gamma(alpha, c)
    helps = ("α > c, so some γ helps by the corollary" if some_gamma_helps(alpha, c) else
             "α ≤ c, so by the corollary no γ helps")
    agree = "agrees" if (factor > 1) == (measured > 1) else "disagrees"
    return (f"exit after {layers} layers: α {alpha:.2f}, c {c:.2f}: {helps} (best γ {g}: {best:.2f}×); at γ = {gamma} "
            f"the theorem gives {factor:.2f}× and the measured speedup is {measured:.2f}×, so the theorem "
            f"{agree} with the measurement on whether this draft pays")


def c_passes_one(layers: list[int], c: list[float]) -> str:
    """Where the measured cost c of a draft forward (in decode steps) passes 1, if it does."""
    if len(layers) != len(c) or not layers:
        raise ValueError("one c per exit depth, at least one")
    over = [n for n, x in zip(layers, c) if x > 1]
    if not over:
        return (f"c stays below 1 at every exit measured (at most {max(c):.2f}, at {layers[c.index(max(c))]} "
                "layers): a draft forward costs less than the decode step it is meant to save")
    if len(over) == len(layers):
        return f"c passes 1 at every exit measured, from {min(c):.2f}: each draft forward costs more than a decode step"
    if over == layers[layers.index(over[0]):]:
        return (f"c passes 1 from {over[0]} layers on ({c[layers.index(over[0])]:.2f}): a draft forward that deep "
                "costs more than the decode step it is meant to save")
    return f"c passes 1 at {', '.join(map(str, over))} layers only: the measured c is not monotone in the depth here"


# Stop causes (engine/stops.py) in three groups: the tree's structure (what the budget, the
# frontier or a fixed shape left undrafted), its depth, and the draft itself.
STOP_GROUPS = {"structure": ("budget", "frontier", "shape"), "depth": ("depth",),
               "draft": ("width", "draft", "vocabulary", "coin", "no match", "continuation")}


def stop_shares(counts: dict[str, int]) -> dict[str, float]:
    """Share of a tree's steps per group of ``STOP_GROUPS`` (``counts``: steps per stop cause)."""
    total = sum(counts.values())
    return {g: sum(counts.get(c, 0) for c in causes) / total if total else 0.0 for g, causes in STOP_GROUPS.items()}


def structure_sentence(budget: int, dynamic: dict[str, int], static: dict[str, int]) -> str:
    """Does the dynamic tree lose fewer of its steps to its structure (budget, frontier) than the
    static one to its shape, at one verify budget? Read from the two trees' stop counts."""
    d, s = stop_shares(dynamic), stop_shares(static)
    side = "fewer" if d["structure"] < s["structure"] else "more" if d["structure"] > s["structure"] else "as many"
    return (f"At D = {budget}, the dynamic tree stopped for its structure (budget or frontier) at {d['structure']:.0%} "
            f"of its {sum(dynamic.values())} steps, the static one for its shape at {s['structure']:.0%} of "
            f"{sum(static.values())}: {side} stops spent on what the tree left undrafted; the draft's own misses "
            f"{d['draft']:.0%} against {s['draft']:.0%}, the last level {d['depth']:.0%} against {s['depth']:.0%}.")


def widen_or_deepen_sentence(name: str, counts: dict[str, int]) -> str:
    """What a tree's stop causes say about widening against deepening it: stops at the last level
    (depth) are what one more level could continue; stops for budget, frontier or a token ranked just
    outside ``topk`` (width) are what a wider tree could catch; the rest the draft missed outright."""
    total = sum(counts.values())
    if not total:
        return f"{name}: no speculative step."
    share = lambda causes: sum(counts.get(c, 0) for c in causes) / total  # noqa: E731
    deeper, wider = share(("depth",)), share(("budget", "frontier", "width"))
    lean = "widening" if wider > deeper else "deepening" if deeper > wider else "neither"
    return (f"{name}: of {total} steps, {wider:.0%} stopped where a wider tree could have caught the target's token "
            f"(budget, frontier, width) and {deeper:.0%} at the last level (depth); the causes point to {lean}.")
