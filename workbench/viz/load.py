"""Speculation under load, drawn: what each decode step ran, and how each policy did against ``off``.

``steps_figure`` takes, per policy, the decode steps of a load run as dicts (``bench.load.StepLog``
fields: ``batch``, ``speculative``, ``tau``): three panels over the step number, the running
batch, speculation on or off (a lane per policy), and τ (tokens per request of a speculative step; none
for a plain one). ``bars_figure`` takes per policy its tokens/s and TPOT p50 and puts each
beside ``off``'s, the ratio written on the bar.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.viz.style import OKABE_ITO, base_layout

# One colour per policy, in the order they ran; off always black.
COLOURS = [OKABE_ITO[c] for c in ("blue", "vermillion", "bluish_green", "orange", "reddish_purple", "sky_blue")]


def policy_colours(names: list[str]) -> dict[str, str]:
    others = iter(COLOURS * (1 + len(names) // len(COLOURS)))
    return {n: OKABE_ITO["black"] if n == "off" else next(others) for n in names}


def steps_figure(runs: dict[str, list[dict]], title: str = "Each decode step: running batch, speculation, τ",
                 height: int = 520) -> go.Figure:
    """Three panels sharing the decode-step axis; one trace per policy (``runs``: name -> its
    decode steps, in order)."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("running batch", "speculation: on (filled) or off (grey)",
                                        "τ (tokens per request)"))
    colours = policy_colours(list(runs))
    for name, steps in runs.items():
        x = list(range(1, len(steps) + 1))
        look = dict(legendgroup=name, line=dict(color=colours[name], width=1.5), marker=dict(color=colours[name]))
        fig.add_scatter(x=x, y=[s["batch"] for s in steps], name=name, mode="lines", line_shape="hv", meta="batch",
                        **look, row=1, col=1)
        on = [int(s["speculative"]) for s in steps]  # one lane per policy: a filled square where it speculated
        fig.add_scatter(x=x, y=[name] * len(x), customdata=on, name=name, mode="markers", meta="speculative",
                        showlegend=False, legendgroup=name, hovertemplate="step %{x}: %{customdata}<extra></extra>",
                        marker=dict(symbol="square", size=7, color=[colours[name] if v else "#DDDDDD" for v in on]),
                        row=2, col=1)
        fig.add_scatter(x=x, y=[s["tau"] if s["speculative"] else None for s in steps], name=name, mode="markers",
                        meta="tau", showlegend=False, marker_size=5, legendgroup=name,
                        marker_color=colours[name], row=3, col=1)
    fig.update_layout(**base_layout(title, height))
    fig.update_xaxes(automargin=True, gridcolor="#EEEEEE")
    fig.update_yaxes(automargin=True, gridcolor="#EEEEEE")  # the lanes' policy names stay in view
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=list(runs)[::-1], row=2, col=1)
    fig.update_yaxes(rangemode="tozero", row=3, col=1)
    fig.update_xaxes(title_text="decode step", row=3, col=1)
    return fig


def bars_figure(rows: dict[str, dict], title: str = "Against off: tokens/s (higher is better), TPOT p50 (lower is "
                                                     "better)", height: int = 360) -> go.Figure:
    """Two bar panels, one bar per policy (``rows``: name -> {"throughput_tok_s", "tpot_ms_p50"}),
    each labelled with its ratio to ``off``'s when an ``off`` row is there."""
    names = list(rows)
    colours = policy_colours(names)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("output tokens/s", "TPOT p50 (ms)"))
    for col, key in ((1, "throughput_tok_s"), (2, "tpot_ms_p50")):
        values = [rows[n].get(key) for n in names]
        base = rows.get("off", {}).get(key)
        text = [f"{v / base:.2f}x off" if v is not None and base else "" for v in values]
        fig.add_bar(x=names, y=values, text=text, textposition="outside", cliponaxis=False, meta=key,
                    showlegend=False, marker_color=[colours[n] for n in names], row=1, col=col)
        top = max((v for v in values if v is not None), default=0)
        fig.update_yaxes(range=[0, 1.15 * top or 1], row=1, col=col)  # room for the labels above the bars
    fig.update_layout(**base_layout(title, height))
    return fig


def curves_figure(rows: list[dict], mode: str = "closed", title: str | None = None, height: int = 380) -> go.Figure:
    """Tokens/s and TPOT p50 against the load (``load.json``'s rows of one loop), a line per
    policy: each point the median over the timed rounds, its bar the range (low to high)."""
    rows = [r for r in rows if r["mode"] == mode]
    what = "concurrency (requests in flight)" if mode == "closed" else "arrival rate (requests/s)"
    # Each panel says what it shows on its y axis: subplot titles would sit where the legend is.
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    names = list(dict.fromkeys(r["policy"] for r in rows))
    colours = policy_colours(names)
    for name in names:
        mine = sorted((r for r in rows if r["policy"] == name), key=lambda r: r["load"])
        for col, key in ((1, "throughput_tok_s"), (2, "tpot_ms_p50")):
            spans = [r["spreads"][key] for r in mine]
            fig.add_scatter(x=[r["load"] for r in mine], y=[s["median"] for s in spans], name=name, mode="lines+markers",
                            legendgroup=name, showlegend=col == 1, line=dict(color=colours[name], width=1.5),
                            marker=dict(color=colours[name], size=6), meta=key,
                            error_y=dict(type="data", symmetric=False, thickness=1,
                                         array=[s["high"] - s["median"] for s in spans],
                                         arrayminus=[s["median"] - s["low"] for s in spans]),
                            row=1, col=col)
    loads = sorted({r["load"] for r in rows})
    fig.update_layout(**base_layout(title or f"Under load, {mode} loop: median of the rounds, bars the range", height))
    fig.update_xaxes(title_text=what, type="log", tickvals=loads, ticktext=[f"{x:g}" for x in loads],
                     gridcolor="#EEEEEE", automargin=True)
    fig.update_yaxes(rangemode="tozero", gridcolor="#EEEEEE", automargin=True)
    fig.update_yaxes(title_text="tokens/s (higher is better)", row=1, col=1)
    fig.update_yaxes(title_text="TPOT p50, ms (lower is better)", row=1, col=2)
    return fig
