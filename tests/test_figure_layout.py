"""The lessons' figures, built from small made-up data, checked for what can be checked without
a browser: no HTML-escaped entity in any rendered text, axis ranges that contain every point
(and its error bar), log-axis ticks that cover the data, and text boxes that do not overlap.

A text box is estimated from its length (0.6 of the font size per character, one line per
``<br>``): plotly measures text only in a browser, and the estimate errs on the wide side."""

import json

import pytest

from workbench.cost_model import Curve
from workbench.lessons.cost_curve import curve_figure
from workbench.lessons.figures import LEGEND_GAP, legend_below
from workbench.lessons.hindsight import grid_figure
from workbench.lessons.latency import latency_figure
from workbench.lessons.position import by_bin, position_figure, trend
from workbench.metrics import Latency
from workbench.timing import spread

ESCAPED = ("&quot;", "&amp;", "&lt;", "&gt;", "&#39;")
CHAR = 0.6  # mean glyph width over the font size


def texts(obj):
    """Every string a figure renders: titles, axis titles, trace names and text, annotations."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if key not in ("hovertemplate", "meta", "colorscale", "type", "mode", "fill", "hoverinfo"):
                yield from texts(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from texts(value)


def plain(fig) -> dict:
    return json.loads(fig.to_json())


def trace_extent(trace: dict, axis: str) -> tuple[float, float]:
    """Smallest and largest value a trace draws on ``axis`` ('x' or 'y'), error bars included."""
    values = [v for v in trace.get(axis, []) if v is not None]
    assert all(v == v for v in values), f"{trace.get('name')} draws a NaN on {axis}"
    err = trace.get(f"error_{axis}") or {}
    up = err.get("array") or [0] * len(values)
    down = err.get("arrayminus") or up
    return min(v - d for v, d in zip(values, down)), max(v + u for v, u in zip(values, up))


def check_ranges(fig) -> None:
    """Every explicit axis range contains the traces drawn on it; a log axis's ticks cover them."""
    layout = plain(fig)["layout"]
    for trace in plain(fig)["data"]:
        if trace.get("type") == "heatmap":
            continue
        for axis in ("x", "y"):
            name = f"{axis}axis{trace.get(f'{axis}axis', axis)[1:]}"
            spec = layout.get(name, {})
            lo, hi = trace_extent(trace, axis)
            if spec.get("range"):
                a, b = spec["range"]
                if spec.get("type") == "log":
                    a, b = 10 ** a, 10 ** b
                assert a <= lo and hi <= b, f"{name} range {spec['range']} cuts {trace.get('name')} ({lo}..{hi})"
            if spec.get("type") == "log" and spec.get("tickvals"):
                ticks = spec["tickvals"]
                assert min(ticks) <= lo * 1.0001 and hi <= max(ticks) * 1.0001, \
                    f"{name} ticks {ticks} do not cover {trace.get('name')} ({lo}..{hi})"


def check_text(fig) -> None:
    for text in texts(plain(fig)["layout"]):
        assert not any(e in text for e in ESCAPED), f"escaped entity in {text!r}"
    for text in texts(plain(fig)["data"]):
        assert not any(e in text for e in ESCAPED), f"escaped entity in {text!r}"


def boxes(fig, width: int = 900) -> list[tuple[str, float, float, float, float]]:
    """(text, x0, y0, x1, y1) in px from the top-left for the title and every paper-anchored
    annotation (subplot titles among them)."""
    layout = plain(fig)["layout"]
    height = layout["height"]
    margin = layout["margin"]
    plot_w, plot_h = width - margin["l"] - margin["r"], height - margin["t"] - margin["b"]
    out = []
    for a in layout.get("annotations", []):
        if a.get("xref") != "paper" or a.get("yref") != "paper":
            continue
        size = a.get("font", {}).get("size", 12)
        lines = a["text"].split("<br>")
        w, h = CHAR * size * max(map(len, lines)), 1.2 * size * len(lines)
        x = margin["l"] + a["x"] * plot_w
        y = margin["t"] + (1 - a["y"]) * plot_h
        x0 = {"left": x, "right": x - w}.get(a.get("xanchor"), x - w / 2)
        y0 = {"top": y, "bottom": y - h}.get(a.get("yanchor"), y - h / 2)
        out.append((a["text"], x0, y0, x0 + w, y0 + h))
    return out


def check_no_overlap(fig) -> None:
    placed = boxes(fig)
    for i, (t1, *b1) in enumerate(placed):
        for t2, *b2 in placed[i + 1:]:
            apart = b1[2] <= b2[0] or b2[2] <= b1[0] or b1[3] <= b2[1] or b2[3] <= b1[1]
            assert apart, f"{t1!r} overlaps {t2!r}"


def check_legend_clear(fig) -> None:
    """A legend under the plot starts far enough below it to clear the tick labels and the x title."""
    layout = plain(fig)["layout"]
    legend = layout.get("legend", {})
    if legend.get("yanchor") == "top" and legend.get("y", 1) < 0:
        plot_h = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
        assert -legend["y"] * plot_h >= LEGEND_GAP - 0.5, "the legend under the plot sits on its x axis title"
        assert layout["margin"]["b"] >= -legend["y"] * plot_h, "the legend under the plot falls off the figure"


def check(fig) -> None:
    check_text(fig)
    check_ranges(fig)
    check_no_overlap(fig)
    check_legend_clear(fig)


def test_the_cost_curve_figure_covers_its_points_and_ranges():
    curve = Curve(((1, 54.0), (2, 55.0), (4, 60.0), (8, 61.0), (16, 90.0)), low=(50, 52, 58, 59, 88),
                  high=(61, 67, 77, 70, 95))  # median and range of three rounds per size
    fig = curve_figure(curve, 'A forward over N tokens ("fp32", 1 thread & more)', rounds=3)
    check(fig)
    assert '"fp32", 1 thread & more' in plain(fig)["layout"]["title"]["text"]
    roof = {1: 20.0, 2: 20.0, 4: 20.0, 8: 24.0, 16: 48.0}  # below every point: the axis must reach it
    fig = curve_figure(curve, "with the roofline", roofline=roof)
    check(fig)
    line = next(t for t in plain(fig)["data"] if t.get("meta") == "roofline")
    assert list(line["y"]) == list(roof.values())


def test_the_latency_figure_holds_the_measured_points():
    fig = latency_figure(Latency(40.0, 50.0), Latency(41.0, 30.0), 32, spread([1.5, 1.6, 1.4]),
                         spread([1.6, 1.7, 1.65]), "A chain of 3")
    check(fig)


def test_the_position_figure_holds_every_bin_and_its_interval():
    per_prompt = {"a": [(1, 3), (4, 2), (6, 4), (40, 1), (41, 3)], "b": [(1, 2), (3, 4), (7, 1), (35, 4)],
                  "c": [(1, 4), (5, 4), (9, 2)]}
    rows = by_bin(per_prompt, 16)
    fig = position_figure(rows, trend(per_prompt), "Tokens kept per step along the answer")
    check(fig)


def test_the_hindsight_grid_titles_do_not_overlap():
    budgets, depths = (4, 6, 8), (2, 3, 4)
    grid = {(d, s): 1 + d / 10 + s / 20 for d in budgets for s in depths}
    grid[8, 4] = None
    fig = grid_figure({"high acceptance (coding, math)": grid, "low acceptance (translation, qa)": grid},
                      budgets, depths, "Mean τ per verify budget and levels")
    check(fig)
    layout = plain(fig)["layout"]
    assert all(layout[k]["type"] == "category" for k in layout if k.startswith(("xaxis", "yaxis")))  # every panel
    cells = [t for t in plain(fig)["data"][0]["text"] for t in t]
    assert "" in cells  # the unknown cell is left empty, not guessed


@pytest.mark.parametrize("text", ["say &quot;hi&quot;", "a &amp; b"])
def test_an_escaped_entity_is_caught(text):
    import plotly.graph_objects as go

    with pytest.raises(AssertionError, match="escaped entity"):
        check_text(go.Figure(layout=dict(title=text)))


def test_overlapping_titles_are_caught():
    import plotly.graph_objects as go

    fig = go.Figure(layout=dict(height=300, margin=dict(l=10, r=10, t=40, b=10), annotations=[
        dict(text="a long subplot title here", x=0.5, y=1.0, xref="paper", yref="paper", showarrow=False),
        dict(text="another long title here", x=0.55, y=1.0, xref="paper", yref="paper", showarrow=False)]))
    with pytest.raises(AssertionError, match="overlaps"):
        check_no_overlap(fig)


def test_a_legend_on_the_axis_title_is_caught_and_legend_below_clears_it():
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=[1, 2], y=[1, 2], name="a"),
                    layout=dict(height=300, margin=dict(l=10, r=10, t=60, b=80), xaxis_title="x",
                                legend=dict(orientation="h", yanchor="top", y=-0.2)))
    with pytest.raises(AssertionError, match="x axis title"):
        check_legend_clear(fig)
    check_legend_clear(legend_below(fig))
