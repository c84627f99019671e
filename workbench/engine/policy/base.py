"""What every speculation policy returns and is: the ``Choice`` of one step, the ``SpecPolicy``
protocol the engine calls, plain decoding's setting ``OFF``, and how a setting is named
(``setting_label``, ``parse_setting``). Each policy is a module of this package; the grammar that
names them is ``grammar.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from workbench.engine.config import SpecConfig, parse_spec
from workbench.engine.drafts.base import DraftSource
from workbench.engine.request import Request

OFF = SpecConfig("vanilla")


def setting_label(spec: SpecConfig | None) -> str:
    """A setting as traces show it: "off" for plain decoding, else its method name
    (``eagle2:8/5/4``; ``describe()`` for a setting without one); None: "prefill"."""
    if spec is None:
        return "prefill"
    if not spec.speculative:
        return "off"
    try:
        return spec.name
    except ValueError:  # a custom static shape or a lossy setting: no short name
        return spec.describe()


@dataclass(frozen=True)
class Choice:
    """What one step runs and why (filled by a policy, or by the engine for a prefill step)."""

    policy: str  # the policy's name
    spec: SpecConfig | None  # the setting: OFF for plain decoding; None on a prefill step
    reason: str  # one phrase: "batch 3 in 3-4", "fixed", "requests 4, 5 admitted"

    @property
    def label(self) -> str:
        return setting_label(self.spec)


class SpecPolicy(Protocol):
    """What the engine calls: before every decode step ``choose`` with the running batch, after
    it ``observe`` with the same requests, their ``drafts_accepted`` and ``accept_lengths`` now
    one step longer (a policy that learns reads them). ``settings()`` lists every setting
    ``choose`` may return: the engine builds **one** draft from them (so they share one draft
    source, ``draft_source_of``) and sizes its KV pools for the largest."""

    name: str  # what traces call it: "off", "fixed", "schedule", "adaptive", "auto"

    def settings(self) -> tuple[SpecConfig, ...]: ...

    def choose(self, batch: list[Request]) -> Choice: ...

    def observe(self, choice: Choice, batch: list[Request]) -> None: ...


def draft_source_of(settings: tuple[SpecConfig, ...]) -> DraftSource | None:
    """The one draft source the speculative settings share (None: none speculates);
    ValueError naming them when they differ (the engine builds one draft)."""
    sources = {s.draft for s in settings if s.speculative}
    if len(sources) > 1:
        names = ", ".join(sorted(s.name for s in sources))
        raise ValueError(f"a policy's settings must share one draft source (the engine builds one draft), "
                         f"got {names}")
    return next(iter(sources), None)


def parse_setting(name: str) -> SpecConfig:
    """A setting in the method grammar, ``off`` (or ``vanilla``) for plain decoding."""
    return OFF if name.strip() == "off" else parse_spec(name, others="off")
