"""The Compare tab: one prompt decoded by vanilla, linear (same ``num_steps``), linear (same verify
budget), eagle2 and static (same ``num_draft_tokens``), side by side, with the verify cost measured on this machine;
or, in its second mode, by vanilla and eagle2 at the page's tree with each draft source (the head, the n-gram
lookup, the early exit).

Each run is a fresh Engine with tracing on; everything shown comes from those traces (and from
``workbench.bench.cost.measure_verify_cost`` for the cost curve, when that module is present).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace

import gradio as gr

from workbench.app import explain
from workbench.app.state import DRAFT_CHOICES, Settings
from workbench.app.views import error
from workbench.engine.config import MAX_STEPS, SpecConfig
from workbench.engine.frameworks import FRAMEWORKS, framework_flags
from workbench.viz.compare import cost_figure, summary_html, tau_figure, tokens_figure
from workbench.viz.html import note, table
from workbench.viz.style import empty_figure
from workbench.viz.tree import tree_figure

COST_SIZES = (1, 2, 4, 8, 16, 32)
MODES = ("methods (vanilla, chains, trees)", "draft sources (head, n-gram, exit:N) at this tree")
TREES = ("linear", "eagle2", "static")  # the structures drawn at one step, in the order of the tree plots
# Each plot's label names what it shows in either mode (the figure's title names the run).
TREE_LABELS = ("linear · draft sources: the early exit", "eagle2 (dynamic) · draft sources: the EAGLE head",
               "static (fixed shape) · draft sources: the n-gram draft")
SOURCE_SLOTS = ("exit", "head", "ngram")  # the draft source each tree plot shows, as TREE_LABELS


@dataclass
class CompareResult:
    """Traces per method (``viz.compare`` run format), the measured verify cost, if any, and the
    runs whose trees are drawn (one per tree plot; None: that plot stays empty)."""

    runs: dict
    measured: list[dict] | None
    trees: tuple = TREES


def methods(spec: SpecConfig, static: SpecConfig | None = None) -> dict[str, SpecConfig]:
    """The configurations compared for the eagle2 knobs in ``spec``; ``static``: the tree box's
    shape (default: EAGLE-1's tree at the same num_draft_tokens)."""
    out = {"vanilla": SpecConfig.from_knobs("vanilla"), "linear": SpecConfig.from_knobs("linear", spec.num_steps)}
    budget = spec.num_draft_tokens - 1  # linear verifying as many tokens as eagle2
    if budget != spec.num_steps and budget <= MAX_STEPS:
        out["linear (same verify budget)"] = SpecConfig.from_knobs("linear", budget)
    out["eagle2"] = SpecConfig.from_knobs("eagle2", spec.num_steps, spec.topk, spec.num_draft_tokens)
    out["static"] = static if static is not None else SpecConfig.from_knobs(
        "static", num_draft_tokens=spec.num_draft_tokens)
    if out["static"].num_draft_tokens != spec.num_draft_tokens:
        raise ValueError(f"The tree box holds a static tree of {out['static'].num_draft_tokens} tokens (root "
                         f"included): set num_draft_tokens to {out['static'].num_draft_tokens} to compare it with "
                         "eagle2 at the same budget, or empty the tree box.")
    return out


def draft_sources(wb, settings: Settings, spec: SpecConfig) -> dict[str, SpecConfig]:
    """vanilla, then eagle2 at ``spec``'s tree with each draft source the page can pick (the
    head only when one is loaded), named by the source (``head``, ``ngram:1-12``, ``exit:28``)."""
    eagle2 = SpecConfig.from_knobs("eagle2", spec.num_steps, spec.topk, spec.num_draft_tokens)
    out = {"vanilla": SpecConfig.from_knobs("vanilla")}
    for _, kind in DRAFT_CHOICES:
        try:
            source = settings.draft_source(wb, kind)
        except ValueError:
            if kind == "head":  # no head loaded: compare the others
                continue
            raise
        out[source.name] = replace(eagle2, draft=source)
    return out


def tree_slots(configs: dict[str, SpecConfig]) -> tuple:
    """The draft-source runs in the order of the tree plots (``SOURCE_SLOTS``); None for a source
    not run (the head, when none is loaded)."""
    by_kind = {spec.draft.kind: name for name, spec in configs.items() if spec.speculative}
    return tuple(by_kind.get(kind) for kind in SOURCE_SLOTS)


def decode(wb, spec: SpecConfig, sampling, ids: list[int], max_new: int) -> list[dict]:
    """Every step trace of one run."""
    engine = wb.engine(spec, sampling, trace=True)
    engine.add_requests([ids], max_new)
    traces = []
    while not engine.done:
        traces.extend(engine.step())
    return traces


def measure_cost(wb, prefix_len: int) -> list[dict] | None:
    """Verify cost per block size on this machine, or None when the benchmark module is absent."""
    try:
        from workbench.bench.cost import measure_verify_cost
    except ImportError:
        return None
    return measure_verify_cost(wb.target, sizes=COST_SIZES, prefix_len=prefix_len, repeats=3, warmup=1)


def short_name(spec: SpecConfig) -> str:
    """The setting's name for ``python -m workbench bench --methods`` (``SpecConfig.name``), or
    what it lacks one for."""
    try:
        return spec.name
    except ValueError:
        return "custom tree (no short name)" if spec.custom_tree else "no short name"


def elsewhere_html(configs: dict[str, SpecConfig]) -> str:
    """The speculative settings on screen as SGLang flags, a vLLM ``speculative_config`` and
    EAGLE's arguments, one row each, so a setting found here can be taken to a serving engine."""
    rows = [[f"<b>{html.escape(name)}</b>", f"<code>{html.escape(short_name(spec))}</code>",
             *(f"<code>{html.escape(framework_flags(spec)[f])}</code>" for f in FRAMEWORKS)]
            for name, spec in configs.items() if spec.speculative]
    return ("<h4>The same settings in SGLang, vLLM and the EAGLE repository</h4>"
            + table(["method", "--methods", *FRAMEWORKS], rows,
                    [{"method": n} for n, s in configs.items() if s.speculative], name="elsewhere")
            + note("SGLang's num_steps, topk and num_draft_tokens are ours one to one; EAGLE's depth is num_steps "
                   "- 1; vLLM verifies a chain or one fixed tree (no dynamic tree)."))


def structures(result: CompareResult | None, step: int) -> tuple:
    """The trees of ``result.trees`` (linear, eagle2 and static; or the draft sources) at the same
    step (1-based; step 1 is the prefill)."""
    if result is None:
        return (empty_figure("Press Compare.", 220),) * len(TREES)
    figs = []
    for name in result.trees:
        if name is None:
            figs.append(empty_figure("No third draft source to draw (no EAGLE head loaded).", 220))
            continue
        traces = result.runs[name]["traces"]
        tr = traces[min(int(step), len(traces)) - 1]
        fig = tree_figure(tr, height=380, compact=True)
        fig.update_layout(title_text=f"{name} · L = {tr['L']} · {fig.layout.title.text}")
        figs.append(fig)
    return tuple(figs)


def build_compare_tab(wb, inputs: list) -> None:
    """The tab's components and its two events (Compare, and the step slider)."""
    gr.Markdown(explain.COMPARE, elem_classes=["wb-explain"])
    result = gr.State(None)
    with gr.Row(equal_height=True):
        mode = gr.Radio(list(MODES), value=MODES[0], label="compare", elem_id="compare-mode", scale=2)
        max_new = gr.Number(32, label="max_new_tokens (each run)", precision=0, elem_id="compare-max-new")
        measure = gr.Checkbox(True, label="measure the verify cost on this machine", elem_id="compare-measure")
        button = gr.Button("Compare", variant="primary", elem_id="compare-btn")
    status = gr.Markdown(elem_id="compare-status")
    summary = gr.HTML(elem_id="compare-summary")
    with gr.Row():
        tau = gr.Plot(label="τ per step", elem_id="compare-tau")
        tokens = gr.Plot(label="tokens against target forwards", elem_id="compare-tokens")
    cost = gr.Plot(label="verify cost", elem_id="compare-cost")
    step = gr.Slider(1, 2, value=2, step=1, label="structures at step", elem_id="compare-step")
    with gr.Row():
        eagle_tree = gr.Plot(label=TREE_LABELS[1], elem_id="compare-eagle2-tree")
        static_tree = gr.Plot(label=TREE_LABELS[2], elem_id="compare-static-tree")
    linear_tree = gr.Plot(label=TREE_LABELS[0], elem_id="compare-linear-tree")
    trees = [linear_tree, eagle_tree, static_tree]  # TREES order
    outs = [result, status, summary, tau, tokens, cost, step, *trees]
    def on_compare(*values):  # a generator function, so Gradio streams its progress
        """Decode the prompt with each method, measure the verify cost, draw the comparison."""
        yield from run_compare(wb, *values)

    button.click(on_compare, [*inputs, max_new, measure, mode], outs, api_name="compare",
                 show_progress="minimal", show_progress_on=[status])
    step.release(structures, [result, step], trees, api_name="compare_step")


def run_compare(wb, *values):
    """Generator for the Compare button: progress lines, then every figure and the table."""
    *settings_values, max_new, measure, mode = values
    skip = (gr.skip(),) * 8
    by_source = mode == MODES[1]
    try:
        # methods: all drafted by the head; draft sources: each is checked by draft_sources
        settings = replace(Settings(*settings_values), method="eagle2", max_new_tokens=max_new,
                           draft="ngram" if by_source else "head")
        spec, sampling, ids, max_new = settings.build(wb)
        todo = draft_sources(wb, settings, spec) if by_source else \
            methods(spec, settings.static_spec() if str(settings.tree or "").strip() else None)
    except ValueError as e:
        yield (gr.skip(), error(str(e)), *skip)
        return
    runs = {}
    for i, (name, cfg) in enumerate(todo.items(), start=1):
        yield (gr.skip(), f"Decoding with {name} ({i}/{len(todo)}): `{cfg.describe()}`…", *skip)
        runs[name] = {"config": cfg.describe(), "traces": decode(wb, cfg, sampling, ids, max_new)}
    measured = None
    if measure:
        yield (gr.skip(), "Measuring the verify cost on this machine…", *skip)
        measured = measure_cost(wb, len(ids) + max_new // 2)
    drawn = tree_slots(todo) if by_source else TREES
    res = CompareResult(runs, measured, drawn)
    shortest = min(len(runs[name]["traces"]) for name in drawn if name is not None)
    unmeasured = "" if measure and measured is not None else " (verify cost not measured)"
    yield (res, f"Done: {len(runs)} runs of up to {max_new} tokens{unmeasured}.", summary_html(runs) + elsewhere_html(todo),
           tau_figure(runs), tokens_figure(runs), cost_figure(runs, measured),
           gr.Slider(minimum=1, maximum=max(2, shortest), value=min(2, shortest), interactive=shortest > 1),
           *structures(res, min(2, shortest)))
