"""Does acceptance decay over a long output? The walk length of each step against its position.

A step starting at output position p (tokens already emitted, the prefill's first included)
keeps n + 1 tokens, n the drafts its walk accepted. The walk's count is used, not what the step
emitted: the last step of a request cut at ``max_new_tokens`` emits fewer than it accepted,
which would show as a decay at the very end that the head never had.

Steps of one answer are not independent, so the slope of walk length over position is
bootstrapped over prompts (``intervals.bootstrap``): the interval says whether the trend is
larger than the differences between answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.lessons.intervals import Interval, bootstrap

PER = 100  # the slope is said per this many output tokens


def steps_by_position(accept_lengths: list[int], drafts_accepted: list[int]) -> list[tuple[int, int]]:
    """(position at the step's start, walk length n + 1) for every verify step of one request."""
    if len(accept_lengths) != len(drafts_accepted):
        raise ValueError("one emitted count and one walk count per step")
    position, out = 1, []
    for emitted, n in zip(accept_lengths, drafts_accepted):
        out.append((position, n + 1))
        position += emitted
    return out


def _slope(groups: list[list[tuple[int, int]]]) -> float:
    """Least-squares slope of walk length over position, pooled over the groups' steps, per ``PER`` tokens."""
    xs = np.array([p for g in groups for p, _ in g], dtype=float)
    ys = np.array([w for g in groups for _, w in g], dtype=float)
    if len(set(xs)) < 2:
        return 0.0
    return float(np.polyfit(xs, ys, 1)[0] * PER)


@dataclass(frozen=True)
class Trend:
    slope: Interval  # tokens per step gained (lost: < 0) per ``PER`` output tokens, interval over prompts
    intercept: float  # the fitted line at position 0

    def at(self, position: float) -> float:
        return self.intercept + self.slope.estimate * position / PER


def trend(per_prompt: dict[str, list[tuple[int, int]]], seed: int = 0) -> Trend:
    """The straight-line fit of walk length over position, pooled over the prompts' steps, with
    the bootstrap interval of its slope over the prompts."""
    xs = np.array([p for g in per_prompt.values() for p, _ in g], dtype=float)
    ys = np.array([w for g in per_prompt.values() for _, w in g], dtype=float)
    return Trend(bootstrap(list(per_prompt.values()), _slope, seed=seed), float(np.polyfit(xs, ys, 1)[1]))


def by_bin(per_prompt: dict[str, list[tuple[int, int]]], width: int, seed: int = 0) -> list[dict]:
    """Per bin of ``width`` output positions: the steps, the prompts and the mean walk length,
    with its bootstrap interval over the prompts that reach the bin (None with fewer than 2)."""
    top = max(p for steps in per_prompt.values() for p, _ in steps)
    rows = []
    for lo in range(0, top + 1, width):
        groups = [[w for p, w in steps if lo <= p < lo + width] for steps in per_prompt.values()]
        groups = [g for g in groups if g]
        if not groups:
            continue  # no step started in this bin (a long accept can jump over a narrow one)
        pooled = [w for g in groups for w in g]
        mean = float(np.mean(pooled))
        ci = bootstrap(groups, lambda gs: float(np.mean([w for g in gs for w in g])), seed=seed) \
            if len(groups) >= 2 else None
        rows.append({"from": lo, "to": lo + width - 1, "steps": len(pooled), "prompts": len(groups),
                     "mean walk": mean, "low": ci.low if ci else None, "high": ci.high if ci else None})
    return rows


def position_figure(rows: list[dict], fitted: Trend, title: str, height: int = 380):
    """Mean walk length per bin of output positions with its interval over the prompts, and the
    fitted straight line; the y axis starts at 1 (a step keeps at least its bonus token)."""
    import plotly.graph_objects as go

    from workbench.lessons.figures import legend_below
    from workbench.viz.style import OKABE_ITO, base_layout

    mid = [(r["from"] + r["to"]) / 2 for r in rows]
    fig = go.Figure([
        go.Scatter(x=mid, y=[r["mean walk"] for r in rows], mode="markers", meta="bins",
                   name="mean walk length per bin, 95 % interval over the prompts",
                   marker=dict(color=OKABE_ITO["blue"], size=9),
                   error_y=dict(type="data", symmetric=False,
                                array=[0 if r["high"] is None else r["high"] - r["mean walk"] for r in rows],
                                arrayminus=[0 if r["low"] is None else r["mean walk"] - r["low"] for r in rows])),
        go.Scatter(x=[0, rows[-1]["to"]], y=[fitted.at(0), fitted.at(rows[-1]["to"])],
                   mode="lines", meta="fit", line=dict(color=OKABE_ITO["vermillion"], dash="dash"),
                   name=f"straight-line fit: {fitted.slope.estimate:+.2f} per {PER} tokens"),
    ])
    top = max([r["high"] or r["mean walk"] for r in rows]) * 1.1
    fig.update_layout(**base_layout(title, height))
    legend_below(fig, rows=2)
    fig.update_xaxes(title="output position at the step's start (tokens)", range=[0, rows[-1]["to"] + 1])
    fig.update_yaxes(title="tokens kept per step (n + 1)", range=[1, max(top, 2)])
    return fig

