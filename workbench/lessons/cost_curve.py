"""What a forward costs at N tokens, measured in interleaved rounds, and read at any N in between.

``time_forwards`` times forwards of several sizes (and, when asked, at other prefixes) in
interleaved rounds (``workbench.timing.interleaved``): each round times every size once, the
first size rotating, each value the median of ``repeats`` calls, so a slow spell of a shared
machine hits every size alike.

``curve_figure`` draws a ``workbench.cost_model.Curve``, the cost model's own curve, with its
non-decreasing fit (``workbench.timing.monotone``: a verify of more tokens never costs less, so a
dip between two sizes is noise, pooled): the lessons read forwards at any N through the same
interpolation as every prediction in the project.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np
import torch

from workbench.cost_model import Curve
from workbench.measure.cost import chain_batch, prefilled, time_ms
from workbench.lessons import smoke
from workbench.timing import Spread, interleaved


def verify_forwards(target, sizes, prefix_len: int) -> dict[int, Callable[[], object]]:
    """Per N: one target forward + logits over a chain of N new tokens after ``prefix_len``
    committed random tokens, as the engine's verify runs it (N = 1 is a decode step). The sizes
    share one pool, each writing its own slots. At smoke size, at most ``smoke.CONTEXT`` committed."""
    device = target.lm_head.weight.device
    prefix_len = smoke.context(prefix_len)
    pool = prefilled(target, target.new_kv_pool, vocab=target.config.vocab_size, prefix_len=prefix_len,
                     spare=sum(sizes) + 1, device=device)
    batches = {n: chain_batch(n, pool, pool.alloc.alloc(n)) for n in sizes}
    return {n: (lambda b=b: target.logits(target(b, pool.kv))) for n, b in batches.items()}


def time_forwards(forwards: dict[Hashable, Callable[[], object]], rounds: int, repeats: int = 3,
                  device: torch.device | str = "cpu", warmup: int = 1) -> dict[Hashable, list[float]]:
    """Interleaved rounds over every forward of ``forwards``: per key, one value per round, each
    the median ms of ``repeats`` calls after ``warmup`` untimed ones (``workbench.timing``); at
    smoke size (``workbench.lessons.smoke``) one call each."""
    repeats = smoke.repeats(repeats)
    return interleaved({k: (lambda f=f: time_ms(f, device, repeats, warmup)) for k, f in forwards.items()}, rounds)


def curve_figure(curve: Curve, title: str, height: int = 400, roofline: dict[int, float] | None = None,
                 rounds: int | None = None):
    """The medians with their range over the rounds (error bars), the non-decreasing fit, and the
    two references: flat at the decode step (memory-bound) and N decode steps (compute-bound);
    with ``roofline`` ({tokens: ms}, ``workbench.measure.floor.roofline_ms``), the machine's own
    floor at each size beside them. ``curve``: a cost model's ``Curve`` (its low and high per
    size, ``rounds`` the measurement's rounds). Both axes are logarithmic; the legend sits under
    the plot, clear of the title."""
    import plotly.graph_objects as go

    from workbench.lessons.figures import legend_below
    from workbench.viz.style import OKABE_ITO, base_layout, title_height

    n = list(curve.sizes)
    s = {k: Spread(m, lo, hi, rounds or 1) for k, m, (lo, hi) in zip(n, curve.ms, map(curve.range_at, n))}
    fit = curve.fit.ms
    fig = go.Figure([
        go.Scatter(x=n, y=[s[k].median for k in n], mode="markers",
                   name=f"measured: median, range of {rounds} rounds" if rounds else "measured", marker=dict(color=OKABE_ITO["blue"], size=8), meta="measured",
                   error_y=dict(type="data", symmetric=False, array=[s[k].high - s[k].median for k in n],
                                arrayminus=[s[k].median - s[k].low for k in n])),
        go.Scatter(x=n, y=list(fit), mode="lines", name="non-decreasing fit (what the sentences read)",
                   line=dict(color=OKABE_ITO["blue"]), meta="fit"),
        go.Scatter(x=n, y=[fit[0]] * len(n), mode="lines", name="flat: memory-bound",
                   line=dict(color=OKABE_ITO["grey"], dash="dash"), meta="flat"),
        go.Scatter(x=n, y=[fit[0] * k for k in n], mode="lines", name="N decode steps: compute-bound",
                   line=dict(color=OKABE_ITO["vermillion"], dash="dot"), meta="proportional"),
    ])
    if roofline is not None:
        fig.add_scatter(x=n, y=[roofline[k] for k in n], mode="lines",
                        name="roofline here: the larger of the memory and compute floors",
                        line=dict(color=OKABE_ITO["bluish_green"], width=3), meta="roofline")
    fig.update_layout(**base_layout(title, height))
    fig.update_layout(margin=dict(t=round(title_height(title, 900))))
    legend_below(fig, rows=2 if roofline is None else 3)
    fig.update_xaxes(type="log", title="tokens in the forward (N)", tickvals=n)
    lows = [s[k].low for k in n] + [fit[0]] + ([roofline[k] for k in n] if roofline is not None else [])
    fig.update_yaxes(type="log", title="ms", tickvals=ticks_125(min(lows), fit[0] * n[-1]))
    return fig


def ticks_125(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks (..., 20, 50, 100, 200, ...) covering ``lo`` to ``hi``: a log axis labelled
    at a few round values, not at every minor step."""
    if not 0 < lo <= hi:
        raise ValueError(f"need 0 < lo <= hi, got {lo} and {hi}")
    out, decade = [], 10.0 ** np.floor(np.log10(lo))
    while not out or out[-1] < hi:
        out += [m * decade for m in (1, 2, 5)]
        decade *= 10
    first = max(i for i, t in enumerate(out) if t <= lo)
    last = min(i for i, t in enumerate(out) if t >= hi)
    return [float(t) for t in out[first:last + 1]]
