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
PAGE_NOT_READY = "kaleido_scopes is not defined"  # kaleido's page script not loaded yet: a busy machine
RENDER_TRIES = 3
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
    for attempt in range(RENDER_TRIES):
        try:
            fig.write_image(str(path), format="png", width=width)
            return path
        except Exception as err:  # kaleido's JavascriptError; any other error is raised as it is
            # kaleido 1.x may call into its tab before the page's script has loaded (seen on a
            # 2-core machine under load); a fresh render then succeeds
            if PAGE_NOT_READY not in str(err) or attempt + 1 == RENDER_TRIES:
                raise
    return path
