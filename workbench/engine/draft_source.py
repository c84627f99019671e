"""Where the drafts come from (``--draft``): the value a ``SpecConfig`` carries.

A ``DraftSource`` is a kind and that kind's fields; everything a kind means (how it parses,
what it checks, what it is called here and in SGLang and vLLM, what it builds) lives in its
module under ``drafts/`` and is found through ``drafts.registry.SOURCES``: ``head`` (the EAGLE
head), ``ngram[:MIN-MAX]``, ``exit:N`` and ``model:DIR``. The engine builds the draft from it,
the traces name it, and the benchmark's methods carry it (``eagle2:D/S/K@ngram``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from workbench.engine.drafts.ngram import DEFAULT_MAX_MATCH, DEFAULT_MIN_MATCH
from workbench.engine.drafts.registry import SOURCES, grammar, source_of

GRAMMAR = grammar()


@dataclass(frozen=True)
class DraftSource:
    kind: str = "head"
    num_layers: int | None = None  # exit: the target layers the draft runs
    min_match: int = DEFAULT_MIN_MATCH  # ngram: the shortest suffix that may match
    max_match: int = DEFAULT_MAX_MATCH  # ngram: the longest suffix tried
    path: str | None = None  # model: the draft model's directory

    def __post_init__(self) -> None:
        source = source_of(self.kind)
        source.check(self)
        if self.kind != "exit" and self.num_layers is not None:
            raise ValueError(f"a layer count is for exit:N, not for the {self.kind} draft")
        if self.kind != "model" and self.path:
            raise ValueError("model:DIR names the draft model's directory; only that draft takes one")

    @property
    def source(self):
        """This kind's ``drafts.base.Source``."""
        return source_of(self.kind)

    @property
    def name(self) -> str:
        """As ``--draft`` writes it: ``head``, ``ngram:1-12``, ``exit:28``."""
        return self.source.name(self)

    @property
    def model_free(self) -> bool:
        """No draft distribution: the tree is handed over whole (q is a point mass)."""
        return self.source.model_free

    def label(self, num_layers: int | None = None) -> str:
        """In the pages' words ("EAGLE head", "early exit (exit:28: the first 28 of 30 layers)")."""
        return self.source.label(self, num_layers)

    def check_target(self, num_layers: int) -> None:
        """ValueError unless this source fits a target of ``num_layers`` layers (``exit:N``: N < them)."""
        self.source.check_target(self, num_layers)


FIELDS = tuple(f.name for f in fields(DraftSource))


def parse_draft(text: str) -> DraftSource | None:
    """``ngram``, ``ngram:MIN-MAX``, ``exit:N``, ``model:DIR`` (any registered kind) -> a
    ``DraftSource``; None for anything else (a head directory or ``random[:SEED]``: the head,
    chosen when loading). ValueError when the text starts like one of ours but does not parse."""
    kind, colon, arg = text.strip().partition(":")
    if kind not in SOURCES:
        return None
    values = SOURCES[kind].parse(arg if colon else None)
    return None if values is None else DraftSource(kind, **values)
