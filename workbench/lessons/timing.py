"""Timings on a shared machine vary from run to run: report the median and the range of several
repeats, never one number."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


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


def spread(values) -> Spread:
    """Median and range of repeated measurements."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("spread() needs at least one measurement")
    return Spread(statistics.median(values), min(values), max(values), len(values))
