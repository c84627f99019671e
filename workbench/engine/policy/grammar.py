"""The one grammar of speculation policies, read by ``generate --policy``, ``bench load
--policies``, the app's Load tab and ``Workbench.engine(policy=...)``: the same words mean the
same policy everywhere.

A policy is written ``WORD`` or ``WORD:ARG``, WORD one of ``KINDS`` (``off``, ``fixed``,
``schedule``, ``adaptive``, ``auto``), or as a method name alone (``eagle2:4/3/2``,
``linear:3@ngram``: ``fixed`` at that setting). Each kind is a class of this package that says
how it is written (``grammar``, ``about``), what a bare WORD means (``default``), whether it
weighs settings by this machine's measured step cost (``needs_cost``) and how it is built from
its ARG (``from_text``). A list of policies (``parse_policies``) is separated by commas, or by
semicolons when one of them holds commas itself (a schedule, a ladder).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from workbench.engine.config import METHODS, SpecConfig
from workbench.engine.drafts.base import DraftSource
from workbench.engine.policy.adaptive import Adaptive
from workbench.engine.policy.auto import Auto, StepCost
from workbench.engine.policy.base import SpecPolicy, draft_source_of
from workbench.engine.policy.fixed import Fixed, Off
from workbench.engine.policy.schedule import Schedule


class PolicyKind(Protocol):
    """A policy class as the grammar reads it (``SpecPolicy`` is what its instances do)."""

    name: str  # the WORD, and what traces call the policy
    grammar: str  # how it is written: "adaptive[:NAME,NAME,...]"
    about: str  # what it does, in a phrase, for help texts and errors
    default: str  # the ARG of a bare WORD ("" when it has none)
    needs_cost: bool  # weighs settings by this machine's step cost: its ``cost`` is set before the first step

    def from_text(self, arg: str, spec: SpecConfig | None = None) -> SpecPolicy:
        """A fresh policy from ARG (``spec``: the method given beside it); ValueError if malformed."""


KINDS: tuple[PolicyKind, ...] = (Off, Fixed, Schedule, Adaptive, Auto)  # what help texts, errors and docs list
POLICIES = tuple(k.name for k in KINDS)
POLICY_GRAMMAR = ("; ".join(f"{k.grammar} ({k.about})" for k in KINDS)
                  + "; or a method name alone for one fixed setting (NAME: a method name)")


@dataclass(frozen=True)
class NamedPolicy:
    """A policy as written: ``name`` as typed, its ``kind`` and ``arg`` (a bare WORD's default
    filled in); ``spec`` is what a bare ``fixed`` runs. ``build()`` makes a fresh policy each
    time (a policy that learns keeps state)."""

    name: str
    kind: PolicyKind
    arg: str
    spec: SpecConfig | None = None

    @property
    def text(self) -> str:
        """In full: ``adaptive:linear:1,eagle2:4/3/2,eagle2:8/5/4`` for ``adaptive``."""
        return f"{self.kind.name}:{self.arg}" if self.arg else self.kind.name

    @property
    def needs_cost(self) -> bool:
        return self.kind.needs_cost

    def build(self, cost: StepCost | None = None) -> SpecPolicy:
        """A fresh policy; ``cost``: the step cost a policy that ``needs_cost`` weighs by (it may
        come later, but before the first step)."""
        policy = self.kind.from_text(self.arg, self.spec)
        if self.needs_cost:
            policy.cost = cost
        return policy

    def settings(self) -> tuple[SpecConfig, ...]:
        return tuple(self.build().settings())

    @property
    def draft(self) -> DraftSource | None:
        """The draft source its speculative settings share (None: it never speculates)."""
        return draft_source_of(self.settings())


def read_policy(text: str, spec: SpecConfig | None = None) -> NamedPolicy:
    """``text`` in the grammar, checked by building it once; ValueError naming what is wrong."""
    name = text.strip()
    word, _, arg = name.partition(":")
    kind = next((k for k in KINDS if k.name == word), None)
    if kind is None and word.partition("@")[0] in METHODS:
        kind, arg = Fixed, name  # a method name alone: that one setting
    if kind is None:
        raise ValueError(f"unknown speculation policy {name!r}; write {POLICY_GRAMMAR}")
    named = NamedPolicy(name, kind, arg.strip() or kind.default, spec)
    try:
        named.build()
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None
    return named


def parse_policy(text: str, spec: SpecConfig | None = None, cost: StepCost | None = None) -> SpecPolicy:
    """A fresh policy from ``text`` (``read_policy``), weighing by ``cost`` if it needs one."""
    return read_policy(text, spec).build(cost)


def parse_policies(text: str, spec: SpecConfig | None = None) -> list[NamedPolicy]:
    """``off,eagle2:4/3/2,adaptive``: policies separated by commas, or by semicolons when one of
    them holds commas itself. ValueError naming the policy at fault."""
    sep = ";" if ";" in text else ","
    names = [n.strip() for n in text.split(sep) if n.strip()]
    if not names:
        raise ValueError("no policy named")
    if len(set(names)) < len(names):
        raise ValueError(f"a policy is named twice in {text!r}")
    out = []
    for name in names:
        try:
            out.append(read_policy(name, spec))
        except ValueError as err:
            split = sep == "," and (name[:1].isdigit() or name.startswith(("schedule:", "adaptive:", "auto:")))
            hint = " (a schedule or a ladder holds commas: separate the policies with ';')" if split else ""
            raise ValueError(f"{err}{hint}") from None
    return out
