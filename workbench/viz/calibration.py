"""Calibration figures: the draft's confidence against the target's acceptance.

Takes the table ``workbench.analysis.calibration.calibration_table`` computes from step traces
(or the same table stored as JSON by the benchmark) and draws it; nothing is measured here.

* reliability diagram: per bin, the mean confidence (x) against the acceptance rate (y), for
  draft probability vs P(accept | tried) and path score vs P(accept); the diagonal is a
  perfectly calibrated draft; marker area grows with the bin's count, up to ``MARKER_PX`` for
  the largest bin (hover for the counts), drawn whole at the axes' ends;
* per depth: P(accept | tried), P(accept) and the per-depth rate (reach);
* a table with every bin's counts.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from workbench.viz.html import note, table
from workbench.viz.style import OKABE_ITO, base_layout, empty_figure
from workbench.viz.tokens import or_dash

MARKER_PX = (6, 26)  # marker diameter of an empty bin and of the largest one
AXIS_PAD = 0.06  # room beyond 0 and 1 on both axes, so a marker at an end is drawn whole
SERIES = (  # (bins key, legend, colour, symbol)
    ("prob_bins", "draft probability → P(accept | tried)", OKABE_ITO["blue"], "circle"),
    ("score_bins", "path score → P(accept)", OKABE_ITO["orange"], "diamond"),
)


def reliability_figure(cal: dict, title: str = "Reliability: draft confidence against acceptance",
                       height: int = 420) -> go.Figure:
    """Both series over their non-empty bins, the diagonal, marker area ~ count."""
    if not cal["summary"]["nodes"]:
        return empty_figure("No verified draft nodes yet: step a speculative method.", height)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfectly calibrated",
                             line=dict(color=OKABE_ITO["grey"], dash="dash"), hoverinfo="skip"))
    most = max(b["count"] for key, *_ in SERIES for b in cal[key])
    small, large = MARKER_PX
    for key, name, colour, symbol in SERIES:
        bins = [b for b in cal[key] if b["count"]]
        fig.add_trace(go.Scatter(
            x=[b["mean_confidence"] for b in bins], y=[b["rate"] for b in bins], mode="lines+markers", name=name,
            cliponaxis=False, line=dict(color=colour),
            marker=dict(color=colour, symbol=symbol, opacity=0.85,
                        size=[small + (large - small) * math.sqrt(b["count"] / most) for b in bins]),
            customdata=[[b["lo"], b["hi"], b["count"], b["accepted"]] for b in bins],
            hovertemplate="bin %{customdata[0]:.1f}–%{customdata[1]:.1f}<br>mean confidence %{x:.3f}<br>"
                          "acceptance %{y:.3f}<br>%{customdata[3]} accepted of %{customdata[2]}<extra></extra>"))
    s = cal["summary"]
    fig.update_layout(**base_layout(f"{title} ({s['nodes']} nodes, {s['steps']} steps)", height))
    fig.update_layout(margin=dict(l=70, b=50))  # room for the axis titles beside the ticks
    fig.update_xaxes(title="draft confidence (bin mean)", range=[-AXIS_PAD, 1 + AXIS_PAD])
    fig.update_yaxes(title="accepted by the target (fraction)", range=[-AXIS_PAD, 1 + AXIS_PAD])
    return fig


def depth_figure(cal: dict, height: int = 320) -> go.Figure:
    """Per depth: P(accept | tried) and P(accept), counted over nodes, and ``reach``, counted over
    steps: of the steps whose walk accepted a node at depth k - 1, the fraction that accepted one at
    depth k (a step counts once however many siblings it tried there, and also when its tree had
    no child to try). The legend says which is which."""
    depths = cal["depths"]
    if not depths:
        return empty_figure("No verified draft nodes yet.", height)
    fig = go.Figure()
    for key, name, colour in (("p_accept_given_tried", "P(accept | tried)", OKABE_ITO["blue"]),
                              ("p_accept", "P(accept), all verified nodes", OKABE_ITO["orange"]),
                              ("reach", "per step: walk went on from depth k−1 to k", OKABE_ITO["bluish_green"])):
        fig.add_trace(go.Bar(x=[d["depth"] for d in depths], y=[d[key] for d in depths], name=name,
                             marker_color=colour,
                             customdata=[[d["nodes"], d["tried"], d["accepted"]] for d in depths],
                             hovertemplate="depth %{x}: %{y:.3f}<br>%{customdata[2]} accepted, %{customdata[1]} "
                                           "tried, %{customdata[0]} verified<extra>" + name + "</extra>"))
    fig.update_layout(**base_layout("Acceptance per depth", height), barmode="group")
    fig.update_xaxes(title="depth", dtick=1)
    fig.update_yaxes(title="fraction", range=[0, 1])
    return fig


def calibration_html(cal: dict) -> str:
    """Every bin with its counts, for both series, and the summary (ECE = count-weighted mean
    |acceptance - confidence|)."""
    s = cal["summary"]
    rows, attrs = [], []
    for pb, sb in zip(cal["prob_bins"], cal["score_bins"]):
        rows.append([f"{pb['lo']:.1f}–{pb['hi']:.1f}", str(pb["count"]), str(pb["accepted"]),
                     or_dash(pb["rate"], ".3f"), str(sb["count"]), str(sb["accepted"]), or_dash(sb["rate"], ".3f")])
        attrs.append({"bin": f"{pb['lo']:.1f}", "prob-count": pb["count"], "prob-accepted": pb["accepted"],
                      "score-count": sb["count"], "score-accepted": sb["accepted"]})
    head = ["confidence bin", "tried (by draft prob)", "accepted", "P(accept | tried)",
            "verified (by path score)", "accepted", "P(accept)"]
    p = {k: or_dash(s[k], ".3f") for k in ("p_accept_given_tried", "p_accept", "ece_prob", "ece_score")}
    summary = (f"{s['steps']} steps, {s['nodes']} verified nodes, {s['tried']} tried (parent accepted), "
               f"{s['accepted']} accepted: P(accept | tried) = {p['p_accept_given_tried']}, "
               f"P(accept) = {p['p_accept']}; ECE draft prob {p['ece_prob']}, path score {p['ece_score']}.")
    return (table(head, rows, attrs, name="calibration") +
            note(summary + " Nodes dropped at the rerank were never verified and are not counted."))
