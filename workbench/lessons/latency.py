"""Time per output token against end-to-end latency: two speedups that need not agree.

A request's end-to-end time is its time to the first token (TTFT: the prefill, one target
forward over the prompt, which speculation does not shorten) plus the time of every token after
it (TPOT each). Speculation shortens TPOT only, so its end-to-end speedup over plain decoding,

    (TTFT_plain + (n - 1) TPOT_plain) / (TTFT_spec + (n - 1) TPOT_spec),

starts near TTFT_plain / TTFT_spec (about 1) for a one-token answer and approaches the TPOT
speedup TPOT_plain / TPOT_spec as the answer grows. ``length_for`` is the answer length from
which it is within a given share of the TPOT speedup. TTFT, TPOT and end-to-end latency are
defined once, in ``workbench/metrics.py`` (``Latency``).
"""

from __future__ import annotations

import math

from workbench.metrics import Latency


def e2e_speedup(plain: Latency, spec: Latency, tokens: int) -> float:
    return plain.e2e_ms(tokens) / spec.e2e_ms(tokens)


def tpot_speedup(plain: Latency, spec: Latency) -> float:
    return plain.tpot_ms / spec.tpot_ms


def length_for(plain: Latency, spec: Latency, share: float = 0.9) -> int:
    """The fewest tokens from which the end-to-end speedup is at least ``share`` of the TPOT
    speedup (1 when it already is at one token)."""
    if not 0 < share < 1:
        raise ValueError(f"share must be in (0, 1), got {share}")
    goal = share * tpot_speedup(plain, spec)
    if e2e_speedup(plain, spec, 1) >= goal:
        return 1
    # plain.ttft + m plain.tpot >= goal (spec.ttft + m spec.tpot), m = tokens - 1
    rate = plain.tpot_ms - goal * spec.tpot_ms  # > 0 since share < 1
    return 1 + math.ceil((goal * spec.ttft_ms - plain.ttft_ms) / rate)


def latency_figure(plain: Latency, spec: Latency, measured_tokens: int, measured, tpot, name: str,
                   height: int = 380, longest: int = 1024):
    """The end-to-end speedup over the answer's length (from the medians), the TPOT speedup it
    approaches (a line, with the measured range as a band), and the end-to-end speedup measured
    at ``measured_tokens`` with its range (``measured``, ``tpot``: ``timing.Spread``)."""
    import plotly.graph_objects as go

    from workbench.lessons.figures import legend_below
    from workbench.viz.style import OKABE_ITO, base_layout

    lengths = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, longest, measured_tokens})
    fig = go.Figure([
        go.Scatter(x=[lengths[0], lengths[-1], lengths[-1], lengths[0]], y=[tpot.low, tpot.low, tpot.high, tpot.high],
                   fill="toself", mode="lines", line=dict(width=0), fillcolor="rgba(0,114,178,0.12)",
                   name=f"TPOT speedup, measured range ({tpot.runs} rounds)", meta="tpot band", hoverinfo="skip"),
        go.Scatter(x=[lengths[0], lengths[-1]], y=[tpot.median] * 2, mode="lines", meta="tpot",
                   line=dict(color=OKABE_ITO["blue"], dash="dash"), name="TPOT speedup (median)"),
        go.Scatter(x=lengths, y=[e2e_speedup(plain, spec, n) for n in lengths], mode="lines", meta="model",
                   line=dict(color=OKABE_ITO["vermillion"]), name="end-to-end speedup: TTFT + (n − 1) TPOT, medians"),
        go.Scatter(x=[measured_tokens], y=[measured.median], mode="markers", meta="measured",
                   marker=dict(color=OKABE_ITO["vermillion"], size=11, symbol="x"),
                   error_y=dict(type="data", symmetric=False, array=[measured.high - measured.median],
                                arrayminus=[measured.median - measured.low]),
                   name=f"end-to-end speedup measured at {measured_tokens} tokens (median, range)"),
    ])
    fig.update_layout(**base_layout(f"{name} over plain decoding: per output token and end to end", height))
    legend_below(fig, rows=2)
    fig.update_xaxes(type="log", title="answer length n (tokens)", tickvals=lengths)
    fig.update_yaxes(title="speedup (×)", range=[0, 1.1 * max(tpot.high, measured.high)])
    return fig
