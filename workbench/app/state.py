"""Per-session decoding state: the settings a run was started with, its Engine (with its own KV
cache) and every step trace so far, plus the step being shown.

The model weights are shared by every session (read-only); an Engine and its KV pools belong to
one session. ``Settings.build`` turns the raw values of the page's inputs into validated
``SpecConfig`` / ``SamplingParams`` and prompt ids, raising ``ValueError`` with a message a
user can act on; the UI shows that message instead of failing.
"""

from __future__ import annotations

import math
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

from workbench.engine.config import (DEFAULT_NUM_DRAFT_TOKENS, DEFAULT_NUM_STEPS, DEFAULT_TOPK, EXACT_THRESHOLD,
                                     ConfigError, SpecConfig, check_context)
from workbench.engine.drafts.base import DraftSource, boxes
from workbench.engine.drafts.head import HeadSource
from workbench.engine.drafts.registry import SOURCES, all_boxes, source_of
from workbench.engine.engine import Engine
from workbench.engine.sampling import SamplingParams

MAX_PROMPT_CHARS = 6000
MAX_NEW_TOKENS = 512
# The tree boxes each method reads (linear implies topk and num_draft_tokens; the page keeps the
# boxes' values for eagle2); static reads the tree box or num_draft_tokens (``Settings.static_spec``).
METHOD_BOXES = {"vanilla": (), "linear": ("num_steps",), "eagle2": ("num_steps", "topk", "num_draft_tokens")}


def draft_choices() -> list[tuple[str, str]]:
    """The draft selector's choices, one per registered source: (what the page shows, the value
    ``Settings.draft`` holds: the kind)."""
    return [(s.choice, kind) for kind, s in SOURCES.items()]


def offered_choices(loaded: DraftSource | None) -> list[tuple[str, str]]:
    """The choices the page's selector offers where the app loaded ``loaded`` (its ``--draft``,
    None for nothing): every source that needs nothing loaded, and of those that do (the head, a
    draft model), only the one loaded: the page loads no head or model directory itself, so a
    choice it could not run (``model:DIR`` without ``--draft model:DIR``) is not offered."""
    return [(s.choice, kind) for kind, s in SOURCES.items() if not s.needs.loaded or type(loaded) is s]


def draft_fields(kind: str) -> tuple[str, ...]:
    """The page's inputs a kind's draft source is built from (the selector itself when none)."""
    return (tuple(box.name for box in boxes(SOURCES[kind])) if kind in SOURCES else ()) or ("draft",)


def first_boxes() -> dict:
    """Every source's number boxes (``drafts.base.knob``) at their defaults, by the box's name."""
    return {name: box.default for name, (_, box) in all_boxes().items()}


class InputError(ValueError):
    """Bad input on the page: the message, and the ``Settings`` fields it is about (empty: none
    in particular), so that the page can point at them."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()):
        super().__init__(message)
        self.fields = fields


@dataclass(frozen=True)
class Settings:
    """The page's inputs, as typed (numbers may arrive as floats or None from number boxes): the
    fields below, and every draft source's number boxes (``boxes``), by name. ``of`` and ``values``
    take and give them as one flat mapping, in ``setting_names()`` order."""

    prompt: str = ""
    method: str = "eagle2"
    num_steps: object = DEFAULT_NUM_STEPS
    topk: object = DEFAULT_TOPK
    num_draft_tokens: object = DEFAULT_NUM_DRAFT_TOKENS
    temperature: object = 0.0
    top_p: object = 1.0
    top_k: object = 0
    seed: object = 0
    max_new_tokens: object = 64
    tree: object = ""  # static: rank paths as JSON; empty = EAGLE-1's tree cut to num_draft_tokens
    accept_threshold_single: object = EXACT_THRESHOLD  # below 1: lossy sampling acceptance
    accept_threshold_acc: object = EXACT_THRESHOLD
    chain_rule: str = "target-only"  # sampling acceptance of a linear chain (CHAIN_RULES)
    draft: str = HeadSource.kind  # a kind of ``draft_choices()``: where the drafts come from
    boxes: dict = field(default_factory=first_boxes)  # box name -> value (exit_layers, ngram_min, ...)

    @classmethod
    def of(cls, **values) -> "Settings":
        """From the page's values by name (``setting_names()``); a box not given keeps its default."""
        own = {f.name for f in fields(cls)} - {"boxes"}
        drafted = {k: v for k, v in values.items() if k not in own}
        unknown = set(drafted) - set(all_boxes())
        if unknown:
            raise TypeError(f"Settings has no input {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in values.items() if k in own}, boxes={**first_boxes(), **drafted})

    def values(self) -> dict:
        """The page's values by name, in ``setting_names()`` order."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "boxes"}
        return {**own, **{name: self.boxes.get(name) for name in all_boxes()}}

    def build(self, wb) -> tuple[SpecConfig, SamplingParams, list[int], int]:
        """(spec, sampling, prompt ids, max_new_tokens), or ``InputError`` with the reason and the
        fields it is about."""
        prompt = (self.prompt or "").strip()
        if not prompt:
            raise InputError("The prompt is empty: type a question or pick an example.", ("prompt",))
        if len(prompt) > MAX_PROMPT_CHARS:
            raise InputError(f"The prompt is {len(prompt)} characters long; at most {MAX_PROMPT_CHARS} are accepted.",
                             ("prompt",))
        with _about("max_new_tokens"):
            max_new = _int("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS)
        with _about(*draft_fields(self.draft)):
            draft = self.draft_source(wb)
        with _about(*SPEC_FIELDS, pick=True):
            spec = self.spec(draft)
        with _about("temperature", "top_p", "top_k", "seed", pick=True):
            sampling = SamplingParams(temperature=_number("temperature", self.temperature),
                                      top_p=_number("top_p", self.top_p), top_k=_int("top_k", self.top_k, 0, None),
                                      seed=_int("seed", self.seed, 0, None))
        with _about("accept_threshold_single", "accept_threshold_acc"):
            spec.check_sampling(sampling.greedy)
        ids = wb.encode(prompt)
        with _about("prompt", "max_new_tokens"):
            check_context(spec, wb.target.config.max_position_embeddings, len(ids), max_new)
        return spec, sampling, ids, max_new

    def spec(self, draft: DraftSource = HeadSource()) -> SpecConfig:
        """The method, its tree knobs, the accept thresholds and ``draft`` (linear: topk 1, D =
        num_steps + 1, set for you: the page keeps its topk / num_draft_tokens boxes for eagle2;
        static: the tree box, see ``static_spec``)."""
        thresholds = dict(accept_threshold_single=_number("accept_threshold_single", self.accept_threshold_single),
                          accept_threshold_acc=_number("accept_threshold_acc", self.accept_threshold_acc), draft=draft,
                          chain_rule=self.chain_rule)
        if self.method == "static":
            return self.static_spec(thresholds)
        knobs = {name: _int(name, getattr(self, name), None, None) for name in METHOD_BOXES.get(self.method, ())}
        return SpecConfig.from_knobs(self.method, **knobs, **thresholds)

    def static_spec(self, thresholds: dict | None = None) -> SpecConfig:
        """The static tree: the tree box's rank paths, which must hold num_draft_tokens nodes
        (root included; ValueError otherwise), else EAGLE-1's tree at num_draft_tokens (num_steps
        and topk follow from the shape; the tree box is read by static only); exact acceptance and
        the head unless ``thresholds`` (with ``draft``) are given."""
        thresholds = thresholds or {}
        text = str(self.tree or "").strip()
        budget = _int("num_draft_tokens", self.num_draft_tokens, None, None)
        if not text:
            return SpecConfig.from_knobs("static", num_draft_tokens=budget, **thresholds)
        spec = SpecConfig.from_knobs("static", tree=text, **thresholds)
        if spec.num_draft_tokens != budget:  # Step and Compare both refuse: the page never overrides a box
            raise ValueError(f"The tree box holds a static tree of {spec.num_draft_tokens} tokens (root included), "
                             f"but num_draft_tokens is {budget}: set num_draft_tokens to {spec.num_draft_tokens}, "
                             "or empty the tree box.")
        return spec

    def draft_source(self, wb, kind: str | None = None) -> DraftSource:
        """The selected draft source (``kind``: another of ``draft_choices()`` with this page's
        N and windows), checked against the loaded workbench: one that needs a head or a draft
        model (``Needs``) is the one the app was started with; the fields of the others come from
        the page's boxes (``drafts.base.knob``) and must fit the target (``check_target``)."""
        source = source_of(self.draft if kind is None else kind)  # ValueError naming the kinds for an unknown one
        if source.needs.loaded:
            loaded = wb.loaded_draft
            if type(loaded) is not source:
                raise ValueError(f"The {source.choice} is not loaded (draft {wb.draft_source}): pick another draft "
                                 f"source, or start the app with it (python app.py --draft {source.grammar}).")
            return loaded
        draft = source(**{box.field: _int(box.words, self.boxes.get(box.name), None, None) for box in boxes(source)})
        draft.check_target(wb.target.config)
        return draft


def acceptance_note(threshold_single, threshold_acc) -> str:
    """What the page prints beside the accept thresholds: exact at 1 (and what below 1 would
    cost), **lossy** below; either way it says that below 1 the output no longer follows the
    target's distribution."""
    try:
        values = [float(threshold_single), float(threshold_acc)]
    except (TypeError, ValueError):
        return "the thresholds must be numbers in (0, 1]"
    if min(values) < EXACT_THRESHOLD:
        return ("**lossy**: accepts more drafts, and the output no longer follows the target's distribution "
                "(sampling only)")
    return ("exact: the output follows the target's distribution; below 1 (SGLang's lossy thresholds) more drafts "
            "are accepted and the output no longer follows the target's distribution")


# The fields each part of ``Settings.build`` reads, for the page to point at the one a message is about.
SPEC_FIELDS = ("method", "num_steps", "topk", "num_draft_tokens", "tree", "accept_threshold_single",
               "accept_threshold_acc", "chain_rule", "draft")
FIELD_WORDS = {"tree": ("tree", "static tree"), "draft": ("draft", "draft source")}  # else the field's own name


@contextmanager
def _about(*names: str, pick: bool = False):
    """Re-raise a ValueError of the block as an ``InputError`` about ``names``: a ``ConfigError``
    about the field it names; another, with ``pick``, about the one of them the message names
    first (none when it names none)."""
    try:
        yield
    except InputError:
        raise
    except ConfigError as err:  # the config names its field: the box of that name, if the page has one here
        raise InputError(str(err), (err.field,) if err.field in names else ()) from None
    except ValueError as err:
        raise InputError(str(err), named_first(str(err), names) if pick else names) from None


def named_first(message: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """The field of ``names`` that ``message`` mentions first (as a whole word), or ()."""
    found = []
    for name in names:
        for word in FIELD_WORDS.get(name, (name,)):
            hit = re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", message)
            if hit:
                found.append((hit.start(), name))
    return (min(found)[1],) if found else ()


def setting_names() -> tuple[str, ...]:
    """The names the page's input components go by, in order: ``Settings``' fields, then every
    registered draft source's number boxes."""
    return tuple(f.name for f in fields(Settings) if f.name != "boxes") + tuple(all_boxes())


def _number(name: str, value) -> float:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{name} is empty: enter a number.")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}.") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    return x


def _int(name: str, value, lo: int | None, hi: int | None) -> int:
    x = _number(name, value)
    if x != int(x):
        raise ValueError(f"{name} must be a whole number, got {value!r}.")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        bounds = f"in {lo}..{hi}" if lo is not None and hi is not None else f">= {lo}" if lo is not None \
            else f"<= {hi}"
        raise ValueError(f"{name} must be {bounds}, got {int(x)}.")
    return int(x)


@dataclass
class Session:
    """One browser session's run. ``cursor`` indexes ``traces`` (the step on screen)."""

    settings: Settings
    prompt_text: str
    engine: Engine
    traces: list[dict] = field(default_factory=list)
    cursor: int = -1
    bench_note: str = ""  # HTML: what the benchmark measured per task for this run's draft ("": nothing)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def start(cls, wb, settings: Settings, bench=None) -> "Session":
        """A new run: validated settings, a fresh Engine with the prompt queued (nothing run yet);
        ``bench``: a ``draft_bench.DraftBench`` whose per-task τ the page shows beside the run's."""
        spec, sampling, ids, max_new = settings.build(wb)
        engine = wb.engine(spec, sampling, trace=True)
        engine.add_requests([ids], max_new)
        note = bench.note_html(spec) if bench is not None and spec.speculative else ""
        return cls(settings, settings.prompt.strip(), engine, bench_note=note)

    @property
    def current(self) -> dict | None:
        """The trace of the step on screen (None before the first step)."""
        return self.traces[self.cursor] if self.traces else None

    @property
    def at_end(self) -> bool:
        return self.cursor == len(self.traces) - 1

    def step(self) -> bool:
        """Show the next step: a recorded one after Back, else run the engine once. False when
        the run has finished and there is nothing further to show."""
        with self.lock:
            if not self.at_end:
                self.cursor += 1
                return True
            if self.engine.done:
                return False
            self.traces.extend(self.engine.step())  # B = 1: one trace per step
            self.cursor = len(self.traces) - 1
            return True

    def back(self) -> bool:
        """Show the previous step; False at the first."""
        with self.lock:
            if self.cursor <= 0:
                return False
            self.cursor -= 1
            return True

    def goto(self, step: int) -> None:
        """Show step ``step`` (1-based, as the slider), clamped to what has been recorded."""
        with self.lock:
            if self.traces:
                self.cursor = max(0, min(int(step) - 1, len(self.traces) - 1))

    @property
    def finish_reason(self) -> str | None:
        """"stop", "length" or None while running."""
        return self.engine.requests[0].finish_reason
