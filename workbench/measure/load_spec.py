"""What a load is, as the load benchmark and the app's Load tab take it: ``Load`` (closed: a
concurrency; open: a rate and a seed for its Poisson arrivals), checked with a message a user can
act on. The policies a load runs under are named in the one policy grammar
(``workbench/engine/policy/grammar.py``: ``parse_policies``)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

MODES = ("closed", "open")


@dataclass(frozen=True)
class Load:
    """How requests come: ``mode`` ``closed`` (``value``: the concurrency, requests in flight, a
    whole number >= 1) or ``open`` (``value``: the rate, arrivals per second, > 0); ``requests``
    submitted in all; ``seed``: the open loop's arrival times. ValueError otherwise."""

    mode: str
    value: float
    requests: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"a load is closed or open, got {self.mode!r}")
        if self.mode == "closed" and not (self.value >= 1 and float(self.value).is_integer()):
            raise ValueError(f"concurrency must be a whole number >= 1 (requests in flight), got {self.value:g}")
        if self.mode == "open" and not (self.value > 0 and math.isfinite(self.value)):
            raise ValueError(f"a rate must be > 0 requests per second, got {self.value:g}")
        if self.requests < 1:
            raise ValueError(f"a load needs at least one request, got {self.requests}")

    @property
    def label(self) -> str:
        """``concurrency 4`` or ``rate 2/s``."""
        return f"concurrency {self.value:g}" if self.mode == "closed" else f"rate {self.value:g}/s"

    def arrivals(self) -> list[float] | None:
        """Open loop: each request's arrival, seconds from the start (seeded Poisson: the first
        at 0, then exponential gaps of mean 1 / rate); closed loop: None (a request arrives when
        it is submitted)."""
        if self.mode == "closed":
            return None
        gen, t, out = random.Random(self.seed), 0.0, []
        for _ in range(self.requests):
            out.append(t)
            t += gen.expovariate(self.value)
        return out
