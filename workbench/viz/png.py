"""PNG copies of plotly figures, for files a plain viewer shows (README images, notebooks).

Kaleido (>= 1) renders through a headless Chromium or Chrome: ``$BROWSER_PATH``, Debian's
``/usr/bin/chromium``, or one on the PATH.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
NO_BROWSER = ("PNG copies of the figures need Chromium or Chrome for kaleido: install the Debian package "
              "chromium, or set BROWSER_PATH to a Chrome binary")


def find_browser() -> str | None:
    """The Chromium/Chrome kaleido will drive: $BROWSER_PATH, Debian's, or one on the PATH."""
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"]
    if CHROMIUM.exists():
        return str(CHROMIUM)
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def use_browser() -> str:
    """Point kaleido at the browser ``find_browser`` picks; a clear error when there is none."""
    browser = find_browser()
    if browser is None:
        raise RuntimeError(NO_BROWSER)
    os.environ["BROWSER_PATH"] = browser
    return browser


def write_png(fig, path: Path | str, width: int = 900) -> Path:
    """``fig`` as a PNG at ``path`` (its height is the figure's own)."""
    use_browser()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_image(str(path), format="png", width=width)
    return path
