"""Plotly figures a reader can see without running the notebook.

JupyterLab draws a figure from its plotly JSON; a plain file viewer (a code host's notebook
preview) cannot. With ``WORKBENCH_NOTEBOOK_IMAGES=1`` (``make notebooks`` sets it) every
``fig.show()`` also stores a PNG rendered by kaleido (headless Chromium; ``/usr/bin/chromium``
when present). Without it no image is made: each costs about a second.
"""

from __future__ import annotations

import os

from workbench.viz.png import use_browser

IMAGES_ENV = "WORKBENCH_NOTEBOOK_IMAGES"


def renderer(images: bool) -> str:
    """The plotly renderer string: the interactive figure, plus a PNG when ``images``."""
    return "plotly_mimetype+png" if images else "plotly_mimetype"


def configure(images: bool | None = None) -> str:
    """Set plotly's default renderer for this kernel; returns the renderer chosen."""
    import plotly.io as pio

    images = os.environ.get(IMAGES_ENV) == "1" if images is None else images
    if images:
        use_browser()
        pio.renderers["png"].width, pio.renderers["png"].height = 900, None
    pio.renderers.default = renderer(images)
    return pio.renderers.default


LEGEND_GAP = 64  # px from the plot's bottom edge to a legend under it: clear of tick labels and the axis title


def legend_below(fig, rows: int = 2):
    """Put a horizontal legend of ``rows`` rows under the plot, ``LEGEND_GAP`` px below its bottom
    edge whatever the figure's height (a legend's ``y`` is a share of the plot's height, so a fixed
    share lands on the axis title of a short plot), growing the bottom margin to hold it."""
    from workbench.viz.style import LEGEND_ROW

    layout = fig.layout
    bottom = LEGEND_GAP + rows * LEGEND_ROW + 10
    plot_h = layout.height - layout.margin.t - bottom
    if plot_h <= 0:
        raise ValueError(f"a figure of height {layout.height} has no room for a plot above a {rows}-row legend")
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-LEGEND_GAP / plot_h, xanchor="left", x=0),
                      margin=dict(b=bottom))
    return fig
