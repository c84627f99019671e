"""Plotly figures a reader can see without running the notebook.

JupyterLab draws a figure from its plotly JSON; a plain file viewer (a code host's notebook
preview, an editor) cannot. With ``WORKBENCH_NOTEBOOK_IMAGES=1`` (``make notebooks`` sets it)
every ``fig.show()`` also stores a PNG rendered by kaleido, which the viewer shows instead.
Kaleido drives a headless Chromium; ``/usr/bin/chromium`` is used when present. Without the
variable (tests, a reader rerunning a cell) no image is made: it costs about a second each.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

IMAGES_ENV = "WORKBENCH_NOTEBOOK_IMAGES"
CHROMIUM = Path("/usr/bin/chromium")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_browser() -> str | None:
    """The Chromium/Chrome kaleido will drive: $BROWSER_PATH, Debian's, or one on the PATH."""
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"]
    if CHROMIUM.exists():
        return str(CHROMIUM)
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def renderer(images: bool) -> str:
    """The plotly renderer string: the interactive figure, plus a PNG when ``images``."""
    return "plotly_mimetype+png" if images else "plotly_mimetype"


def configure(images: bool | None = None) -> str:
    """Set plotly's default renderer for this kernel; returns the renderer chosen."""
    import plotly.io as pio

    images = os.environ.get(IMAGES_ENV) == "1" if images is None else images
    if images:
        browser = find_browser()
        if browser is None:
            raise RuntimeError("PNG copies of the figures need Chromium or Chrome for kaleido: install the "
                               "Debian package chromium, or set BROWSER_PATH to a Chrome binary")
        os.environ["BROWSER_PATH"] = browser
        pio.renderers["png"].width, pio.renderers["png"].height = 900, None
    pio.renderers.default = renderer(images)
    return pio.renderers.default
