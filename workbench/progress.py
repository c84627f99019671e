"""Progress on a terminal: one status line, redrawn in place, ended by a newline.

A long decode shows that it moves (an early-exit draft on a CPU can take a minute for ten
tokens), but a pipe or a file gets nothing beyond the results, so that ``--json`` output and
logs stay clean: the line is drawn only when its stream is a terminal. Redraws are at most every
``min_interval_s``, so a fast step loop (a GPU step takes milliseconds) does not spend its time
writing to the terminal.
"""

from __future__ import annotations

import shutil
import sys
import time


def is_terminal(stream) -> bool:
    """Whether ``stream`` is an interactive terminal: False for a pipe, a file, a closed stream
    or an object without ``isatty``."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty; ValueError: the stream is closed
        return False


class StatusLine:
    """``update(text)`` redraws the line (a carriage return, the text, blanks over a longer
    previous text); ``finish(text)`` draws it a last time and ends it with a newline. Both do
    nothing when the stream is no terminal (``enabled`` False)."""

    def __init__(self, stream=None, min_interval_s: float = 0.1, clock=time.monotonic):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = is_terminal(self.stream)
        self.min_interval_s, self.clock = min_interval_s, clock
        # a line wider than the terminal wraps, and the carriage return then redraws only its tail
        self.width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
        self._shown = 0  # characters of the line on the screen now; 0: no line is open
        self._last: float | None = None  # clock at the last redraw

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if not force and self._last is not None and now - self._last < self.min_interval_s:
            return
        text = text[: self.width]
        self.stream.write("\r" + text + " " * max(0, self._shown - len(text)))
        self.stream.flush()
        self._last, self._shown = now, len(text)

    def finish(self, text: str | None = None) -> None:
        """Draw ``text`` (None: keep the last one) and end the line; the next update opens a new one."""
        if not self.enabled:
            return
        if text is not None:
            self.update(text, force=True)
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
        self._last, self._shown = None, 0
