"""How every timed comparison in the workbench is taken and read.

A 2-core machine's timings move by a fifth between runs, and a slow spell hits whatever runs
during it. So a comparison never times one setting and then the next: ``interleaved`` runs
every setting once per round, rotating who goes first, for several rounds, and keeps each
round's value. ``spread`` summarises one setting's values (median and range), ``verdict``
names a winner only where its range is clear of every other's and says "level within noise"
otherwise, and ``monotone`` fits a cost curve that physics says cannot fall (a verify of more
tokens never costs less) so that a regime is read from the fit, not from single points.
``paired_points`` reads a curve from repeats that timed its sizes together by each repeat's own
differences; ``prediction_check`` says what "a prediction inside the rounds' range" is worth: a range of few
rounds misses even a perfect prediction part of the time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

NOISE = "level within noise"


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    runs: int

    def __str__(self) -> str:
        return f"{self.median:.3g} ({self.low:.3g}–{self.high:.3g}, {self.runs} runs)"

    def with_unit(self, unit: str, digits: int = 3) -> str:
        """'151 ms (146–195 ms over 3 runs)'."""
        g = f".{digits}g"
        return (f"{self.median:{g}} {unit} ({self.low:{g}}–{self.high:{g}} {unit} over {self.runs} "
                f"run{'s' if self.runs != 1 else ''})")

    def ratio(self, other: "Spread") -> "Spread":
        """self / other: median over median, range from the extremes (conservative)."""
        return Spread(self.median / other.median, self.low / other.high, self.high / other.low,
                      min(self.runs, other.runs))

    def overlaps(self, other: "Spread") -> bool:
        return self.low <= other.high and other.low <= self.high

    def as_dict(self, digits: int = 4) -> dict:
        return {"median": round(self.median, digits), "low": round(self.low, digits),
                "high": round(self.high, digits), "runs": self.runs}


def spread(values) -> Spread:
    """Median and range of repeated measurements."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("spread() needs at least one measurement")
    return Spread(statistics.median(values), min(values), max(values), len(values))


def interleaved(settings: Mapping[str, Callable[[], float | None]], rounds: int,
                warmup: int = 0) -> dict[str, list[float]]:
    """Run every setting once per round, ``rounds`` rounds, the starting setting rotating by
    one each round; ``warmup`` untimed rounds first. A setting's callable returns its own
    measurement (a throughput, say) or None, in which case its wall time in seconds is kept.
    Returns each setting's values, one per round, in round order."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not settings:
        raise ValueError("interleaved() needs at least one setting")
    names = list(settings)
    for _ in range(warmup):
        for name in names:
            settings[name]()
    values: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            got = settings[name]()
            values[name].append(time.perf_counter() - t0 if got is None else float(got))
    return values


@dataclass(frozen=True)
class Verdict:
    winner: str | None  # the setting whose range is clear of every other's, else None
    level: tuple[str, ...]  # the settings level with the best median within noise (winner alone when one)
    text: str  # "A wins (...)" or "A, B level within noise"


def verdict(spreads: Mapping[str, Spread], higher_is_better: bool = True, unit: str = "") -> Verdict:
    """The best setting by median, named the winner only if its range overlaps no other's;
    otherwise every setting whose range overlaps the best's is level with it within noise."""
    if not spreads:
        raise ValueError("verdict() needs at least one setting")
    sign = 1 if higher_is_better else -1
    best = max(spreads, key=lambda n: sign * spreads[n].median)
    level = tuple(n for n in spreads if n == best or spreads[n].overlaps(spreads[best]))
    shown = lambda n: spreads[n].with_unit(unit) if unit else str(spreads[n])  # noqa: E731
    if len(spreads) == 1:
        return Verdict(best, (best,), f"{best} alone: {shown(best)}")
    if len(level) == 1:
        return Verdict(best, level, f"{best} wins: {shown(best)}, clear of every other range")
    return Verdict(None, level, f"{', '.join(level)} {NOISE} (ranges overlap)")


def paired_points(samples: list[Mapping[int, float]]) -> list[tuple[int, float]]:
    """One value per size from repeats that each timed several sizes together, within a second and
    at one pace of the machine (a probe, a round of interleaved forwards): the smallest size's median
    over the repeats, and every other size that plus the median of each repeat's own difference from
    its smallest (a paired median). The differences hold the curve's shape with the pace taken out,
    where each size's own median may come from repeats at other paces. A size a repeat lacks is left
    out of that repeat's differences; a size no repeat pairs with the smallest keeps its own median."""
    sized = [dict(s) for s in samples if s]
    if not sized:
        return []
    sizes = sorted({n for s in sized for n in s})
    first = sizes[0]
    anchor = statistics.median(s[first] for s in sized if first in s)
    points = []
    for n in sizes:
        diffs = [s[n] - s[first] for s in sized if n in s and first in s]
        points.append((n, anchor + statistics.median(diffs) if diffs else statistics.median(s[n] for s in sized if n in s)))
    return points


def range_holds_median(runs: int) -> float:
    """The chance that the lowest-to-highest range of ``runs`` independent repeats holds their
    distribution's median: each repeat falls on either side of it with chance one half, and the
    range misses it only when all fall on one side, 1 - 2 * 0.5 ** runs (0.75 at three rounds,
    0.94 at five)."""
    if runs < 2:
        raise ValueError(f"a range needs at least two runs, got {runs}")
    return 1 - 2 * 0.5 ** runs


def prediction_check(predicted: list[float], medians: list[float], inside: list[bool], runs: int) -> str:
    """Predictions beside the medians and ranges of ``runs`` rounds, in words: how many lie above
    the measured median and how many below (a model that errs one way has a bias, one that errs
    both ways has the runs' noise left), and how many a prediction equal to each figure's own
    median would expect inside its range (``range_holds_median``), beside how many are."""
    if not (len(predicted) == len(medians) == len(inside)) or not predicted:
        raise ValueError("one median and one inside flag per prediction, and at least one")
    over = sum(p > m for p, m in zip(predicted, medians))
    under = sum(p < m for p, m in zip(predicted, medians))
    chance = range_holds_median(runs)
    return (f"{over} above the measured median and {under} below; the range of {runs} rounds holds the median "
            f"of the spread they are drawn from with chance 1 − 2·0.5^{runs} = {chance:.0%}, so predictions with no "
            f"error would lie inside about {chance * len(predicted):.1f} of {len(predicted)} times (here: "
            f"{sum(inside)})")


def monotone(xs, ys) -> list[float]:
    """The non-decreasing fit of ``ys`` over increasing ``xs`` closest in squares (pool adjacent
    violators): a cost curve where a larger size never costs less. Equal to ``ys`` where they
    already rise; a dip is pooled with its neighbours into their mean."""
    xs, ys = list(xs), [float(y) for y in ys]
    if len(xs) != len(ys):
        raise ValueError(f"one value per size: {len(xs)} sizes, {len(ys)} values")
    if any(b <= a for a, b in zip(xs, xs[1:])):
        raise ValueError("sizes must increase")
    blocks: list[list[float]] = []  # [sum, count]
    for y in ys:
        blocks.append([y, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return [s / c for s, c in blocks for _ in range(c)]
