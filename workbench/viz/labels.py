"""Names beside the points of a scatter, readable in a static picture: placed in px by
``layout.place_labels`` (no two overlap, none covers a point), drawn as annotations, with a thin
leader line to a name that had to move off its point."""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go

from workbench.viz.layout import LINE, place_labels, text_width

LABEL_PX = 10


@dataclass(frozen=True)
class Axes:
    """A plot area of ``width`` x ``height`` px showing ``x_range`` x ``y_range`` (``y_range`` in
    log10 units when ``log_y``, as plotly takes a log axis's range)."""

    x_range: tuple[float, float]
    y_range: tuple[float, float]
    width: float
    height: float
    log_y: bool = False

    def to_px(self, x: float, y: float) -> tuple[float, float]:
        """Data (x, y) -> px from the plot area's top left, y down."""
        (x0, x1), (y0, y1) = self.x_range, self.y_range
        y = math.log10(y) if self.log_y else y
        return (x - x0) / (x1 - x0) * self.width, (y1 - y) / (y1 - y0) * self.height

    def x_of(self, px: float) -> float:
        x0, x1 = self.x_range
        return x0 + px / self.width * (x1 - x0)

    def y_of(self, py: float) -> float:
        """px -> the y plotly takes for an annotation (log10 units on a log axis)."""
        y0, y1 = self.y_range
        return y1 - py / self.height * (y1 - y0)


def name_points(fig: go.Figure, points: list[tuple[float, float, str]], axes: Axes) -> None:
    """Annotate each (x, y, text) of ``points`` beside it, no two names overlapping."""
    px = [axes.to_px(x, y) for x, y, _ in points]
    sizes = [(text_width(t, LABEL_PX) + 2, LABEL_PX * LINE) for _, _, t in points]
    lead_x, lead_y = [], []
    for (x, y, text), (cx, cy), box in zip(points, px, place_labels(px, sizes)):
        mid = (box.y0 + box.y1) / 2
        fig.add_annotation(x=axes.x_of(box.x0), y=axes.y_of(mid), text=text, showarrow=False, xanchor="left",
                           yanchor="middle", font=dict(size=LABEL_PX, color="#222"), borderpad=0)
        if abs(mid - cy) > 3:  # moved off its point: lead the eye back
            near = axes.y_of(mid)
            lead_x += [x, axes.x_of(box.x0 if box.x0 > cx else box.x1), None]
            lead_y += [y, 10 ** near if axes.log_y else near, None]
    if lead_x:
        fig.add_scatter(x=lead_x, y=lead_y, mode="lines", line=dict(color="#999999", width=0.7),
                        hoverinfo="skip", showlegend=False)
