"""Every candidate the draft grew in one step, by level and path score, and where the rerank cut.

x is the candidate's level (the draft forward that proposed it), y its path score s (log scale),
a grey line joins it to its parent. Filled markers were expanded (in a frontier), open ones were
not; diamonds were kept by the rerank, circles dropped. The dashed line is the rerank's cut-off,
the lowest path score kept: everything kept lies on or above it. The candidates the lesson is
about, those kept by the rerank or expanded in a frontier, are named in the picture
(``layout.place_labels``: no two labels overlap, a thin line leads to a label moved off its
point); the others, which crowd the low scores of every level, on hover. The log axis is ticked
at powers of ten only, labelled as numbers (a "2" or "5" between them would read as a value).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from workbench.viz.labels import Axes, name_points
from workbench.viz.layout import legend_rows
from workbench.viz.style import LEGEND_ROW, NODE, OKABE_ITO, base_layout, empty_figure, title_height
from workbench.viz.tokens import num, plotly_text, show
from workbench.viz.tree import cutoff

FLOOR = 1e-7  # a trace rounds path scores to 6 decimals: a 0 is drawn here, on the log axis
LEFT, RIGHT, BOTTOM = 70, 20, 50  # px margins: y ticks and title, room past the last level, x title


def _y(candidate: dict) -> float:
    return max(candidate["score"], FLOOR)


def _encodings(expanded: bool, kept: bool) -> tuple[str, dict]:
    """Legend name and marker of a (expanded, kept) group."""
    colour = NODE["accepted"].colour if kept else OKABE_ITO["grey"]
    symbol = ("diamond" if kept else "circle") + ("" if expanded else "-open")
    name = f"{'kept' if kept else 'dropped'} at rerank, {'expanded' if expanded else 'not expanded'}"
    return name, dict(symbol=symbol, size=10 if kept else 8, color=colour, line=dict(width=1.5, color=colour))


def path_score_figure(trace: dict, width: int = 900, height: int = 460) -> go.Figure:
    """The candidates of a spec step by level and path score, each named, the rerank cut-off
    drawn; ``width`` x ``height`` px (the label placement assumes that size)."""
    if trace["kind"] != "spec":
        return empty_figure("Only a speculative step drafts candidates.", 220)
    cands = trace["draft"]["candidates"]
    kept, expanded = set(trace["draft"]["kept"]), {i for lv in trace["draft"]["levels"] for i in lv["frontier"]}
    by = {c["index"]: c for c in cands}
    cut = cutoff(trace)
    title = (f"Step {trace['step']}: {len(cands)} candidates by level and path score s; the rerank kept the best "
             f"{len(kept)} (num_draft_tokens − 1, s ≥ {num(cut)}); the kept and the expanded named, the "
             "others on hover")
    fig = go.Figure()
    for c in cands:
        parent = 1.0 if c["parent"] == -1 else _y(by[c["parent"]])
        fig.add_scatter(x=[c["level"] - 1, c["level"]], y=[parent, _y(c)], mode="lines", showlegend=False,
                        line=dict(color="#DDDDDD", width=1), hoverinfo="skip")
    top_level = max(c["level"] for c in cands)
    fig.add_scatter(x=[0.5, top_level + 0.3], y=[max(cut, FLOOR)] * 2, mode="lines", meta="cutoff",
                    line=dict(color=OKABE_ITO["vermillion"], dash="dash", width=1.5),
                    name="rerank cut-off (lowest kept s)")
    for exp in (True, False):
        for keep in (True, False):
            group = [c for c in cands if (c["index"] in expanded) == exp and (c["index"] in kept) == keep]
            if group:
                name, marker = _encodings(exp, keep)
                fig.add_scatter(x=[c["level"] for c in group], y=[_y(c) for c in group], mode="markers",
                                name=name, marker=marker, meta=name, customdata=[c["index"] for c in group],
                                hovertext=[f"{plotly_text(show(c['text'], 40))}: p {c['prob']:.3g}, s {c['score']:.3g}"
                                           for c in group], hoverinfo="text")
    root = trace["tree"]["nodes"][0]
    fig.add_scatter(x=[0], y=[1.0], mode="markers", name="root", meta="root",
                    marker=dict(symbol=NODE["root"].symbol, size=12, color=NODE["root"].colour))
    legend = [t.name for t in fig.data if t.meta]
    top = round(title_height(title, width) + legend_rows(legend, width - LEFT - RIGHT) * LEGEND_ROW)
    x_range = [-0.3, top_level + 0.9]
    lo = math.log10(min(_y(c) for c in cands))
    y_range = [lo - 0.15, 0.25]
    named = [c for c in cands if c["index"] in kept or c["index"] in expanded]
    name_points(fig, [(0, 1.0, plotly_text(show(root["text"])))]
                + [(c["level"], _y(c), plotly_text(show(c["text"]))) for c in named],
                Axes(x_range, y_range, width - LEFT - RIGHT, height - top - BOTTOM, log_y=True))
    fig.update_layout(**base_layout(title, height, width=width))
    fig.update_layout(width=width, margin=dict(l=LEFT, r=RIGHT, t=top, b=BOTTOM, autoexpand=False),
                      legend=dict(xanchor="left", x=0))
    fig.update_xaxes(title="level (depth)", dtick=1, range=x_range, automargin=False)
    decades = list(range(math.floor(y_range[0]) + 1, math.floor(y_range[1]) + 1))  # 10^k inside the range
    fig.update_yaxes(title="path score s (log)", type="log", range=y_range, automargin=False,
                     tickvals=[10.0 ** k for k in decades], ticktext=[decade_label(k) for k in decades])
    return fig


def decade_label(k: int) -> str:
    """10^k as a reader writes it: 1, 0.1, 0.01, 0.001, then 1e-4, 1e-5, ..."""
    return f"{10.0 ** k:g}" if k >= -3 else f"1e{k}"
