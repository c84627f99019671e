"""The one error type for problems a user can cause and fix (a bad path, a knob out of range).

Raised by the library (model store, pipeline, benchmarks) with a message that names the input
and what to do; the command line prints it as one ``error:`` line and exits 2, the app shows it
in the page. It is a ``ValueError``, so library callers that already catch ``ValueError`` for
bad arguments catch it too.
"""

from __future__ import annotations


class UserError(ValueError):
    """A problem with the user's input, reported as one clear line."""
