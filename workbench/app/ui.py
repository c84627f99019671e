"""The Gradio page: the prompt and the step controls on top, the step's result right under them,
the settings folded away, then the tabs (Step through, Best tree, Compare, Calibration, Load, Glossary).
Best tree and Calibration are drawn when their tab is opened.

Layout, top to bottom, so that at 1366×768 a Step's result is in view without scrolling:

* the prompt, and beside it Step / Back / Run to end / Reset / autoplay, and under those the
  output's last tokens;
* under the prompt, the status line: what the last action did, or what is wrong (naming the
  field, which is outlined), and when a step accepted nothing, why, with a button that sets what
  its stop cause points at (a knob, or a draft source the stored records measured faster; never
  the prompt);
* Settings, an accordion (closed; its label shows the values in use) grouping the draft source,
  the method and tree knobs, and sampling;
* the Step-through tab: the draft tree, beside it the step summary and the bench's τ for the
  run's draft; under it every other view.

The model is loaded once per process and shared read-only; each browser session keeps its own
``Session`` (its Engine and KV cache) in a ``gr.State``. Events run on the queue several at once,
so one session's *Run to end* never holds up another's Step. Bad input never raises: the status
line says what is wrong. The inputs go by name, keyed by ``Settings``' fields.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import gradio as gr

from workbench.app import explain
from workbench.app.address import DEFAULT_HOST, DEFAULT_PORT
from workbench.app.calibration import build_calibration_tab
from workbench.app.compare import build_compare_tab
from workbench.app.draft_bench import load_draft_bench
from workbench.app.guide import page_measured_line
from workbench.app.handlers import PAGE, Autoplay, StepEvents, elem_id, settings_label
from workbench.app.load_tab import build_load_tab
from workbench.app.state import Session, Settings, acceptance_note, offered_choices, setting_names
from workbench.app.views import VIEWS, best_tree_views, render, replay_view, trace_view
from workbench.engine.config import CHAIN_RULES
from workbench.engine.drafts.base import boxes
from workbench.engine.drafts.registry import all_boxes, loads_nothing

SESSION_TTL_S = 2 * 3600  # a session's Engine (and its KV cache) is dropped after this idle time
CONCURRENCY = 8  # events of different sessions that may run at once (per event kind)
AUTOPLAY_S = 1.2
# System fonts only: the page loads no font file, from this server or any other.
THEME = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                          font_mono=["ui-monospace", "Consolas", "monospace"])


def page_css() -> str:
    """The page's few styles; an input the status line marks as bad (``handlers.field_error``) is
    outlined."""
    invalid = " ".join(f"body:has(#status .wb-bad-{i}) #{i} {{outline: 3px solid #D55E00; outline-offset: -3px; "
                       "background: #FFF4EC}" for i in map(elem_id, setting_names()))  # inside the box: no parent clips it
    return (".wb-explain {font-size: 13px; color: #333} .wb-table code {font-size: 12px} "
            ".wb-info, .wb-info p {font-size: 12px !important; color: #555; margin: 0} .wb-bench {font-size: 12px; color: #444} "
            "#status {min-height: 1.6em} #status p {margin: 0} " + invalid)


def load_examples() -> list[dict]:
    """The example prompts shipped with the app (``examples.json``): Spec-Bench first turns, and
    prompts written for the app, each naming the draft route it suits and the Spec-Bench task
    nearest to it."""
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
    examples = load_examples()
    with gr.Blocks(title="EAGLE-2 Workbench") as demo:
        session = gr.State(None, time_to_live=SESSION_TTL_S)
        gr.Markdown(explain.INTRO)
        if info:
            gr.Markdown(info, elem_classes=["wb-info"])
        first = default_settings(wb)
        measured = page_measured_line(wb, first.method, (first.num_draft_tokens, first.num_steps, first.topk))
        page = _controls(f"{START} {measured}." if measured else START)
        page["settings"], controls = _settings(wb, examples, page["prompt"])
        inputs = {name: page["prompt"] if name == "prompt" else controls[name] for name in setting_names()}
        with gr.Tabs(selected="step") as page["tabs"]:
            with gr.Tab("Step through", id="step"):
                views, animate = _step_views()
            with gr.Tab("Best tree", id="best", elem_id="best-tab") as best:
                _best_tab(best, session)
            with gr.Tab("Compare", id="compare", elem_id="compare-tab"):
                build_compare_tab(wb, inputs)
            with gr.Tab("Calibration", id="calibration", elem_id="calibration-tab") as calibration:
                build_calibration_tab(wb, calibration, session)
            with gr.Tab("Load", id="load", elem_id="load-tab"):
                build_load_tab(wb)
            with gr.Tab("Glossary", id="glossary"):
                gr.Markdown(explain.GLOSSARY)
        _wire(StepEvents(wb, bench), session, c={**page, **views}, inputs=inputs, animate=animate)
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


def launch(demo: gr.Blocks, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, block: bool = True):
    """Serve ``demo``; ``block=False`` returns at once (tests), the server runs in a thread."""
    return demo.launch(server_name=host, server_port=port, css=page_css(), theme=THEME, footer_links=["api"],
                       prevent_thread_lock=not block, quiet=not block)


def default_settings(wb) -> Settings:
    """The page's first values: ``Settings``' defaults, drafted as the app was started (the loaded
    head or draft model, or the source ``--draft`` named, its fields in the page's boxes; else the
    first source that needs nothing loaded, the n-gram lookup), each box at most what the target
    takes (``Box.first``: the early exit's N at most its layers - 1)."""
    config = wb.target.config
    source = wb.loaded_draft or loads_nothing()()
    values = {name: box.first(config) for name, (_, box) in all_boxes().items()}
    values.update({box.name: getattr(source, box.field) for box in boxes(source)})
    return Settings(draft=source.kind, boxes=values)


START = ("Press **Step**: the first step reads the prompt (the prefill), each next one drafts a tree and "
         "verifies it.")


def _controls(status: str = START) -> dict:
    """The prompt and under it the status line (``status``: its first words; with the button that
    offers a change to try, shown after a step that accepted nothing); beside them the step
    buttons and autoplay, and under those the output's end: all in one row, so that the tree
    under it is in view after a Step at 1366×768."""
    with gr.Row(elem_id="controls"):
        with gr.Column(scale=3):
            c = {"prompt": gr.Textbox(label="Prompt", lines=2, max_lines=8, value="Tell me about Paris.",
                                      elem_id="prompt")}
            with gr.Row(elem_id="status-row", equal_height=True):
                c["status"] = gr.Markdown(status, elem_id="status")
                c["suggest"] = gr.Button("Try", visible=False, elem_id="suggest-btn", size="sm", scale=0,
                                         min_width=200)
        with gr.Column(scale=2, min_width=380):
            c["step"] = gr.Button("Step", variant="primary", elem_id="step-btn")
            with gr.Row():
                for name, label in [("back", "Back"), ("run", "Run to end"), ("reset", "Reset")]:
                    c[name] = gr.Button(label, elem_id=f"{name}-btn", size="md", min_width=80)
                c["autoplay"] = gr.Checkbox(False, label="autoplay", elem_id="autoplay", min_width=100)
            c["recent"] = gr.HTML(elem_id="output-tail", padding=False)  # the output's end, beside Step
    c["timer"], c["playing"] = gr.Timer(AUTOPLAY_S, active=False), gr.State(Autoplay())
    return c


def _settings(wb, examples: list[dict], prompt: gr.Textbox) -> tuple[gr.Accordion, dict]:
    """The settings accordion (closed; its label shows the values in use) and its inputs, by
    ``Settings`` field (the ``prompt`` is the one outside it; the examples fill it). Number boxes
    (not sliders) so that any value reaches ``Settings.build`` and gets a readable message."""
    default = default_settings(wb)  # the defaults live in SpecConfig (and Settings), not here
    labels = [example_label(e) for e in examples]
    box = dict(min_width=90)
    i = {}
    with gr.Accordion(settings_label(default.values()), open=False, elem_id="settings") as accordion:
        with gr.Row():
            with gr.Column(scale=4, min_width=320):
                gr.Markdown("**Prompt examples and draft source**")
                example = gr.Dropdown(labels, value=None, label="Examples (Spec-Bench first turns, and prompts that "
                                                               "suit a draft route)", elem_id="examples")
                i.update(_draft_inputs(wb, default))
                gr.Markdown(explain.SETTINGS, elem_classes=["wb-explain"])
            with gr.Column(scale=5, min_width=320):
                gr.Markdown("**Method and tree**")
                i["method"] = gr.Radio(["eagle2", "static", "linear", "vanilla"], value=default.method, label="method",
                                       elem_id="method")
                with gr.Row():
                    for name in ("num_steps", "topk", "num_draft_tokens"):
                        i[name] = gr.Number(getattr(default, name), label=name, precision=0, elem_id=elem_id(name),
                                            **box)
                i["tree"] = gr.Textbox("", label="static tree: rank paths as JSON, e.g. [[0],[1],[0,0]] (empty = "
                                                 "EAGLE-1's tree cut to num_draft_tokens)", max_lines=2, elem_id="tree")
            with gr.Column(scale=4, min_width=320):
                gr.Markdown("**Sampling and length**")
                with gr.Row():
                    i["temperature"] = gr.Number(default.temperature, label="temperature", elem_id="temperature", **box)
                    i["top_p"] = gr.Number(default.top_p, label="top-p", elem_id="top-p", **box)
                    i["top_k"] = gr.Number(default.top_k, label="top-k (0 = off)", precision=0, elem_id="top-k", **box)
                with gr.Row():
                    i["seed"] = gr.Number(default.seed, label="seed", precision=0, elem_id="seed", **box)
                    i["max_new_tokens"] = gr.Number(default.max_new_tokens, label="max_new_tokens", precision=0,
                                                    elem_id="max-new-tokens", **box)
                i.update(_threshold_inputs(default))
    example.input(lambda label: examples[labels.index(label)]["prompt"] if label in labels else gr.skip(),
                  example, prompt, api_name="example")
    return accordion, i


def _draft_inputs(wb, default: Settings) -> dict:
    """Where the drafts come from: the selector, and every registered source's number boxes
    (the early exit's N, 1..the target's layers - 1; the n-gram match windows)."""
    config = wb.target.config
    out = {"draft": gr.Radio(offered_choices(wb.loaded_draft), value=default.draft, label="draft source", elem_id="draft-source")}
    with gr.Row():
        for name, (_, box) in all_boxes().items():
            out[name] = gr.Number(default.boxes[name], label=box.label(config), precision=0, elem_id=elem_id(name),
                                  min_width=90)
    return out


def _threshold_inputs(default: Settings) -> dict:
    """The two accept thresholds (1 = exact) and a note that says "lossy" while one is below 1."""
    with gr.Row():
        single = gr.Number(default.accept_threshold_single, label="accept threshold single (1 = exact; below 1: lossy)",
                           elem_id="accept-threshold-single", min_width=90)
        acc = gr.Number(default.accept_threshold_acc, label="accept threshold acc (1 = exact; below 1: lossy)",
                        elem_id="accept-threshold-acc", min_width=90)
    note = gr.Markdown(acceptance_note(default.accept_threshold_single, default.accept_threshold_acc),
                       elem_id="acceptance-note")
    for box in (single, acc):
        box.change(acceptance_note, [single, acc], note, api_visibility="private")
    rule = gr.Radio(list(CHAIN_RULES), value=default.chain_rule, elem_id="chain-rule",
                    label="chain rule (linear at temperature > 0: top-1 drafts, or drafts drawn from q verified "
                          "token by token or as a block)")
    return {"accept_threshold_single": single, "accept_threshold_acc": acc, "chain_rule": rule}


def _view_row(component_fn, text: str):
    """A view with its short explanation beside it."""
    with gr.Row():
        with gr.Column(scale=4):
            out = component_fn()
        with gr.Column(scale=1, min_width=220):
            gr.Markdown(text, elem_classes=["wb-explain"])
    return out


def _step_views() -> tuple[dict, gr.Button]:
    """The components of ``VIEWS`` (by name) and the bench's line, each with its explanation,
    and the animate button. The tree comes first, the step summary beside it."""
    v = {}
    with gr.Row():
        with gr.Column(scale=3):
            v["tree"] = gr.Plot(label="draft tree", elem_id="tree-plot")
            v["replay"] = gr.Slider(0, 1, value=0, step=1, label="replay the tree", interactive=False,
                                    elem_id="replay-slider")
            v["step_slider"] = gr.Slider(1, 2, value=1, step=1, label="step", interactive=False, elem_id="step-slider")
        with gr.Column(scale=1, min_width=260):
            v["summary"] = gr.Markdown("No step yet.", elem_id="summary")
            v["bench"] = gr.HTML(elem_id="bench-note")
            gr.Markdown(explain.TREE, elem_classes=["wb-explain"])
    v["output"] = _view_row(lambda: gr.HTML(elem_id="output-view"), explain.OUTPUT)
    v["mask"] = _view_row(lambda: gr.HTML(elem_id="mask-view"), explain.MASK)
    v["logits"] = _view_row(lambda: gr.HTML(elem_id="logits-view"), explain.LOGITS)
    with gr.Row():
        with gr.Column(scale=4):
            v["pointers"] = gr.HTML(elem_id="walk-pointers")
            with gr.Row():
                v["walk_slider"] = gr.Slider(0, 1, value=0, step=1, label="walk move", interactive=False,
                                             elem_id="walk-slider")
                animate = gr.Button("Animate walk", elem_id="animate-btn", scale=0)
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
    return v, animate


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


def _wire(h: StepEvents, session, *, c: dict, inputs: dict, animate: gr.Button) -> None:
    """The events of the controls, the settings and the Step-through views (``c``: every
    component by name). Every Step-like event outputs the session, ``VIEWS`` and ``PAGE``."""
    assert tuple(inputs) == setting_names(), "one input per Settings field, in field order"
    values = list(inputs.values())
    outs = [session] + [c[k] for k in VIEWS + PAGE]
    autoplay = [c["timer"], c["autoplay"]]
    quiet = dict(show_progress="minimal", show_progress_on=[c["status"]])
    c["step"].click(h.step, [session, *values], outs, api_name="step", **quiet)
    c["back"].click(h.back, [session], outs, api_name="back", **quiet)
    c["step_slider"].release(h.goto, [session, c["step_slider"]], outs, api_name="goto", **quiet)
    run = c["run"].click(h.run_to_end, [session, *values], outs, api_name="run_to_end", **quiet)
    c["autoplay"].input(h.play, [c["autoplay"], c["playing"]], c["timer"], api_visibility="private")
    tick = c["timer"].tick(h.tick, [session, c["playing"], *values], outs + autoplay, trigger_mode="once",
                           api_visibility="private", **quiet)
    c["suggest"].click(h.take_suggestion, [session, *values], values + [c["status"], c["suggest"]],
                       api_name="take_suggestion")
    gr.on([box.change for name, box in inputs.items() if name != "prompt"], h.relabel, values, c["settings"],
          queue=False, show_progress="hidden", api_visibility="private")
    c["trace_btn"].click(trace_view, [session], c["trace"], api_name="trace")
    c["replay"].release(replay_view, [session, c["replay"]], c["tree"], api_name="replay",
                        show_progress="hidden")
    walk = [c["pointers"], c["moves"]]
    c["walk_slider"].release(h.walk, [session, c["walk_slider"]], walk, api_name="walk")
    replay = animate.click(h.animate, [session], walk + [c["walk_slider"]], api_name="animate_walk")
    c["reset"].click(h.reset, [session, c["playing"]], outs + autoplay, api_name="reset", cancels=[run, tick, replay])
