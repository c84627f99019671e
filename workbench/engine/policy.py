"""Speculation policies: which setting (a ``SpecConfig``, or plain decoding) each decode step runs.

The engine asks its policy before every decode step, with the running batch, and tells it
afterwards what the step accepted; it never reads a fixed ``SpecConfig`` of its own. A policy
is anything with the four members of ``SpecPolicy``:

==================  ========================================================================
``name``            what traces call it: "off", "fixed", "schedule", "adaptive", "auto"
``settings()``      every setting ``choose`` may return. The engine builds **one** draft from
                    them (so they must share one draft source, ``draft_source_of``) and sizes
                    its KV pools for the largest (``Engine.slots_needed``)
``choose(batch)``   the running requests -> a ``Choice``: the setting for this step and why
``observe(choice, batch)``  after the step: the same requests, their ``drafts_accepted`` and
                    ``accept_lengths`` now one step longer (a policy that learns reads them)
==================  ========================================================================

Here: ``Off`` (plain decoding), ``Fixed`` (one setting: the engine's behaviour with a bare
``SpecConfig``), ``Schedule`` (ranges of running batch size -> a setting or off, as vLLM's
speculative tokens per batch size), and ``Adaptive`` (a moving average of the accepted drafts
walks a ladder of settings, as SGLang's adaptive speculation), small enough to read top to
bottom in one file; and ``Auto`` (``auto.py``: off or a configured tree, whichever promises the
most tokens per second from this machine's measured step cost and each request's running
acceptance). What they share (``Choice``, ``SpecPolicy``, ``OFF``, how settings are named) is in
``choice.py``, re-exported here.

Every policy has a name in one grammar (``parse_policy``, ``POLICY_GRAMMAR``): ``off``,
``fixed`` (the method given beside it) or ``fixed:NAME``, ``schedule:1-2=eagle2:8/5/4,3+=off``,
``adaptive:linear:1,linear:3,eagle2:8/5/4``, ``auto`` or ``auto:linear:1,eagle2:4/3/2``; NAME in
the method grammar of ``config.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.engine.auto import AUTO_CANDIDATES, Auto, StepCost, parse_auto
from workbench.engine.choice import OFF, Choice, SpecPolicy, draft_source_of, parse_setting, setting_label
from workbench.engine.config import SpecConfig
from workbench.engine.request import Request

__all__ = ["AUTO_CANDIDATES", "OFF", "Adaptive", "Auto", "BatchRange", "Choice", "Fixed", "Off", "POLICIES",
           "POLICY_GRAMMAR", "Schedule", "SpecPolicy", "StepCost", "draft_source_of", "parse_policy",
           "parse_schedule", "parse_setting", "policy_for", "setting_label"]


class Off:
    """Plain decoding at every step."""

    name = "off"

    def settings(self) -> tuple[SpecConfig, ...]:
        return (OFF,)

    def choose(self, batch: list[Request]) -> Choice:
        return Choice(self.name, OFF, "speculation off")

    def observe(self, choice: Choice, batch: list[Request]) -> None:
        pass


@dataclass(frozen=True)
class Fixed:
    """One setting at every step."""

    spec: SpecConfig
    name = "fixed"

    def settings(self) -> tuple[SpecConfig, ...]:
        return (self.spec,)

    def choose(self, batch: list[Request]) -> Choice:
        return Choice(self.name, self.spec, "fixed")

    def observe(self, choice: Choice, batch: list[Request]) -> None:
        pass


def policy_for(spec: SpecConfig) -> Off | Fixed:
    """What an engine given only a ``SpecConfig`` runs."""
    return Fixed(spec) if spec.speculative else Off()


@dataclass(frozen=True)
class BatchRange:
    """Running batch sizes ``lo``..``hi`` (None: no upper end) run ``spec`` (OFF: plain decoding)."""

    lo: int
    hi: int | None
    spec: SpecConfig

    @property
    def text(self) -> str:
        return f"{self.lo}+" if self.hi is None else f"{self.lo}-{self.hi}"

    def holds(self, size: int) -> bool:
        return self.lo <= size and (self.hi is None or size <= self.hi)


@dataclass(frozen=True)
class Schedule:
    """A setting per running batch size. The ranges, in any order, must tile 1, 2, 3, ...
    exactly: no overlap, no gap, the last open-ended (``hi=None``). ValueError otherwise."""

    ranges: tuple[BatchRange, ...]
    name = "schedule"

    def __post_init__(self) -> None:
        rs = sorted(self.ranges, key=lambda r: r.lo)
        if not rs:
            raise ValueError("a schedule needs at least one batch-size range")
        expect = 1
        for r in rs:
            if r.hi is not None and r.hi < r.lo:
                raise ValueError(f"batch-size range {r.lo}-{r.hi} is empty: write LO-HI with LO <= HI")
            if r.lo < expect:
                raise ValueError(f"batch-size ranges overlap: {r.text} starts inside an earlier range "
                                 f"(batch {r.lo} would have two settings)")
            if r.lo > expect:
                raise ValueError(f"batch-size ranges leave a gap: batch {expect}"
                                 f"{'' if r.lo == expect + 1 else f'-{r.lo - 1}'} has no setting")
            if r.hi is None and r is not rs[-1]:
                raise ValueError(f"batch-size ranges overlap: {r.text} is open-ended but ranges follow it")
            expect = r.hi + 1 if r.hi is not None else None
        if expect is not None:
            raise ValueError(f"batch-size ranges leave a gap: batches from {expect} up have no setting "
                             f"(end with an open range, {expect}+)")
        object.__setattr__(self, "ranges", tuple(rs))
        draft_source_of(self.settings())

    def settings(self) -> tuple[SpecConfig, ...]:
        return tuple(dict.fromkeys(r.spec for r in self.ranges))

    def choose(self, batch: list[Request]) -> Choice:
        r = next(r for r in self.ranges if r.holds(len(batch)))
        return Choice(self.name, r.spec, f"batch {len(batch)} in {r.text}")

    def observe(self, choice: Choice, batch: list[Request]) -> None:
        pass


@dataclass
class Adaptive:
    """A ladder of speculative settings, least speculative first, climbed by acceptance.

    After each step the mean drafts accepted per request (``Request.drafts_accepted``) enters
    an exponential moving average (``weight`` for the newest step). Every ``interval`` steps,
    once ``warmup`` steps have run at the current rung, the policy moves one rung up when the
    average reaches ``up`` x the rung's depth (``num_steps``: the most a step can accept), one
    down when it falls below ``down`` x depth, and stays in between: the gap is the hysteresis.
    After a move the average restarts (it measured the old setting) and the warm-up runs again.
    Plain decoding is no rung: a step without drafts tells nothing about acceptance, so the
    policy could never climb back."""

    ladder: tuple[SpecConfig, ...]
    start: int = 0  # the rung of the first steps
    warmup: int = 8
    interval: int = 4
    weight: float = 0.25
    up: float = 0.75
    down: float = 0.35
    name = "adaptive"

    def __post_init__(self) -> None:
        self.ladder = tuple(self.ladder)
        if not self.ladder or not all(s.speculative for s in self.ladder):
            raise ValueError("an adaptive ladder needs one or more speculative settings (off is no rung: "
                             "plain steps accept nothing, so the policy could not climb back)")
        draft_source_of(self.ladder)
        if not 0 <= self.start < len(self.ladder):
            raise ValueError(f"start must be a rung 0..{len(self.ladder) - 1}, got {self.start}")
        if self.warmup < 1 or self.interval < 1:
            raise ValueError(f"warmup and interval count steps: both >= 1, got {self.warmup}, {self.interval}")
        if not 0 < self.weight <= 1:
            raise ValueError(f"the moving average's weight must be in (0, 1], got {self.weight}")
        if not 0 <= self.down < self.up <= 1:
            raise ValueError(f"the thresholds need 0 <= down < up <= 1 (fractions of the depth), "
                             f"got down={self.down}, up={self.up}")
        self.rung, self.average, self.steps_here, self.reason = self.start, None, 0, "start"

    def settings(self) -> tuple[SpecConfig, ...]:
        return self.ladder

    def choose(self, batch: list[Request]) -> Choice:
        reason = self.reason
        if self.steps_here < self.warmup:
            reason += f"; warm-up {self.steps_here}/{self.warmup}"
        return Choice(self.name, self.ladder[self.rung], reason)

    def observe(self, choice: Choice, batch: list[Request]) -> None:
        mean = sum(r.drafts_accepted[-1] for r in batch) / len(batch)
        self.average = mean if self.average is None else (1 - self.weight) * self.average + self.weight * mean
        self.steps_here += 1
        if self.steps_here < self.warmup or (self.steps_here - self.warmup) % self.interval:
            return
        here, depth = self.ladder[self.rung], self.ladder[self.rung].num_steps
        said = f"mean accepted {self.average:.2f}"
        if self.average >= self.up * depth and self.rung + 1 < len(self.ladder):
            self._move(+1, f"{said} >= {self.up:g} x {depth}: up from {setting_label(here)}")
        elif self.average < self.down * depth and self.rung > 0:
            self._move(-1, f"{said} < {self.down:g} x {depth}: down from {setting_label(here)}")
        else:
            self.reason = f"{said} at depth {depth}: stays"

    def _move(self, by: int, reason: str) -> None:
        self.rung, self.average, self.steps_here, self.reason = self.rung + by, None, 0, reason


def parse_schedule(text: str) -> Schedule:
    """``1-2=eagle2:8/5/4,3-4=linear:3,5+=off`` -> a validated ``Schedule``."""
    ranges = []
    for part in text.split(","):
        sizes, eq, name = part.partition("=")
        lo, dash, hi = sizes.strip().partition("-")
        open_end = not dash and lo.endswith("+")
        lo = lo[:-1] if open_end else lo
        if not eq or not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"schedule entry {part.strip()!r}: write LO-HI=SETTING, N=SETTING or LO+=SETTING "
                             "(batch sizes; SETTING a method name or off)")
        top = None if open_end else int(hi) if dash else int(lo)
        ranges.append(BatchRange(int(lo), top, parse_setting(name)))
    return Schedule(tuple(ranges))


POLICIES = ("off", "fixed", "schedule", "adaptive", "auto")  # every policy parse_policy reads, for lists shown to users
POLICY_GRAMMAR = ("off, fixed, fixed:NAME, schedule:LO-HI=NAME,...,LO+=NAME (NAME may be off), "
                  "adaptive:NAME,NAME,... (a ladder, least speculative first), auto (off or "
                  f"{AUTO_CANDIDATES.replace(',', ', ')}, by expected tokens/s) or auto:NAME,NAME,... "
                  "(off always a candidate)")


def parse_policy(text: str, spec: SpecConfig | None = None, cost: StepCost | None = None) -> SpecPolicy:
    """A policy in ``POLICY_GRAMMAR``; ``fixed`` alone runs ``spec`` (the method given beside
    it); ``auto`` weighs its candidates by ``cost`` (this machine's step cost: it may come later,
    ``Auto.cost``, but before the first step). ValueError naming what is wrong."""
    kind, _, arg = text.strip().partition(":")
    if kind == "off" and not arg:
        return Off()
    if kind == "fixed":
        if not arg and spec is None:
            raise ValueError("policy fixed runs the method given with it: name one, fixed:NAME")
        return policy_for(parse_setting(arg) if arg else spec)
    if kind == "schedule" and arg:
        return parse_schedule(arg)
    if kind == "adaptive" and arg:
        return Adaptive(tuple(parse_setting(n) for n in arg.split(",")))
    if kind == "auto":
        try:
            return parse_auto(arg, cost)
        except ValueError as err:
            raise ValueError(f"policy {text.strip()!r}: {err}") from None
    raise ValueError(f"unknown speculation policy {text!r}; write {POLICY_GRAMMAR}")
