"""What a load is and the policies it runs under, as the load benchmark and the app's Load tab
name them: ``Load`` (closed: a concurrency; open: a rate and a seed for its Poisson arrivals)
and ``NamedPolicy`` (``off``, a method name for one fixed setting, ``adaptive`` or ``auto``
alone, or any policy of ``engine/policy.py``'s grammar), each checked with a message a user can act on.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from workbench.engine.config import parse_spec
from workbench.engine.drafts.base import DraftSource
from workbench.engine.policy import (POLICIES, POLICY_GRAMMAR, SpecPolicy, StepCost, draft_source_of, parse_policy,
                                     parse_setting, policy_for)

MODES = ("closed", "open")
DEFAULT_LADDER = "linear:1,eagle2:4/3/2,eagle2:8/5/4"  # bare ``adaptive``: its ladder, least speculative first
METHOD_KINDS = ("vanilla", "linear", "eagle2", "static")


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


@dataclass(frozen=True)
class NamedPolicy:
    """A policy as the load benchmark names it: ``name`` as typed, ``text`` in ``parse_policy``'s
    grammar. ``build()`` makes a fresh one for every run (a policy that learns keeps state)."""

    name: str
    text: str

    def build(self, cost: StepCost | None = None) -> SpecPolicy:
        """A fresh policy; ``cost``: the step cost ``auto`` weighs by (the others ignore it)."""
        kind = self.text.partition(":")[0]
        return parse_policy(self.text, cost=cost) if kind in POLICIES else policy_for(parse_setting(self.text))

    @property
    def needs_cost(self) -> bool:
        """Does it weigh settings by this machine's step cost (``auto``)?"""
        return self.text.partition(":")[0] == "auto"

    @property
    def draft(self) -> DraftSource | None:
        """The draft source its speculative settings share (None: it never speculates)."""
        return draft_source_of(self.build().settings())


def parse_load_policy(name: str) -> NamedPolicy:
    """A policy in ``parse_policy``'s grammar (``off``, ``schedule:...``, ``adaptive:...``,
    ``auto``, ``auto:...``), a method name for one fixed setting (``eagle2:4/3/2``,
    ``linear:3@ngram``), or ``adaptive`` alone (the ladder ``DEFAULT_LADDER``). ValueError naming
    what is wrong."""
    text = name.strip()
    if text == "adaptive":
        text = f"adaptive:{DEFAULT_LADDER}"
    kind = text.partition(":")[0].partition("@")[0]
    if kind not in POLICIES and kind not in METHOD_KINDS:
        raise ValueError(f"unknown policy {name.strip()!r}; write a method name (eagle2:D/S/K, linear:S, static:D) "
                         f"for one fixed setting, adaptive alone, or {POLICY_GRAMMAR}")
    if kind in METHOD_KINDS:
        parse_spec(text, others="off")  # its own message for a bad method name
    policy = NamedPolicy(name.strip(), text)
    policy.build()
    return policy


def parse_policies(text: str) -> list[NamedPolicy]:
    """``off,eagle2:4/3/2,adaptive``: policies separated by commas, or by semicolons when one of
    them holds commas itself (a schedule, a ladder). ValueError naming the policy at fault."""
    sep = ";" if ";" in text else ","
    names = [n.strip() for n in text.split(sep) if n.strip()]
    if not names:
        raise ValueError("no policy named")
    if len(set(names)) < len(names):
        raise ValueError(f"a policy is named twice in {text!r}")
    out = []
    for name in names:
        try:
            out.append(parse_load_policy(name))
        except ValueError as err:
            split = sep == "," and (name[:1].isdigit() or name.startswith(("schedule:", "adaptive:", "auto:")))
            hint = " (a schedule or a ladder holds commas: separate the policies with ';')" if split else ""
            raise ValueError(f"{name}: {err}{hint}") from None
    return out
