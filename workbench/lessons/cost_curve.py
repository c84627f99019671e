"""The verify cost measured at a few sizes N, read at any N in between.

``measure_verify_cost`` times a handful of sizes (1, 2, 4, ...); a cost model needs the cost of
any verify block, e.g. B(γ + 1) tokens for a batch of chains. Linear interpolation between the
measured points is enough: the curve is smooth, and it never extrapolates (outside the measured
range it raises rather than guess).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CostCurve:
    tokens: tuple[int, ...]  # measured sizes N, increasing
    ms: tuple[float, ...]  # one forward over N tokens

    def __post_init__(self):
        if len(self.tokens) != len(self.ms) or len(self.tokens) < 2:
            raise ValueError("a cost curve needs at least two (tokens, ms) points of equal count")
        if list(self.tokens) != sorted(set(self.tokens)):
            raise ValueError(f"measured sizes must increase strictly, got {self.tokens}")

    @classmethod
    def from_rows(cls, rows: list[dict]) -> "CostCurve":
        """From ``measure_verify_cost``'s rows ``{"tokens": N, "ms": t}``."""
        rows = sorted(rows, key=lambda r: r["tokens"])
        return cls(tuple(r["tokens"] for r in rows), tuple(r["ms"] for r in rows))

    def at(self, tokens: float) -> float:
        """Cost of a forward over ``tokens`` tokens, interpolated linearly."""
        if not self.tokens[0] <= tokens <= self.tokens[-1]:
            raise ValueError(f"{tokens} tokens is outside the measured range "
                             f"{self.tokens[0]}..{self.tokens[-1]}: measure it instead of extrapolating")
        return float(np.interp(tokens, self.tokens, self.ms))
