"""The Step-through page's event functions: Step, Back, the step slider, Run to end, autoplay,
Reset, the walk's slider and replay, and taking the suggestion after a step that accepted nothing
(a change of settings from why the step stopped; never the prompt).

Every Step-like event returns (session, *``VIEWS``, *``PAGE``): the views of one step, drawn by
``views.render``, and the parts of the page around them. The status line always says what the
action did: the step shown, or the message of an ``InputError`` naming the field (which the page
outlines, opening the settings when the field is there).

Autoplay is a ``gr.Timer`` whose ticks step while the page's ``Autoplay`` flag is on. The flag
is one object per page, changed in place, never replaced: Gradio writes an event's outputs one by
one, so a flag returned as an output could be read half-written by a tick (a fresh run would
start after Reset). Only the checkbox (``play``) turns it on; unticking it, Reset, a run's end
and bad input turn it off. A tick after it went off does nothing, and one whose step was under
way when Reset came shows nothing: no step appears after Reset.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gradio as gr

from workbench.app.guide import cut_words, miss_line, stop_line, suggest
from workbench.app.state import InputError, Session, Settings, setting_names
from workbench.app.views import VIEWS, blank, error, render, walk_views
from workbench.engine.drafts.base import boxes
from workbench.engine.drafts.registry import SOURCES, all_boxes
from workbench.viz.tokens import show
from workbench.viz.walk import walk_moves

ANIMATE_S = 0.6
PAGE = ("bench", "suggest", "settings", "tabs")  # Step-like outputs after the views
DRAFT_GROUP = "Prompt examples and draft source"
# Where each input sits, for the status line: (its label, its group in the settings; None: on top);
# the draft sources' number boxes: ``where``.
FIELDS = {
    "prompt": ("Prompt", None), "method": ("method", "Method and tree"), "num_steps": ("num_steps", "Method and tree"),
    "topk": ("topk", "Method and tree"), "num_draft_tokens": ("num_draft_tokens", "Method and tree"),
    "tree": ("static tree", "Method and tree"), "temperature": ("temperature", "Sampling and length"),
    "top_p": ("top-p", "Sampling and length"), "top_k": ("top-k", "Sampling and length"),
    "seed": ("seed", "Sampling and length"), "max_new_tokens": ("max_new_tokens", "Sampling and length"),
    "accept_threshold_single": ("accept threshold single", "Sampling and length"),
    "accept_threshold_acc": ("accept threshold acc", "Sampling and length"),
    "chain_rule": ("chain rule", "Sampling and length"),
    "draft": ("draft source", DRAFT_GROUP),
}


@dataclass
class Autoplay:
    """A page's autoplay: on or off, and how many times Reset was pressed (a tick that began
    before a Reset shows nothing). Held in a ``gr.State`` and changed in place."""

    on: bool = False
    resets: int = 0


def elem_id(name: str) -> str:
    """The element id of an input (the status line outlines the one an error is about)."""
    return "draft-source" if name == "draft" else name.replace("_", "-")


def where(name: str) -> tuple[str, str | None] | None:
    """(an input's label, its group in the settings; None: on top), or None for no input of the page."""
    if name in FIELDS:
        return FIELDS[name]
    drafted = all_boxes().get(name)
    return (drafted[1].words, DRAFT_GROUP) if drafted else None


def settings_label(values: dict) -> str:
    """The settings accordion's label: the values in use, as typed (field -> raw value)."""
    v = values
    method = v.get("method")
    knobs = {"eagle2": f" · num_steps {v.get('num_steps')} · topk {v.get('topk')} · num_draft_tokens "
                       f"{v.get('num_draft_tokens')}",
             "linear": f" · num_steps {v.get('num_steps')}",
             "static": f" · tree {v.get('tree')}" if str(v.get("tree") or "").strip() else
             f" · num_draft_tokens {v.get('num_draft_tokens')}"}.get(method, "")
    sampling = "greedy" if _is_zero(v.get("temperature")) else f"temperature {v.get('temperature')}"
    drafted = f" · draft: {draft_words(v)}" if method != "vanilla" else ""
    return f"Settings: {method}{knobs} · {sampling}{drafted} · max_new_tokens {v.get('max_new_tokens')}"


def draft_words(values: dict) -> str:
    """The draft source the raw values select, for the accordion's label: as ``--draft`` writes
    it when its boxes hold a valid source (``exit:28``, ``ngram:1-12``), else the selector's
    choice with the boxes as typed."""
    kind = values.get("draft")
    if kind not in SOURCES:
        return str(kind)
    source, fields = SOURCES[kind], boxes(SOURCES[kind])
    try:
        return source(**{b.field: _whole(values.get(b.name)) for b in fields}).name if fields else source.choice
    except (TypeError, ValueError):
        typed = ", ".join(f"{b.words} {values.get(b.name)}" for b in fields)
        return f"{source.choice} ({typed})"


def _whole(x) -> int:
    """``x`` as a whole number; ValueError (or TypeError) when it is none."""
    if float(x) != int(float(x)):
        raise ValueError(f"{x!r} is not a whole number")
    return int(float(x))


def _is_zero(x) -> bool:
    try:
        return float(x) == 0
    except (TypeError, ValueError):
        return False


def field_error(err: InputError) -> str:
    """The status line for bad input: the message, the field(s) it is about and where they sit;
    an empty span per field, classed ``wb-bad-<element id>``, which the page's CSS outlines (the
    status line's sanitiser keeps classes, not data attributes)."""
    fields = [f for f in err.fields if where(f) is not None]
    if not fields:
        return error(str(err))
    named = " and ".join(f"**{where(f)[0]}**" for f in fields)
    group = where(fields[0])[1]
    place = f" (under Settings › {group})" if group else ""
    marks = "".join(f"<span class='wb-bad-{elem_id(f)}'></span>" for f in fields)
    stop = "" if str(err).endswith((".", "!", "?")) else "."
    return f"{error(str(err))}{stop} Check {named}{place}.{marks}"


def step_line(session: Session) -> str:
    """What the step on screen did, in a few words, for the status line."""
    tr = session.current
    if tr["kind"] == "prefill":
        return (f"Step {tr['step']}: the prefill read the {tr['prompt_len']} prompt tokens in one forward and emitted "
                "the first token. Press Step again to draft and verify a tree.")
    if tr["kind"] == "decode":
        return f"Step {tr['step']}: plain decoding, one token."
    cut = cut_words(tr)  # the end of the output cut the walk's tokens: say what was kept
    if cut:
        return f"{cut}."
    n = len(tr["accept"]["accepted"])
    return f"Step {tr['step']}: {n} draft(s) accepted, then the bonus `{show(tr['accept']['bonus']['text'])}`."


class StepEvents:
    """Event functions of one page (the loaded workbench, the bench's per-task τ and speedups)."""

    def __init__(self, wb, bench=None):
        self.wb, self.bench = wb, bench  # bench: draft_bench.DraftBench or None
        self.names = setting_names()

    def settings(self, values) -> Settings:
        """The page's input values (in ``Settings`` field order) as ``Settings``, by name."""
        return Settings.of(**dict(zip(self.names, values, strict=True)))

    def _ensure(self, session: Session | None, values: tuple) -> tuple[Session | None, str | InputError]:
        """The session to step: the current one, or a new run when there is none or the inputs
        changed. Returns (session, message), or (None, the InputError) for bad input."""
        settings = self.settings(values)
        if session is not None and session.settings == settings:
            return session, ""
        try:
            fresh = Session.start(self.wb, settings, self.bench)
        except InputError as err:
            return None, err
        except ValueError as err:
            return None, InputError(str(err))
        return fresh, ("Inputs changed: started a new run." if session is not None else "Started a new run.")

    def show(self, session: Session | None, message: str | InputError = "", select: bool = True) -> tuple:
        """(session, *VIEWS, *PAGE) for the step on screen; ``message``: what the action did, or
        the bad input (the views keep the last good step). ``select``: bring the Step-through tab
        forward (not for autoplay's ticks)."""
        bad = isinstance(message, InputError)
        offer = None if bad else self.suggestion(session)
        status = field_error(message) if bad else self.status(session, message, offer)
        opened = bad and any((where(f) or (None, None))[1] for f in message.fields)
        page = {"bench": session.bench_note if session else "",
                "suggest": gr.Button(offer.button() if offer else "Try", visible=offer is not None),
                "settings": gr.Accordion(open=True) if opened else gr.Accordion(open=False) if select and not bad
                else gr.skip(),  # a step folds the settings away: the tree under them stays in view
                "tabs": gr.Tabs(selected="step") if select else gr.skip()}
        return (session, *render(session, self.wb, status), *(page[k] for k in PAGE))

    def status(self, session: Session | None, message: str, offer) -> str:
        """The status line after a good action: the message, what the step on screen did (a
        speculative step: why its walk stopped, ``guide.stop_line``), and after a step that
        accepted nothing, what the bench suggests."""
        parts = [message] if message else []
        if session is not None and session.current is not None:
            parts.append(stop_line(session.current) or step_line(session))
            if offer is not None:
                parts.append(offer.reason)
        return " ".join(parts)

    def suggestion(self, session: Session | None):
        """What to try after a step that accepted nothing, from why it stopped (``guide.suggest``;
        None when the step accepted something, or when the run already has those settings)."""
        if session is None or not miss_line(session.current):
            return None
        offer = suggest(session.current, session.engine.spec, self.bench, self.runnable)
        values = session.settings.values()
        same = offer is not None and all(values.get(k) == v for k, v in offer.changes.items())
        return None if same else offer

    def runnable(self, source) -> bool:
        """Can this page draft with ``source`` (a head or a draft model only when it is the one
        loaded; an exit shallower than the target)?"""
        if source is None or self.wb.missing_draft(source) is not None:
            return False
        try:
            source.check_target(self.wb.target.config)
        except ValueError:
            return False
        return True

    def _advance(self, session, values) -> tuple[Session | None, str | InputError]:
        """The next step: a recorded one after Back, else one engine step (a new run when the
        inputs changed). (session to show, message); bad input keeps the session on screen."""
        fresh, message = self._ensure(session, values)
        if fresh is None:
            return session, message
        if not fresh.step():
            message = (f"The run has finished ({fresh.finish_reason}): press Reset, change the prompt, "
                       "or use Back and the step slider to look at earlier steps.")
        return fresh, message

    def step(self, session, *values):
        """Show the next step (``_advance``)."""
        return self.show(*self._advance(session, values))

    def back(self, session):
        if session is None or not session.back():
            return self.show(session, "Nothing to go back to.")
        return self.show(session)

    def goto(self, session, step):
        """Show step ``step`` (1-based) of those recorded."""
        if session is not None:
            session.goto(step)
        return self.show(session)

    def run_to_end(self, session, *values):
        """Step until the run finishes, yielding the views at most every ~0.3 s (and at the end)."""
        fresh, message = self._ensure(session, values)
        if fresh is None:
            yield self.show(session, message)
            return
        last = 0.0
        while fresh.step():
            if time.perf_counter() - last > 0.3:
                last = time.perf_counter()
                yield self.show(fresh, "Running…")
        yield self.show(fresh, f"Finished ({fresh.finish_reason}).")

    def play(self, on: bool, auto: Autoplay):
        """The autoplay checkbox, ticked or unticked by the user: the timer."""
        auto.on = bool(on)
        return gr.Timer(active=auto.on)

    def tick(self, session, auto: Autoplay, *values):
        """Autoplay: one Step while ``auto.on``; off at the run's end or on bad input. Returns
        (session, *VIEWS, *PAGE, timer, checkbox)."""
        off = (gr.Timer(active=False), gr.Checkbox(value=False))
        if not auto.on:  # autoplay went off after this tick was sent: no step
            return (*self.show(session, select=False), *off)
        resets = auto.resets
        now, message = self._advance(session, values)
        if auto.resets != resets:  # Reset came while this step ran: the page stays reset
            return tuple(gr.skip() for _ in range(1 + len(VIEWS) + len(PAGE) + len(off)))
        finished = isinstance(message, InputError) or now.engine.done and now.at_end
        if finished:
            auto.on = False
        unchanged = (gr.skip(), gr.skip())  # a tick never turns autoplay back on
        return (*self.show(now, message, select=False), *(off if finished else unchanged))

    def take_suggestion(self, session, *values):
        """Fill the inputs with the bench's suggestion: (*inputs, status, suggest button)."""
        offer = self.suggestion(session)
        if offer is None:
            return (*(gr.skip() for _ in self.names), "Nothing to suggest for the step on screen.",
                    gr.Button(visible=False))
        new = offer.settings(dict(zip(self.names, values, strict=True)))
        changed = ", ".join(f"{k} = {v}" for k, v in offer.changes.items())
        return (*(new[n] if n in offer.changes else gr.skip() for n in self.names),
                f"Set {changed} (the prompt is yours, unchanged): press **Step** to start a run with it.",
                gr.Button(visible=False))

    def relabel(self, *values):
        """The settings accordion's label after an input changed."""
        return gr.Accordion(label=settings_label(dict(zip(self.names, values, strict=True))))

    def walk(self, session, k):
        """The accept walk of the current step after its first ``k`` moves."""
        return walk_views(session, k)

    def animate(self, session):
        """Replay the current step's accept walk one move at a time."""
        tr = session.current if session else None
        if tr is None or tr["kind"] != "spec":
            yield gr.skip(), gr.skip(), gr.skip()
            return
        for k in range(len(walk_moves(tr)) + 1):
            yield (*walk_views(session, k), gr.Slider(value=k))
            time.sleep(ANIMATE_S)

    def reset(self, session, auto: Autoplay):
        """Drop this session's run; stop Run to end, autoplay and the walk's replay."""
        auto.on = False
        auto.resets += 1
        page = {"bench": "", "suggest": gr.Button(visible=False), "settings": gr.skip(), "tabs": gr.skip()}
        return (None, *blank("Reset: press Step to start a new run with the inputs above."),
                *(page[k] for k in PAGE), gr.Timer(active=False), gr.Checkbox(value=False))
