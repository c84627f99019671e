"""A draft source written only for the tests, as a new source is written: one module, one
integer field. ``repeat[:N]`` drafts a chain of the request's last token, repeated N times (at
most ``num_steps``): no model, no KV. ``tests/test_drafts_registry.py`` registers it with one
line (``SOURCES["repeat"] = RepeatSource``) and follows it through every list a user reads."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.engine.draft import DraftPhase
from workbench.engine.drafts.base import DraftSource, Drafter, knob
from workbench.engine.tree import Candidates


@dataclass(frozen=True)
class RepeatSource(DraftSource):
    copies: int = knob(2, "repeat_copies", "repeat copies")  # the chain's length, at most num_steps

    kind = "repeat"
    grammar = "repeat[:N]"
    choice = "repeat the last token"
    colour = "#F0E442"  # yellow
    model_free = True

    def __post_init__(self) -> None:
        if not isinstance(self.copies, int) or not 1 <= self.copies <= 16:
            raise ValueError(f"repeat:N repeats the last token N times: N must be in 1..16, got {self.copies}")

    @classmethod
    def parse(cls, arg: str | None) -> RepeatSource:
        if arg is None:
            return cls()
        if not arg.isdigit():
            raise ValueError(f"draft source 'repeat:{arg}': write it as repeat:N")
        return cls(int(arg))

    @property
    def name(self) -> str:
        return f"repeat:{self.copies}"

    def label(self, num_layers: int | None = None) -> str:
        return f"repeat (the last token {self.copies} times)"

    def draft_cost(self, timers) -> list[tuple[int, float]]:
        return [(rows, 0.01 * self.copies) for rows in (1, 64)]  # a stand-in: N list appends per request

    def build(self, target, draft) -> RepeatDraft:
        return RepeatDraft(self)


class RepeatDraft(Drafter):
    """No forward, no KV: each request's tree is a chain of copies of its last token."""

    def __init__(self, source: RepeatSource):
        self.copies, self.name = source.copies, source.name

    def grow(self, reqs, table, *, extended, spec, chain, generator) -> DraftPhase:
        trees = []
        for r in reqs:
            tree, last = Candidates(), (r.prompt_ids + r.output_ids)[-1]
            for depth in range(1, min(self.copies, spec.num_steps) + 1):
                # parent: the node before (-1: the root)
                tree.add(last, 1.0, score=1.0, parent=depth - 2, depth=depth, rank=0)
            trees.append(tree)
        return DraftPhase(trees, [[] for _ in reqs], [[] for _ in reqs])
