"""The draft sources, one line each: ``--draft`` and its help, the app's selector and number
boxes, the bench's methods (``NAME@SOURCE``), the step cost, the figures' colours, frameworks
and the docs all iterate ``SOURCES``. A new source is a module of this package with a
``DraftSource`` (``base.py``) and its line here."""

from __future__ import annotations

from workbench.engine.drafts.base import Box, DraftSource, boxes
from workbench.engine.drafts.exit import ExitSource
from workbench.engine.drafts.head import HeadSource, check_weights
from workbench.engine.drafts.model import ModelSource
from workbench.engine.drafts.ngram import NgramSource
from workbench.models.config import ModelConfig

SOURCES: dict[str, type[DraftSource]] = {s.kind: s for s in (HeadSource, NgramSource, ExitSource, ModelSource)}


def source_of(kind: str) -> type[DraftSource]:
    if kind not in SOURCES:
        raise ValueError(f"unknown draft source {kind!r}; choose one of {', '.join(SOURCES)}")
    return SOURCES[kind]


def grammar() -> str:
    """Every source as ``--draft`` writes it: "a head directory, random[:SEED], ngram[:MIN-MAX], ..."."""
    words = [s.grammar for s in SOURCES.values()]
    return ", ".join(words[:-1]) + " or " + words[-1]


def parse_draft(text: str) -> DraftSource | None:
    """``head``, ``ngram``, ``ngram:MIN-MAX``, ``exit:N``, ``model:DIR`` (any registered kind) ->
    its source; None for anything else (a head directory or ``random[:SEED]``: the head's
    weights, chosen when loading). ValueError when the text starts like one of ours but does
    not parse."""
    kind, colon, arg = text.strip().partition(":")
    return SOURCES[kind].parse(arg if colon else None) if kind in SOURCES else None


def check_draft(text: str, target: ModelConfig | None = None) -> DraftSource | None:
    """``--draft`` checked before anything loads: the source it names, fitting ``target`` when
    given, or None for the head's weights (``head.check_weights``); ValueError saying what is
    wrong, naming the choices."""
    source = parse_draft(text)
    if source is None:
        try:
            check_weights(text)
        except ValueError as err:
            raise ValueError(f"{err} (give {grammar()})") from None
    elif target is not None:
        source.check_target(target)
    return source


def loads_nothing() -> type[DraftSource]:
    """The first source that drafts with nothing loaded beside the target (the n-gram lookup)."""
    return next(s for s in SOURCES.values() if not s.needs.loaded)


def all_boxes() -> dict[str, tuple[type[DraftSource], Box]]:
    """Every source's number boxes, by the box's name (the app's inputs), in the sources' order."""
    return {box.name: (s, box) for s in SOURCES.values() for box in boxes(s)}


def source_named(name: str) -> type[DraftSource] | None:
    """The source of a run or trace named as ``--draft`` writes it (``head``, ``ngram:1-12``,
    ``model:DIR``); None for another name."""
    return SOURCES.get(name.partition(":")[0])

