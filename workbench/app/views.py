"""What the Step-through page shows for a session: one value per view, from the current trace.

``render`` is the single place that turns a session into component values; every event of the
page (Step, Back, the slider, Run to end, autoplay) ends in it, so all views always show the
same step. The figures and tables themselves come from ``workbench.viz``.

What a Step sends is kept small, because the browser's redrawing, not the server, is most of the
time from click to drawn views: one plotly figure (the tree); the mask and the KV slots are HTML;
the raw trace is sent only on demand (``trace_view``), and so are the Best tree and Calibration
tabs, drawn when they are opened (``best_tree_views``, ``calibration_views``).
"""

from __future__ import annotations

import gradio as gr

from workbench.analysis.calibration import calibration_table
from workbench.analysis.expectation import trace_expectation
from workbench.app.state import Session
from workbench.engine.timings import target_ms
from workbench.viz.best_tree import best_tree_figure, budget_figure, continuation_html
from workbench.viz.calibration import calibration_html, depth_figure, reliability_figure
from workbench.viz.html import note
from workbench.viz.kv import kv_slots_html, kv_table_html
from workbench.viz.logits import logits_html
from workbench.viz.mask import mask_html
from workbench.viz.output import output_html, output_tail_html
from workbench.viz.replay import replay_figure, replay_stages
from workbench.viz.sampling import sampling_html
from workbench.viz.style import empty_figure
from workbench.viz.tokens import show
from workbench.viz.tree import no_draft_note, tree_figure
from workbench.viz.walk import moves_html, pointer_table_html, walk_moves

# Output order of every Step-like event (after the session state).
VIEWS = ("status", "recent", "summary", "step_slider", "tree", "replay", "mask", "logits", "pointers", "moves", "walk_slider",
         "sampling", "output", "kv_slots", "kv_table")


def render(session: Session | None, wb, message: str = "") -> tuple:
    """Values for ``VIEWS``: the step under the cursor, or placeholders before the first step."""
    tr = session.current if session else None
    if tr is None:
        return blank(message)
    n_moves = len(walk_moves(tr)) if tr["kind"] == "spec" else 0
    no_walk = "<p>No accept walk at this step: the prefill and vanilla steps verify nothing.</p>"
    values = {
        "status": message,
        "recent": output_tail_html(session.prompt_text, session.traces[: session.cursor + 1], wb.token_text),
        "summary": summary(session),
        "step_slider": gr.Slider(minimum=1, maximum=max(2, len(session.traces)), value=session.cursor + 1,
                                 interactive=len(session.traces) > 1),
        "tree": tree_figure(tr),
        "replay": replay_slider(tr),
        "mask": mask_html(tr),
        "logits": logits_html(tr),
        "pointers": pointer_table_html(tr) if n_moves else no_walk,
        "moves": moves_html(tr) if n_moves else "",
        "walk_slider": gr.Slider(minimum=0, maximum=max(1, n_moves), value=n_moves, interactive=n_moves > 0),
        "sampling": sampling_html(tr),
        "output": output_html(session.prompt_text, session.traces[: session.cursor + 1], wb.token_text),
        "kv_slots": kv_slots_html(tr),
        "kv_table": kv_table_html(tr) + draft_kv_note(tr, session.engine.spec.draft),
    }
    return tuple(values[k] for k in VIEWS)


def blank(message: str = "") -> tuple:
    """Placeholders before the first step (after Reset, or when a run could not start)."""
    wait = "Press <b>Step</b> to run the prefill, then Step again for each EAGLE-2 step."
    values = {"status": message, "recent": "", "summary": "No step yet.",
              "step_slider": gr.Slider(minimum=1, maximum=2, value=1, interactive=False),
              "tree": empty_figure("Press Step: the first step is the prefill, the draft tree comes next.", 220),
              "replay": gr.Slider(minimum=0, maximum=1, value=0, interactive=False, label=REPLAY),
              "mask": "<p>The tree mask appears with the first EAGLE-2 step.</p>",
              "logits": f"<p>{wait}</p>", "pointers": f"<p>{wait}</p>", "moves": "",
              "walk_slider": gr.Slider(minimum=0, maximum=1, value=0, interactive=False),
              "sampling": "", "output": "", "kv_slots": "<p>No KV slot written yet.</p>",
              "kv_table": ""}
    return tuple(values[k] for k in VIEWS)


REPLAY = "replay the tree: its growth level by level, the rerank, the walk move by move"


def replay_slider(trace: dict) -> gr.Slider:
    """The replay's slider for ``trace``: at its last stage (the whole tree, as drawn), one stop
    per stage of ``viz.replay.replay_stages``."""
    n = len(replay_stages(trace))
    return gr.Slider(minimum=0, maximum=max(1, n - 1), value=max(0, n - 1), interactive=n > 1,
                     label=f"{REPLAY} ({n} stages)" if n else REPLAY)


def replay_view(session: Session | None, k):
    """The tree figure at stage ``k`` of the replay of the step on screen (its title names the
    stage); skipped before a step with a tree."""
    tr = session.current if session else None
    if tr is None or not replay_stages(tr):
        return gr.skip()
    return replay_figure(tr, max(0, min(int(k), len(replay_stages(tr)) - 1)))


def trace_view(session: Session | None) -> dict | None:
    """The trace of the step on screen, as the engine recorded it (None before the first step)."""
    return session.current if session else None


def best_tree_views(session: Session | None) -> tuple:
    """The Best tree tab (drawn when it is opened): the target's greedy continuation on the tree
    of the step on screen, τ per smaller budget, and the continuation token by token."""
    tr = session.current if session else None
    if tr is None:
        return (empty_figure("Press Step: the greedy continuation is drawn on an EAGLE-2 step's tree.", 220),
                empty_figure("No tree yet.", 200), "")
    return best_tree_figure(tr), budget_figure(tr), continuation_html(tr)


def calibration_views(session: Session | None) -> tuple:
    """The Calibration tab's session views (drawn when it is opened) over the steps up to the one
    on screen: reliability diagram, per-depth acceptance, the table of bins."""
    cal = calibration_table(session.traces[: session.cursor + 1] if session else [])
    return (reliability_figure(cal, "This session: draft confidence against acceptance"), depth_figure(cal),
            calibration_html(cal))


def walk_views(session: Session | None, k: int) -> tuple[str, str]:
    """(pointer table, moves) after the first ``k`` moves of the current step's walk."""
    tr = session.current if session else None
    if tr is None or tr["kind"] != "spec":
        return gr.skip(), gr.skip()
    return pointer_table_html(tr, int(k)), moves_html(tr, int(k))


def summary(session: Session) -> str:
    """About the step on screen: which step, the method, the draft source, L, what was accepted,
    τ, time. (What the benchmark measured for the run's draft is shown once beside it, not per
    step: ``Session.bench_note``.)"""
    tr, spec = session.current, session.engine.spec
    draft = f" · draft: **{spec.draft.label(session.engine.target.config.num_layers)}**" \
        if spec.speculative else ""
    head = f"**Step {tr['step']}** of {len(session.traces)} recorded · `{spec.describe()}`{draft} · L = {tr['L']}"
    ms = sum(tr["timing_ms"].values())
    if tr["kind"] == "prefill":
        body = f"prefill of {tr['prompt_len']} prompt tokens → first token · {ms:.0f} ms"
    elif tr["kind"] == "decode":
        body = f"vanilla decode: 1 token, τ = 1 · {ms:.0f} ms"
    else:
        n = len(tr["accept"]["accepted"])
        t = tr["timing_ms"]
        bonus = show(tr["accept"]["bonus"]["text"])
        e = trace_expectation(tr)
        worth = f" (tree worth {e.accept_length:.2f} over the coins)" if e is not None else ""
        drafted = f"{n} correct draft(s)" if len(tr["tree"]["nodes"]) > 1 else no_draft_note(tr)
        emitted = tr["accept_length"]  # τ counts what the step emitted; the walk drawn has n + 1
        cut = f" (the output ended after {emitted} of these {n + 1})" if emitted < n + 1 else ""
        body = (f"{drafted} + bonus `{bonus}` → τ = {emitted}{cut}{worth} · "
                f"{ms:.0f} ms (draft {t['draft_extend_ms'] + t['draft_tree_ms']:.0f}, verify {target_ms(t):.0f})")
    end = f" · finished ({session.finish_reason})" if session.engine.done and session.at_end else ""
    return f"{head} · {body}{end}"


def draft_kv_note(trace: dict, draft) -> str:
    """Where this draft's K/V lives, for the KV view (its ``Needs``): a draft with a pool of its
    own has the "draft KV" row; a model-free one writes none; the others (the early exit) read
    the target's K/V and write their tree scratch into the target's pool."""
    if trace["kind"] != "spec" or draft.needs.own_kv:
        return ""
    if draft.model_free:
        return note(f"The {draft.label()} draft runs no model: it writes no K/V (nothing in the draft row).")
    return note(f"{draft.label()} has no KV pool of its own: its K/V for the committed tokens is the target's. Its "
                "tree scratch (the draft row) is written into the target's pool, in the layers it runs only, and "
                "freed after the step.")


def error(message: str) -> str:
    """A problem with the input, as the status line shows it."""
    return f"⚠️ **{message}**"
