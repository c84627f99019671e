"""A step's phase times: ``with timings.phase("verify"):`` around a phase records its wall time
in ms under ``"verify_ms"``, the key ``StepRecord.timing_ms`` carries (the app, the benchmarks
and the notebooks read these keys: ``prefill_ms``; a plain step's ``decode_ms`` (the target's
forward), ``logits_ms``, ``sample_ms``, ``commit_ms``; a speculative step's ``draft_extend_ms``,
``draft_tree_ms``, ``build_ms``, ``verify_ms`` (the target's forward over the tree), ``logits_ms``,
``accept_ms``, ``commit_ms``, and ``stops_ms`` where the engine keeps stop causes). From a CUDA
graph the forward and the logits are one replay, timed as the forward alone. The phases follow one
another, so they add up to the step less what lies between them (``StepProfile``'s ``other``).

CUDA is asynchronous: without a sync, a phase's kernels would run, and be timed, in a later
phase. With ``sync`` (the engine's tracing on a CUDA device) the clock is read after
``torch.cuda.synchronize``; without it a phase costs two ``perf_counter`` reads and nothing waits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


class StepTimings:
    """The phases of one step, timed in order (filled by ``engine.py``, read as ``ms``)."""

    def __init__(self, device, sync: bool):  # device: a torch.device
        self.device, self.sync = device, sync and device.type == "cuda"
        self.ms: dict[str, float] = {}  # "<phase>_ms" -> wall time in ms, in the order the phases ran

    def _clock(self) -> float:
        if self.sync:
            import torch  # only with a CUDA device: this module's profiles are read without torch

            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (a phase that raises is not recorded)."""
        start = self._clock()
        yield
        key = f"{name}_ms"  # a phase entered twice in a step (the verify's batch, then its forward) adds up
        self.ms[key] = self.ms.get(key, 0.0) + (self._clock() - start) * 1e3


def target_ms(timing_ms: dict[str, float]) -> float:
    """The target's share of one step's ``timing_ms``: its forward (decode or verify) and the logits."""
    return timing_ms.get("decode_ms", 0.0) + timing_ms.get("verify_ms", 0.0) + timing_ms.get("logits_ms", 0.0)


@dataclass
class PhaseTotals:
    """One setting's steps, summed: how many, over how many requests, their wall time and each phase's."""

    steps: int = 0
    requests: int = 0  # requests stepped, summed over the steps (a step of 3 requests adds 3)
    wall_ms: float = 0.0  # each whole engine step, admission and policy included
    phases_ms: dict[str, float] = field(default_factory=dict)  # "<phase>_ms" -> summed wall time

    def add(self, *, requests: int, phases_ms: dict[str, float], wall_ms: float) -> None:
        self.merge(PhaseTotals(steps=1, requests=requests, wall_ms=wall_ms, phases_ms=phases_ms))

    def merge(self, other: "PhaseTotals") -> None:
        self.steps, self.requests, self.wall_ms = (self.steps + other.steps, self.requests + other.requests,
                                                   self.wall_ms + other.wall_ms)
        for key, ms in other.phases_ms.items():
            self.phases_ms[key] = self.phases_ms.get(key, 0.0) + ms

    def per_step(self) -> dict[str, float]:
        """Mean ms per step of each phase, ``other_ms`` (the step less its phases: admission, the
        policy's choice, the loop between phases) and ``step_ms`` (the whole step)."""
        n = max(self.steps, 1)
        out = {key: ms / n for key, ms in self.phases_ms.items()}
        out["other_ms"] = max(0.0, self.wall_ms - sum(self.phases_ms.values())) / n
        out["step_ms"] = self.wall_ms / n
        return out


class StepProfile:
    """Where an engine's time went: each step's phases (``StepTimings``) summed per setting (the
    policy's label, ``"prefill"`` for a prefill step). Cheap (two clock reads per phase), so every
    engine keeps one, tracing or not; on CUDA the clock waits for the device only when tracing,
    so without it a phase's kernels may be counted in a later phase."""

    def __init__(self) -> None:
        self.settings: dict[str, PhaseTotals] = {}

    def add(self, *, setting: str, requests: int, phases_ms: dict[str, float], wall_ms: float) -> None:
        self.settings.setdefault(setting, PhaseTotals()).add(requests=requests, phases_ms=phases_ms, wall_ms=wall_ms)

    def merge(self, other: "StepProfile") -> None:
        """Add ``other``'s steps to these (one profile over several engines, e.g. a benchmark's turns)."""
        for setting, totals in other.settings.items():
            self.settings.setdefault(setting, PhaseTotals()).merge(totals)

    def per_step(self) -> dict[str, dict]:
        """JSON-ready: per setting, its step count, requests and mean ms per step of each part."""
        return {setting: {"steps": t.steps, "requests": t.requests,
                          **{k: round(v, 3) for k, v in t.per_step().items()}}
                for setting, t in self.settings.items()}

    def to_json(self) -> dict[str, dict]:
        """The sums themselves (``from_json`` reads them back: a record that can be added to)."""
        return {setting: {"steps": t.steps, "requests": t.requests, "wall_ms": round(t.wall_ms, 3),
                          "phases_ms": {k: round(v, 3) for k, v in t.phases_ms.items()}}
                for setting, t in self.settings.items()}

    @classmethod
    def from_json(cls, data: dict[str, dict]) -> "StepProfile":
        out = cls()
        for setting, t in data.items():
            out.settings[setting] = PhaseTotals(steps=t["steps"], requests=t["requests"], wall_ms=t["wall_ms"],
                                                phases_ms=dict(t["phases_ms"]))
        return out
