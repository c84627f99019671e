"""Plotly figures a reader can see without running the notebook.

JupyterLab draws a figure from its plotly JSON; a plain file viewer (a code host's notebook
preview, an editor) cannot. With ``WORKBENCH_NOTEBOOK_IMAGES=1`` (``make notebooks`` sets it)
every ``fig.show()`` also stores a PNG rendered by kaleido, which the viewer shows instead.
Kaleido drives a headless Chromium; ``/usr/bin/chromium`` is used when present. Without the
variable (tests, a reader rerunning a cell) no image is made: it costs about a second each.
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
