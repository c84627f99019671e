"""The draft sources, one line each: the CLI's ``--draft`` help, the app's selector, the bench's
methods, ``frameworks`` and the docs all iterate ``SOURCES``. A new source is a module of this
package with a ``Source`` (``base.py``) and its line here."""

from __future__ import annotations

from workbench.engine.drafts.base import Source
from workbench.engine.drafts.exit import ExitSource
from workbench.engine.drafts.head import HeadSource
from workbench.engine.drafts.model import ModelSource
from workbench.engine.drafts.ngram import NgramSource

SOURCES: dict[str, Source] = {s.kind: s for s in (HeadSource(), NgramSource(), ExitSource(), ModelSource())}


def source_of(kind: str) -> Source:
    if kind not in SOURCES:
        raise ValueError(f"unknown draft source {kind!r}; choose one of {', '.join(SOURCES)}")
    return SOURCES[kind]


def grammar() -> str:
    """Every source as ``--draft`` writes it: "a head directory, random[:SEED], ngram[:MIN-MAX], ..."."""
    words = [s.grammar for s in SOURCES.values()]
    return ", ".join(words[:-1]) + " or " + words[-1]


def make_draft(spec, target, draft):
    """The drafter ``spec.draft`` names, for ``target``; ``draft`` is what was loaded for it
    (the EAGLE head, the draft model for ``model:DIR``, None for the others)."""
    return source_of(spec.draft.kind).build(spec.draft, target, draft)
