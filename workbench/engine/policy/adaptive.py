"""``adaptive:linear:1,linear:3,eagle2:8/5/4``: a ladder of settings climbed by acceptance, as
SGLang's adaptive speculation (``--speculative-adaptive``); bare ``adaptive`` climbs
``DEFAULT_LADDER``."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.engine.config import SpecConfig
from workbench.engine.policy.base import Choice, draft_source_of, parse_setting, setting_label
from workbench.engine.request import Request

DEFAULT_LADDER = "linear:1,eagle2:4/3/2,eagle2:8/5/4"  # bare ``adaptive``: least speculative first


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
    grammar = "adaptive[:NAME,NAME,...]"
    about = f"a ladder climbed by acceptance, least speculative first; bare: {DEFAULT_LADDER}"
    default = DEFAULT_LADDER
    needs_cost = False

    @classmethod
    def from_text(cls, arg: str, spec: SpecConfig | None = None) -> Adaptive:
        return cls(tuple(parse_setting(n) for n in (arg or DEFAULT_LADDER).split(",")))

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
