"""Where the drafts come from (``--draft``): the EAGLE head, an n-gram lookup, or an early exit.

==================  ========================================================================
``head``            the EAGLE head (which one is a loading choice: ``--draft DIR`` or
                    ``random[:SEED]``; default the shipped head). Its own KV, an extend per step.
``ngram[:MIN-MAX]`` no model: continuations of the longest suffix (MIN..MAX tokens) of the
                    request's own tokens found earlier in them (``ngram.py``). No forward, no KV.
``exit:N``          self-speculation: the target's first N layers, its final norm and its LM
                    head (``drafts.ExitDraft``). The committed K/V of those layers is the
                    target's own: no pool, no extend. 1 <= N < the target's layer count.
``model:DIR``       a separate small model with the target's tokenizer (a local HF Llama-family
                    directory): its own KV, an extend per step (``drafts.ModelDraft``). No such
                    pair ships with the workbench; the tests use a tiny random one.
==================  ========================================================================

A ``DraftSource`` is part of ``SpecConfig`` (``draft``): the engine builds the draft from it,
the traces name it, and the benchmark's methods carry it (``eagle2:D/S/K@ngram``).
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("head", "ngram", "exit", "model")
DEFAULT_MIN_MATCH = 1  # SGLang's NGRAM defaults: match windows of 1..12 tokens
DEFAULT_MAX_MATCH = 12
MAX_MATCH = 32
GRAMMAR = "a head directory, random[:SEED], ngram[:MIN-MAX], exit:N or model:DIR"


@dataclass(frozen=True)
class DraftSource:
    kind: str = "head"
    num_layers: int | None = None  # exit: the target layers the draft runs
    min_match: int = DEFAULT_MIN_MATCH  # ngram: the shortest suffix that may match
    max_match: int = DEFAULT_MAX_MATCH  # ngram: the longest suffix tried
    path: str | None = None  # model: the draft model's directory

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown draft source {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.kind == "exit":
            if not isinstance(self.num_layers, int) or self.num_layers < 1:
                raise ValueError(f"exit:N drafts with the target's first N layers: N must be >= 1, "
                                 f"got {self.num_layers}")
        elif self.num_layers is not None:
            raise ValueError(f"a layer count is for exit:N, not for the {self.kind} draft")
        if (self.kind == "model") != bool(self.path):
            raise ValueError("model:DIR names the draft model's directory; only that draft takes one")
        if not 1 <= self.min_match <= self.max_match <= MAX_MATCH:
            raise ValueError(f"n-gram match windows must satisfy 1 <= MIN <= MAX <= {MAX_MATCH}, "
                             f"got {self.min_match}-{self.max_match}")

    @property
    def name(self) -> str:
        """As ``--draft`` writes it: ``head``, ``ngram:1-12``, ``exit:28``."""
        if self.kind == "exit":
            return f"exit:{self.num_layers}"
        if self.kind == "ngram":
            return f"ngram:{self.min_match}-{self.max_match}"
        if self.kind == "model":
            return f"model:{self.path}"
        return "head"

    @property
    def model_free(self) -> bool:
        """No draft distribution: the tree is handed over whole (q is a point mass)."""
        return self.kind == "ngram"

    def check_target(self, num_layers: int) -> None:
        """``exit:N`` needs 1 <= N < the target's layers (N = all of them is the target itself)."""
        if self.kind == "exit" and not self.num_layers < num_layers:
            raise ValueError(f"{self.name}: the target has {num_layers} layers, so N must be in 1..{num_layers - 1}")


def parse_draft(text: str) -> DraftSource | None:
    """``ngram``, ``ngram:MIN-MAX``, ``exit:N`` or ``model:DIR`` -> a ``DraftSource``; None for anything else
    (a head directory or ``random[:SEED]``: the head, chosen when loading). ValueError when the
    text starts like one of ours but does not parse."""
    kind, _, arg = text.strip().partition(":")
    if kind == "ngram":
        if not arg:
            return DraftSource("ngram")
        lo, dash, hi = arg.partition("-")
        if not (dash and lo.isdigit() and hi.isdigit()):
            raise ValueError(f"draft source {text!r}: write the n-gram match windows as ngram:MIN-MAX, e.g. ngram:1-12")
        return DraftSource("ngram", min_match=int(lo), max_match=int(hi))
    if kind == "exit":
        if not arg.isdigit():
            raise ValueError(f"draft source {text!r}: write the early exit as exit:N, N the target layers it runs")
        return DraftSource("exit", num_layers=int(arg))
    if kind == "model":
        if not arg:
            raise ValueError(f"draft source {text!r}: write the draft model as model:DIR, DIR its directory")
        return DraftSource("model", path=arg)
    return None
