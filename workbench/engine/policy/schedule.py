"""``schedule:1-2=eagle2:8/5/4,3-4=linear:3,5+=off``: a setting per running batch size, as
vLLM's speculative tokens per batch size (``frameworks.schedule_flags`` writes one that way)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.engine.config import SpecConfig
from workbench.engine.policy.base import Choice, draft_source_of, parse_setting, setting_label
from workbench.engine.request import Request


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
    grammar = "schedule:LO-HI=NAME,...,LO+=NAME"
    about = "a setting per running batch size; NAME may be off"
    default = ""
    needs_cost = False

    @classmethod
    def from_text(cls, arg: str, spec: SpecConfig | None = None) -> Schedule:
        """``1-2=eagle2:8/5/4,3-4=linear:3,5+=off`` -> a validated ``Schedule``."""
        if not arg:
            raise ValueError("a schedule names its batch sizes: schedule:LO-HI=NAME,...,LO+=NAME")
        return cls(tuple(_range(part) for part in arg.split(",")))

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

    @property
    def text(self) -> str:
        """The schedule as the grammar writes it."""
        return "schedule:" + ",".join(f"{r.text}={setting_label(r.spec)}" for r in self.ranges)

    def settings(self) -> tuple[SpecConfig, ...]:
        return tuple(dict.fromkeys(r.spec for r in self.ranges))

    def choose(self, batch: list[Request]) -> Choice:
        r = next(r for r in self.ranges if r.holds(len(batch)))
        return Choice(self.name, r.spec, f"batch {len(batch)} in {r.text}")

    def observe(self, choice: Choice, batch: list[Request]) -> None:
        pass


def _range(part: str) -> BatchRange:
    """``3-4=linear:3``, ``2=off`` or ``5+=eagle2:4/3/2`` -> a ``BatchRange``."""
    sizes, eq, name = part.partition("=")
    lo, dash, hi = sizes.strip().partition("-")
    open_end = not dash and lo.endswith("+")
    lo = lo[:-1] if open_end else lo
    if not eq or not lo.isdigit() or (dash and not hi.isdigit()):
        raise ValueError(f"schedule entry {part.strip()!r}: write LO-HI=SETTING, N=SETTING or LO+=SETTING "
                         "(batch sizes; SETTING a method name or off)")
    top = None if open_end else int(hi) if dash else int(lo)
    return BatchRange(int(lo), top, parse_setting(name))
