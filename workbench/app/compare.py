"""The Compare tab: one prompt decoded by vanilla, linear (same ``num_steps``), linear (same verify
budget), eagle2 and static (same ``num_draft_tokens``), side by side, with the verify cost measured on this machine;
or, in its second mode, by vanilla and eagle2 at the page's tree with each draft source the app can run (every
registered one, ``drafts.registry.SOURCES``; the head or a draft model when it is the one loaded).

Each run is a fresh Engine with tracing on; everything shown comes from those traces (and from
``workbench.measure.cost.measure_verify_cost`` for the cost curve).
"""

from __future__ import annotations

import html
import weakref
from dataclasses import dataclass, replace

import gradio as gr

from workbench.app import explain
from workbench.app.state import Settings, draft_choices
from workbench.app.views import error
from workbench.engine.config import MAX_STEPS, SpecConfig
from workbench.engine.drafts.head import HeadSource
from workbench.engine.drafts.registry import loads_nothing, source_of
from workbench.engine.frameworks import FRAMEWORKS, framework_flags
from workbench.viz.compare import (cost_figure, gap_html, stops_figure, stops_html, summary_html, tau_figure,
                                   tokens_figure)
from workbench.viz.html import note, table
from workbench.viz.style import empty_figure
from workbench.viz.tree import tree_figure

COST_SIZES = (1, 2, 4, 8, 16, 32)
MODES = ("methods (vanilla, chains, trees)", "draft sources (each one the app can run) at this tree")
# What the methods mode draws in each tree plot, in words.
METHOD_TREES = {"eagle2": "eagle2: the dynamic tree", "static": "static: a fixed shape (EAGLE-1)",
                "linear": "linear: the chain"}


@dataclass(frozen=True)
class TreeSlot:
    """One tree plot of the tab, and the run it draws in each mode."""

    name: str  # its output's name (and, with "compare-" before it, its element id)
    method: str  # methods mode: the run of this name (draft-sources mode: the slot's place, in the sources' order)


SLOTS = (TreeSlot("tree-1", "eagle2"), TreeSlot("tree-2", "static"), TreeSlot("tree-3", "linear"))
SLOT_WIDTHS = {"tree-1": 560, "tree-2": 560, "tree-3": 900}  # px: two plots side by side, then one across the page
# The Compare button's outputs, by name, in the order the API returns them (``result`` is state).
OUTPUTS = ("result", "status", "summary", "stops", "tau", "tokens", "cost", "step", *(s.name for s in SLOTS))


@dataclass(frozen=True)
class TreePlot:
    """What one tree plot shows: its label (the run it draws) and the figure."""

    label: str
    figure: object


@dataclass
class CompareResult:
    """Traces per method (``viz.compare`` run format), the measured verify cost, if any, and the
    run drawn in each tree plot (``SLOTS`` order; None: that plot stays empty), with its label."""

    runs: dict
    measured: list[dict] | None
    drawn: tuple
    labels: tuple


def methods(spec: SpecConfig, static: SpecConfig | None = None) -> dict[str, SpecConfig]:
    """The configurations compared for the eagle2 knobs in ``spec``, each drafting from
    ``spec.draft``; ``static``: the tree box's shape, of the same num_draft_tokens
    (``Settings.static_spec`` checks it; default: EAGLE-1's tree at that size)."""
    out = {"vanilla": SpecConfig.from_knobs("vanilla"),
           "linear": SpecConfig.from_knobs("linear", num_steps=spec.num_steps)}
    budget = spec.num_draft_tokens - 1  # linear verifying as many tokens as eagle2
    if budget != spec.num_steps and budget <= MAX_STEPS:
        out["linear (same verify budget)"] = SpecConfig.from_knobs("linear", num_steps=budget)
    out["eagle2"] = SpecConfig.from_knobs("eagle2", num_steps=spec.num_steps, topk=spec.topk,
                                          num_draft_tokens=spec.num_draft_tokens)
    out["static"] = static if static is not None else SpecConfig.from_knobs(
        "static", num_draft_tokens=spec.num_draft_tokens)
    return {name: replace(cfg, draft=spec.draft) if cfg.speculative else cfg for name, cfg in out.items()}


def draft_sources(wb, settings: Settings, spec: SpecConfig) -> dict[str, SpecConfig]:
    """vanilla, then eagle2 at ``spec``'s tree with each draft source the page can pick (one
    that needs a head or a draft model only when it is the one loaded), named by the source
    (``head``, ``ngram:1-12``, ``exit:28``, ``model:DIR``)."""
    eagle2 = SpecConfig.from_knobs("eagle2", num_steps=spec.num_steps, topk=spec.topk,
                                   num_draft_tokens=spec.num_draft_tokens)
    out = {"vanilla": SpecConfig.from_knobs("vanilla")}
    for _, kind in draft_choices():
        try:
            source = settings.draft_source(wb, kind)
        except ValueError:
            if source_of(kind).needs.loaded:  # not the one loaded: compare the others
                continue
            raise
        out[source.name] = replace(eagle2, draft=source)
    return out


def methods_draft(wb) -> str:
    """The kind the methods mode drafts with: the loaded draft when it has a distribution to
    rank a tree by (the head, a draft model, an early exit named at start), else the head (whose
    absence the status line then names)."""
    loaded = wb.loaded_draft
    return loaded.kind if loaded is not None and not loaded.model_free else HeadSource.kind


def drawn_runs(configs: dict[str, SpecConfig], by_source: bool) -> tuple[tuple, tuple]:
    """(run name or None, label) per tree plot (``SLOTS`` order): the method's run, or in the
    draft-sources mode the eagle2 runs in the sources' order, one per plot (None: fewer sources
    ran than there are plots; the head and a draft model share the one loaded draft, so at most
    three of the four run at once)."""
    if not by_source:
        return tuple(s.method for s in SLOTS), tuple(METHOD_TREES[s.method] for s in SLOTS)
    drafted = [name for name, spec in configs.items() if spec.speculative][: len(SLOTS)]
    names = tuple(drafted) + (None,) * (len(SLOTS) - len(drafted))
    labels = tuple(f"{name}: eagle2 drafted by {configs[name].draft.label()}" if name else
                   "no further draft source ran" for name in names)
    return names, labels


def decode(wb, spec: SpecConfig, *, sampling, ids: list[int], max_new: int) -> list[dict]:
    """Every step trace of one run."""
    traces = []
    wb.generate([ids], spec, sampling, max_new, trace_sink=traces.append)
    return traces


def measure_cost(wb, prefix_len: int) -> list[dict]:
    """Verify cost per block size on this machine, each point with the roofline at its size
    (``roofline_ms``: the larger of the memory and compute floors measured here,
    ``workbench.measure.floor``) and, where the target's few-row products run another
    implementation than ``F.linear`` (``workbench.cpu_choices``), the same forward with every
    product by ``F.linear`` (``plain_ms``, the two timed in turns)."""
    from workbench.measure.cost import measure_verify_cost, measure_verify_cost_beside
    from workbench.measure.floor import compute_floor, memory_floor, roofline_ms
    from workbench.models.linear import plain_products

    timing = dict(sizes=COST_SIZES, prefix_len=prefix_len, repeats=3, warmup=1)
    if not wb.linear_order.plain_everywhere and wb.target.lm_head.weight.device.type == "cpu":
        points, plain = measure_verify_cost_beside(wb.target, lambda: plain_products(wb.target), **timing)
        points = [dict(p, plain_ms=q["ms"]) for p, q in zip(points, plain)]
    else:
        points = measure_verify_cost(wb.target, **timing)
    if wb.target not in _FLOORS:  # the machine's bandwidth and peak: measured once per loaded target, not per press
        _FLOORS[wb.target] = memory_floor(wb.target), compute_floor(wb.target)
    floor, compute = _FLOORS[wb.target]
    compute = dict(compute, prefix=prefix_len)
    return [dict(p, roofline_ms=round(roofline_ms(floor, compute, p["tokens"]), 3)) for p in points]


_FLOORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loaded target -> (memory floor, compute floor)


def price_runs(wb, runs: dict) -> dict[str, str]:
    """Sets each run's ``model``: this machine's cost model for the run's own draft source
    (``step_cost.step_costs``: measured once per machine and source, then read from the cache;
    plain decoding by any of them). Returns the runs left without one, each with the reason."""
    from workbench.measure.step_cost import draft_of, step_costs

    unpriced: dict[str, str] = {}
    models = step_costs(wb, {name: draft_of(run["spec"]) for name, run in runs.items()}, unpriced=unpriced,
                        log=lambda msg: None)
    for name, model in models.items():
        runs[name]["model"] = model
    return unpriced


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
                   "- 1; vLLM verifies chains only (it removed tree attention), so a tree goes there as a chain "
                   "as deep as the tree."))


def structures(result: CompareResult | None, step: int) -> dict[str, TreePlot]:
    """The tree plots (by slot name) at the same step (1-based; step 1 is the prefill), each
    labelled and titled by the run it draws."""
    if result is None:
        return {s.name: TreePlot(METHOD_TREES[s.method], empty_figure("Press Compare.", 220)) for s in SLOTS}
    out = {}
    for slot, name, label in zip(SLOTS, result.drawn, result.labels):
        if name is None:
            out[slot.name] = TreePlot(label, empty_figure("No further draft source to draw (the head or a draft "
                                                          "model runs only when it is the one loaded).", 220))
            continue
        traces = result.runs[name]["traces"]
        tr = traces[min(int(step), len(traces)) - 1]
        width = SLOT_WIDTHS[slot.name]  # as wide as its plot on the page: no label cut short of it
        fig = tree_figure(tr, height=380, compact=True, width=width, label=f"{name} · L = {tr['L']}")
        if tr["kind"] != "spec":  # a prefill's or vanilla step's note: the run in front of it
            fig.update_layout(title_text=f"{name} · L = {tr['L']} · {fig.layout.title.text}")
        out[slot.name] = TreePlot(label, fig)
    return out


def build_compare_tab(wb, inputs: dict) -> None:
    """The tab's components and its two events (Compare, and the step slider); ``inputs``: the
    page's input components by ``Settings`` field, in field order."""
    gr.Markdown(explain.COMPARE, elem_classes=["wb-explain"])
    with gr.Row(equal_height=True):
        mode = gr.Radio(list(MODES), value=MODES[0], label="compare", elem_id="compare-mode", scale=2)
        max_new = gr.Number(32, label="max_new_tokens (each run)", precision=0, elem_id="compare-max-new")
        measure = gr.Checkbox(True, label="measure the verify cost on this machine", elem_id="compare-measure")
        button = gr.Button("Compare", variant="primary", elem_id="compare-btn")
    c = {"result": gr.State(None), "status": gr.Markdown(elem_id="compare-status"),
         "summary": gr.HTML(elem_id="compare-summary"),
         "stops": gr.Plot(label="stop causes per run", elem_id="compare-stops")}
    with gr.Row():
        c["tau"] = gr.Plot(label="τ per step", elem_id="compare-tau")
        c["tokens"] = gr.Plot(label="tokens against target forwards", elem_id="compare-tokens")
    c["cost"] = gr.Plot(label="verify cost", elem_id="compare-cost")
    c["step"] = gr.Slider(1, 2, value=2, step=1, label="structures at step", elem_id="compare-step")
    first = structures(None, 1)
    with gr.Row():
        for slot in SLOTS[:2]:
            c[slot.name] = gr.Plot(label=first[slot.name].label, elem_id=f"compare-{slot.name}")
    c[SLOTS[2].name] = gr.Plot(label=first[SLOTS[2].name].label, elem_id=f"compare-{SLOTS[2].name}")
    assert tuple(c) == OUTPUTS
    trees = [c[s.name] for s in SLOTS]
    names = tuple(inputs)

    def on_compare(*values):  # a generator function, so Gradio streams its progress
        """Decode the prompt with each method, measure the verify cost, draw the comparison."""
        *settings_values, max_new_tokens, measured, chosen = values
        for update in run_compare(wb, dict(zip(names, settings_values, strict=True)), max_new=max_new_tokens,
                                  measure=measured,
                                  mode=chosen):
            yield {c[k]: _component_value(v) for k, v in update.items()}

    def at_step(res, k):
        """The tree plots at step ``k`` of the runs on screen."""
        return tuple(_component_value(p) for p in structures(res, k).values())

    button.click(on_compare, [*inputs.values(), max_new, measure, mode], list(c.values()), api_name="compare",
                 show_progress="minimal", show_progress_on=[c["status"]])
    c["step"].release(at_step, [c["result"], c["step"]], trees, api_name="compare_step")


def _component_value(v):
    """A tree plot as its labelled component; anything else as it is."""
    return gr.Plot(value=v.figure, label=v.label) if isinstance(v, TreePlot) else v


def run_compare(wb, values: dict, *, max_new, measure, mode):
    """Generator for the Compare button, by output name (``result``, ``status``, ``summary``,
    ``tau``, ``tokens``, ``cost``, ``step`` and the slots' names): progress lines, then every
    figure and the table. ``values``: the page's inputs by
    ``Settings`` field."""
    by_source = mode == MODES[1]
    try:
        # methods: all drafted by the loaded draft; draft sources: each is checked by draft_sources
        # (the spec built here lends them its tree only, so it drafts with a source that needs
        # nothing loaded)
        settings = replace(Settings.of(**values), method="eagle2", max_new_tokens=max_new,
                           draft=loads_nothing().kind if by_source else methods_draft(wb))
        spec, sampling, ids, max_new = settings.build(wb)
        todo = draft_sources(wb, settings, spec) if by_source else \
            methods(spec, settings.static_spec() if str(settings.tree or "").strip() else None)
    except ValueError as e:
        yield {"status": error(str(e))}
        return
    runs = {}
    for i, (name, cfg) in enumerate(todo.items(), start=1):
        yield {"status": f"Decoding with {name} ({i}/{len(todo)}): `{cfg.describe()}`…"}
        runs[name] = {"config": cfg.describe(), "traces": decode(wb, cfg, sampling=sampling, ids=ids, max_new=max_new),
                      "spec": cfg}
    measured = None
    if measure:
        yield {"status": "Measuring the verify cost on this machine…"}
        measured = measure_cost(wb, len(ids) + max_new // 2)
        yield {"status": "Reading this machine's cost model (measured once per draft source, then cached)…"}
        unpriced = price_runs(wb, runs)  # a run whose source cannot be priced stays, without a prediction
    res = CompareResult(runs, measured, *drawn_runs(todo, by_source))
    shortest = min(len(runs[name]["traces"]) for name in res.drawn if name is not None)
    unmeasured = "" if measure and measured is not None else " (verify cost not measured)"
    if measure and unpriced:
        unmeasured += (" (no cost model, so no predicted speedup, for "
                       + "; ".join(f"{name}: {why}" for name, why in unpriced.items()) + ")")
    yield {"result": res, "status": f"Done: {len(runs)} runs of up to {max_new} tokens{unmeasured}.",
           "summary": summary_html(runs) + gap_html(runs) + stops_html(runs) + elsewhere_html(todo),
           "stops": stops_figure(runs), "tau": tau_figure(runs), "tokens": tokens_figure(runs),
           "cost": cost_figure(runs, measured),
           "step": gr.Slider(minimum=1, maximum=max(2, shortest), value=min(2, shortest), interactive=shortest > 1),
           **structures(res, min(2, shortest))}
