"""``off`` and ``fixed``: the policies of an engine given one setting. ``Off`` decodes plainly at
every step; ``Fixed`` runs one setting at every step (``fixed:NAME``, a bare method name such as
``eagle2:4/3/2``, or ``fixed`` alone for the method given beside it)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.engine.config import SpecConfig
from workbench.engine.policy.base import OFF, Choice, parse_setting
from workbench.engine.request import Request


class Off:
    """Plain decoding at every step."""

    name = "off"
    grammar = "off"
    about = "plain decoding at every step"
    default = ""
    needs_cost = False

    @classmethod
    def from_text(cls, arg: str, spec: SpecConfig | None = None) -> Off:
        if arg:
            raise ValueError("off takes no argument")
        return cls()

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
    grammar = "fixed[:NAME]"
    about = "one setting at every step; bare: the method given beside it"
    default = ""
    needs_cost = False

    @classmethod
    def from_text(cls, arg: str, spec: SpecConfig | None = None) -> Fixed | Off:
        """``arg`` a setting's name (``off`` too); empty: ``spec``, the method given beside it."""
        if not arg and spec is None:
            raise ValueError("policy fixed runs the method given with it: name one, fixed:NAME")
        return policy_for(parse_setting(arg) if arg else spec)

    def settings(self) -> tuple[SpecConfig, ...]:
        return (self.spec,)

    def choose(self, batch: list[Request]) -> Choice:
        return Choice(self.name, self.spec, "fixed")

    def observe(self, choice: Choice, batch: list[Request]) -> None:
        pass


def policy_for(spec: SpecConfig) -> Off | Fixed:
    """What an engine given only a ``SpecConfig`` runs."""
    return Fixed(spec) if spec.speculative else Off()
