"""The Calibration tab: the draft's confidence against the target's acceptance, for this
session's steps up to the one on screen (drawn when the tab is opened: ``views.calibration_views``)
and, precomputed by the benchmark, for the shipped head
(``workbench/assets/eagle-smollm2-135m/calibration.json``, written by
``python -m workbench.bench calibration``)."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from workbench.app import explain
from workbench.app.views import calibration_views
from workbench.viz.calibration import calibration_html, depth_figure, reliability_figure


ASSET = "workbench/assets/eagle-smollm2-135m/calibration.json"  # the shipped head's, as the docs name it


def shipped_calibration() -> dict | None:
    """The benchmark's calibration of the shipped head, or None when the file is absent."""
    from workbench.models.heads import default_draft_dir

    path = Path(default_draft_dir()) / "calibration.json"
    return json.loads(path.read_text()) if path.exists() else None


def shipped_source(meta: dict) -> str:
    """Which run the shipped calibration is, in words: its date and its file."""
    return f"The calibration run of {meta.get('date', 'an unrecorded date')} ({ASSET})"


def build_calibration_tab(wb, tab: gr.Tab, session: gr.State) -> None:
    """The tab's views; the session's part is drawn each time ``tab`` is selected."""
    gr.Markdown(explain.CALIBRATION, elem_classes=["wb-explain"])
    gr.Markdown("### This session (the steps up to the one on screen)")
    with gr.Row():
        plot = gr.Plot(label="this session", elem_id="calibration-plot")
        depth = gr.Plot(label="per depth, this session", elem_id="calibration-depth")
    table = gr.HTML(elem_id="calibration-table")
    tab.select(calibration_views, [session], [plot, depth, table], api_name="calibration",
               show_progress="minimal")
    bench = shipped_calibration()
    gr.Markdown("### The shipped head, measured by the benchmark")
    if bench is None:
        gr.Markdown("No precomputed calibration: run `python -m workbench.bench calibration`.")
        return
    meta = bench.get("meta", {})
    gr.Markdown(f"{shipped_source(meta)}, not measured on this page: "
                f"`{meta.get('command', '')}` · {meta.get('method', '')} · {meta.get('questions', '?')} questions "
                f"× {meta.get('max_new_tokens', '?')} tokens, temperature {meta.get('temperature', 0)}"
                + ("" if str(wb.draft_source).endswith("eagle-smollm2-135m") or "eagle-smollm2-135m" in
                   str(wb.draft_source) else " (this app runs another head: the session view above is its own)"))
    with gr.Row():
        gr.Plot(reliability_figure(bench["table"], "Shipped head (benchmark)"), label="the shipped head",
                elem_id="calibration-bench-plot")
        gr.Plot(depth_figure(bench["table"]), label="per depth, the shipped head", elem_id="calibration-bench-depth")
    gr.HTML(calibration_html(bench["table"]), elem_id="calibration-bench-table")
