"""The Gradio page: inputs, the Step-through views, Best tree, Compare, Calibration and the
glossary, and their events. Best tree and Calibration are drawn when their tab is opened.

The model is loaded once per process and shared read-only; each browser session keeps its own
``Session`` (its Engine and KV cache) in a ``gr.State``. Events run on the queue with room for
several at once, so one session's *Run to end* (a generator that yields after every step) never
holds up another session's Step. Bad input never raises: the status line says what is wrong.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import gradio as gr

from workbench.app import explain
from workbench.app.calibration import build_calibration_tab
from workbench.app.compare import build_compare_tab
from workbench.app.draft_bench import load_draft_bench
from workbench.app.state import DEFAULT_EXIT_LAYERS, DRAFT_CHOICES, Session, Settings, acceptance_note
from workbench.app.views import VIEWS, best_tree_views, blank, error, render, trace_view, walk_views
from workbench.engine.draft_source import DraftSource, parse_draft
from workbench.models.draft import DraftHead
from workbench.viz.walk import walk_moves

SESSION_TTL_S = 2 * 3600  # a session's Engine (and its KV cache) is dropped after this idle time
CONCURRENCY = 8  # events of different sessions that may run at once (per event kind)
AUTOPLAY_S = 1.2
ANIMATE_S = 0.6
CSS = ".wb-explain {font-size: 13px; color: #333} .wb-table code {font-size: 12px}"
# System fonts only: the page loads no font file, from this server or any other.
THEME = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                          font_mono=["ui-monospace", "Consolas", "monospace"])
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 7860


def load_examples() -> list[dict]:
    """The example prompts shipped with the app (``examples.json``): Spec-Bench first turns, and
    prompts written for the app, each naming the draft route it suits."""
    return json.loads((Path(__file__).with_name("examples.json")).read_text())["examples"]


def example_label(example: dict) -> str:
    """What the examples list shows: the category, the route a prompt suits, its start."""
    route = f" · suits {example['route']}" if example.get("route") else ""
    return f"{example['category']}{route}: {example['prompt'][:70]}…"


def build_app(wb, info: str = "", draft_bench: str | Path | None = None) -> gr.Blocks:
    """The whole page for a loaded ``Workbench``; ``info`` is shown under the title (what was
    loaded, how long it took); ``draft_bench``: the benchmark's per-task τ per draft source
    (default: the shipped ``draft-sources.json``; none shown when absent, or, with a warning on
    stderr, when it does not follow its format)."""
    try:
        bench = load_draft_bench(draft_bench)
    except ValueError as err:
        print(f"warning: {err}: the page shows no per-task τ", file=sys.stderr, flush=True)
        bench = None
    with gr.Blocks(title="EAGLE-2 Workbench") as demo:
        session = gr.State(None, time_to_live=SESSION_TTL_S)
        gr.Markdown(explain.INTRO + (f"\n\n{info}" if info else ""))
        inputs = _inputs(wb)
        with gr.Tabs():
            with gr.Tab("Step through", id="step"):
                _step_tab(wb, session, inputs, bench)
            with gr.Tab("Best tree", id="best", elem_id="best-tab") as best:
                _best_tab(best, session)
            with gr.Tab("Compare", id="compare", elem_id="compare-tab"):
                build_compare_tab(wb, inputs)
            with gr.Tab("Calibration", id="calibration", elem_id="calibration-tab") as calibration:
                build_calibration_tab(wb, calibration, session)
            with gr.Tab("Glossary", id="glossary"):
                gr.Markdown(explain.GLOSSARY)
    demo.queue(default_concurrency_limit=CONCURRENCY)
    return demo


def warm_up(wb) -> float:
    """Run and render two steps of a throwaway session, so that the first Step a user presses
    does not pay for first calls (plotly builds its figure classes lazily, ~1-3 s). Seconds taken."""
    t0 = time.perf_counter()
    session = Session.start(wb, replace(default_settings(wb), prompt="Hello", max_new_tokens=4))
    for _ in range(2):
        session.step()
        render(session, wb)
    return time.perf_counter() - t0


def server_address(host: str | None = None, port: int | None = None, environ=None) -> tuple[str, int]:
    """Where to listen: ``host`` / ``port`` when given (the command line's flags), else Gradio's
    own ``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT`` (what hosting platforms set), else
    127.0.0.1:7860. ValueError for a port that is not a number in 1..65535."""
    environ = os.environ if environ is None else environ
    host = host or environ.get("GRADIO_SERVER_NAME") or DEFAULT_HOST
    if port is None:
        text = environ.get("GRADIO_SERVER_PORT", "").strip()
        try:
            port = int(text) if text else DEFAULT_PORT
        except ValueError:
            raise ValueError(f"GRADIO_SERVER_PORT must be a port number, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise ValueError(f"the port must be in 1..65535, got {port}")
    return host, port


def launch(demo: gr.Blocks, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, block: bool = True):
    """Serve ``demo``; ``block=False`` returns at once (tests), the server runs in a thread."""
    return demo.launch(server_name=host, server_port=port, css=CSS, theme=THEME, footer_links=["api"],
                       prevent_thread_lock=not block, quiet=not block)


def default_settings(wb) -> Settings:
    """The page's first values: ``Settings``' defaults, drafted as the app was started (the loaded
    head; else ``--draft ngram[:MIN-MAX]`` or ``exit:N``; else the n-gram lookup), the early
    exit's N at most the target's layers - 1."""
    layers = wb.target.config.num_layers
    default = Settings(exit_layers=min(DEFAULT_EXIT_LAYERS, layers - 1))
    if isinstance(wb.draft, DraftHead):
        return default
    source = parse_draft(wb.draft_source) or DraftSource("ngram")
    if source.kind == "exit":
        return replace(default, draft="exit", exit_layers=source.num_layers)
    source = source if source.kind == "ngram" else DraftSource("ngram")
    return replace(default, draft="ngram", ngram_min=source.min_match, ngram_max=source.max_match)


def _inputs(wb) -> list:
    """Prompt, examples, method, knobs and draft source, in ``Settings`` field order. Number
    boxes (not sliders) so that any value reaches ``Settings.build`` and gets a readable message."""
    examples = load_examples()
    default = default_settings(wb)  # the defaults live in SpecConfig (and Settings), not here
    labels = [example_label(e) for e in examples]
    small = dict(min_width=90)
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(label="Prompt", lines=3, value="Tell me about Paris.", elem_id="prompt")
            example = gr.Dropdown(labels, value=None, label="Examples (Spec-Bench first turns, and prompts that suit "
                                                           "a draft route)", elem_id="examples")
            draft = _draft_inputs(wb, default)
        with gr.Column(scale=3):
            with gr.Row():
                method = gr.Radio(["eagle2", "static", "linear", "vanilla"], value=default.method, label="method", elem_id="method",
                                  scale=2)
                max_new = gr.Number(default.max_new_tokens, label="max_new_tokens", precision=0, elem_id="max-new-tokens", **small)
            with gr.Row():
                num_steps = gr.Number(default.num_steps, label="num_steps", precision=0, elem_id="num-steps", **small)
                topk = gr.Number(default.topk, label="topk", precision=0, elem_id="topk", **small)
                num_draft = gr.Number(default.num_draft_tokens, label="num_draft_tokens", precision=0, elem_id="num-draft-tokens", **small)
            with gr.Row():
                temperature = gr.Number(0.0, label="temperature", elem_id="temperature", **small)
                top_p = gr.Number(1.0, label="top-p", elem_id="top-p", **small)
                top_k = gr.Number(0, label="top-k (0 = off)", precision=0, elem_id="top-k", **small)
                seed = gr.Number(0, label="seed", precision=0, elem_id="seed", **small)
            tree = gr.Textbox("", label="static tree: rank paths as JSON, e.g. [[0],[1],[0,0]] (empty = EAGLE-1's "
                                        "tree cut to num_draft_tokens)", max_lines=2, elem_id="tree")
            thresholds = _threshold_inputs(default)
    example.input(lambda label: examples[labels.index(label)]["prompt"] if label in labels else gr.skip(),
                  example, prompt, api_name="example")
    return [prompt, method, num_steps, topk, num_draft, temperature, top_p, top_k, seed, max_new, tree, *thresholds,
            *draft]


def _draft_inputs(wb, default: Settings) -> list:
    """Where the drafts come from: the selector, the early exit's N (1..the target's layers - 1)
    and the n-gram match windows."""
    layers = wb.target.config.num_layers
    small = dict(min_width=90)
    with gr.Row():
        source = gr.Radio(DRAFT_CHOICES, value=default.draft, label="draft source", elem_id="draft-source", scale=3)
        exit_n = gr.Number(default.exit_layers, label=f"early exit N (1..{layers - 1})", precision=0,
                           elem_id="exit-layers", **small)
        low = gr.Number(default.ngram_min, label="n-gram min match", precision=0, elem_id="ngram-min", **small)
        high = gr.Number(default.ngram_max, label="n-gram max match", precision=0, elem_id="ngram-max", **small)
    return [source, exit_n, low, high]


def _threshold_inputs(default: Settings) -> list:
    """The two accept thresholds (1 = exact) and a note that says "lossy" while one is below 1."""
    with gr.Row():
        single = gr.Number(default.accept_threshold_single, label="accept threshold single (1 = exact)",
                           elem_id="accept-threshold-single", min_width=90)
        acc = gr.Number(default.accept_threshold_acc, label="accept threshold acc (1 = exact)",
                        elem_id="accept-threshold-acc", min_width=90)
        note = gr.Markdown(acceptance_note(default.accept_threshold_single, default.accept_threshold_acc),
                           elem_id="acceptance-note")
    for box in (single, acc):
        box.change(acceptance_note, [single, acc], note, api_visibility="private")
    return [single, acc]


def _view_row(component_fn, text: str):
    """A view with its short explanation beside it."""
    with gr.Row():
        with gr.Column(scale=4):
            out = component_fn()
        with gr.Column(scale=1, min_width=220):
            gr.Markdown(text, elem_classes=["wb-explain"])
    return out


def _step_tab(wb, session, inputs, bench=None) -> None:
    """Buttons, the views of the current step, and their events."""
    with gr.Row(equal_height=True):
        buttons = {name: gr.Button(label, variant="primary" if name == "step" else "secondary", elem_id=f"{name}-btn")
                   for name, label in [("step", "Step"), ("back", "Back"), ("run", "Run to end"), ("reset", "Reset")]}
        autoplay = gr.Checkbox(False, label="autoplay", elem_id="autoplay")
    views, animate_btn = _step_views()
    timer = gr.Timer(AUTOPLAY_S, active=False)
    outs = [session] + [views[k] for k in VIEWS]
    h = _Handlers(wb, bench)
    quiet = dict(show_progress="minimal", show_progress_on=[views["status"]])
    buttons["step"].click(h.step, [session, *inputs], outs, api_name="step", **quiet)
    buttons["back"].click(h.back, [session], outs, api_name="back", **quiet)
    views["step_slider"].release(h.goto, [session, views["step_slider"]], outs, api_name="goto", **quiet)
    run = buttons["run"].click(h.run_to_end, [session, *inputs], outs, api_name="run_to_end", **quiet)
    autoplay.change(lambda on: gr.Timer(active=on), autoplay, timer, api_visibility="private")
    tick = timer.tick(h.tick, [session, *inputs], outs + [timer, autoplay], trigger_mode="once",
                      api_visibility="private", **quiet)
    views["trace_btn"].click(trace_view, [session], views["trace"], api_name="trace")
    walk = [views["pointers"], views["moves"]]
    views["walk_slider"].release(h.walk, [session, views["walk_slider"]], walk, api_name="walk")
    animate = animate_btn.click(h.animate, [session], walk + [views["walk_slider"]], api_name="animate_walk")
    buttons["reset"].click(h.reset, [session], outs + [timer, autoplay], api_name="reset",
                           cancels=[run, tick, animate])


def _step_views() -> tuple[dict, gr.Button]:
    """The components of ``VIEWS`` (by name), each with its explanation, and the animate button."""
    v = {"step_slider": gr.Slider(1, 2, value=1, step=1, label="step", interactive=False, elem_id="step-slider"),
         "status": gr.Markdown(elem_id="status"), "summary": gr.Markdown("No step yet.", elem_id="summary")}
    v["output"] = _view_row(lambda: gr.HTML(elem_id="output-view"), explain.OUTPUT)
    v["tree"] = _view_row(lambda: gr.Plot(label="draft tree", elem_id="tree-plot"), explain.TREE)
    v["mask"] = _view_row(lambda: gr.HTML(elem_id="mask-view"), explain.MASK)
    v["logits"] = _view_row(lambda: gr.HTML(elem_id="logits-view"), explain.LOGITS)
    with gr.Row():
        with gr.Column(scale=4):
            v["pointers"] = gr.HTML(elem_id="walk-pointers")
            with gr.Row():
                v["walk_slider"] = gr.Slider(0, 1, value=0, step=1, label="walk move", interactive=False,
                                             elem_id="walk-slider")
                animate_btn = gr.Button("Animate walk", elem_id="animate-btn", scale=0)
            v["moves"] = gr.HTML(elem_id="walk-moves")
        with gr.Column(scale=1, min_width=220):
            gr.Markdown(explain.WALK, elem_classes=["wb-explain"])
    v["sampling"] = _view_row(lambda: gr.HTML(elem_id="sampling-view"), explain.SAMPLING)
    with gr.Row():
        with gr.Column(scale=4):
            v["kv_slots"] = gr.HTML(elem_id="kv-slots")
            v["kv_table"] = gr.HTML(elem_id="kv-table")
        with gr.Column(scale=1, min_width=220):
            gr.Markdown(explain.KV, elem_classes=["wb-explain"])
    with gr.Accordion("This step's trace (JSON): everything the views above are drawn from", open=False):
        v["trace_btn"] = gr.Button("Show the trace of the step on screen", elem_id="trace-btn", size="sm")
        v["trace"] = gr.JSON(elem_id="trace-json")
    return v, animate_btn


def _best_tab(tab: gr.Tab, session: gr.State) -> None:
    """What the best tree would have been, for the step on screen (drawn when ``tab`` is selected)."""
    with gr.Row():
        with gr.Column(scale=4):
            plot = gr.Plot(label="the target's greedy continuation on the tree", elem_id="best-plot")
            with gr.Row():
                budget = gr.Plot(label="τ per budget", elem_id="best-budget")
                table = gr.HTML(elem_id="best-table")
        with gr.Column(scale=1, min_width=220):
            gr.Markdown(explain.BEST, elem_classes=["wb-explain"])
    tab.select(best_tree_views, [session], [plot, budget, table], api_name="best_tree", show_progress="minimal")


class _Handlers:
    """Event functions. Each returns (session, *views) so every view shows the same step."""

    def __init__(self, wb, bench=None):
        self.wb, self.bench = wb, bench  # bench: draft_bench.DraftBench or None

    def _ensure(self, session: Session | None, values: tuple) -> tuple[Session | None, str]:
        """The session to step: the current one, or a new run when there is none or the inputs
        changed. Returns (session or None, message)."""
        settings = Settings(*values)
        if session is not None and session.settings == settings:
            return session, ""
        try:
            fresh = Session.start(self.wb, settings, self.bench)
        except ValueError as e:
            return None, error(str(e))
        return fresh, ("Inputs changed: started a new run." if session is not None else "Started a new run.")

    def step(self, session, *values):
        """Show the next step: a recorded one after Back, else run one engine step (a new run when
        the inputs changed)."""
        session_new, message = self._ensure(session, values)
        if session_new is None:  # bad input: keep what is on screen, say why
            return (session, *render(session, self.wb, message))
        if not session_new.step():
            message = (f"The run has finished ({session_new.finish_reason}): press Reset, change the prompt, "
                       "or use Back and the step slider to look at earlier steps.")
        return (session_new, *render(session_new, self.wb, message))

    def back(self, session):
        """Show the previous step."""
        if session is None or not session.back():
            return (session, *render(session, self.wb, "Nothing to go back to."))
        return (session, *render(session, self.wb))

    def goto(self, session, step):
        """Show step ``step`` (1-based) of those recorded."""
        if session is not None:
            session.goto(step)
        return (session, *render(session, self.wb))

    def run_to_end(self, session, *values):
        """Step until the run finishes, yielding the views at most every ~0.3 s (and at the end)."""
        session_new, message = self._ensure(session, values)
        if session_new is None:
            yield (session, *render(session, self.wb, message))
            return
        last = 0.0
        while session_new.step():
            if time.perf_counter() - last > 0.3:
                last = time.perf_counter()
                yield (session_new, *render(session_new, self.wb, "Running…"))
        yield (session_new, *render(session_new, self.wb, f"Finished ({session_new.finish_reason})."))

    def tick(self, session, *values):
        """Autoplay: one Step; stops the timer when the run has finished."""
        out = self.step(session, *values)
        finished = out[0] is None or (out[0].engine.done and out[0].at_end)
        return (*out, gr.Timer(active=not finished), gr.Checkbox(value=not finished))

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

    def reset(self, session):
        """Drop this session's run (and stop Run to end / autoplay / animation)."""
        return (None, *blank("Reset: press Step to start a new run with the inputs above."),
                gr.Timer(active=False), gr.Checkbox(value=False))
