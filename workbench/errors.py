"""The one error type for problems a user can cause and fix (a bad path, a knob out of range),
and the command-line parser that reports them all the same way.

``UserError`` is raised by the library (model store, pipeline, benchmarks) with a message that
names the input and what to do; the command line prints it as one ``error:`` line and exits 2,
the app shows it in the page. It is a ``ValueError``, so library callers that already catch
``ValueError`` for bad arguments catch it too.

Every entry point builds its parser from ``ArgumentParser`` below: a mistyped flag gets the same
one line as a bad value (argparse's own prints the whole usage block first), and ``--help`` shows
each flag's default from its ``default=``. Nothing heavy is imported: no torch for ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys


class UserError(ValueError):
    """A problem with the user's input, reported as one clear line."""


@contextlib.contextmanager
def as_user_error(prefix: str = ""):
    """A ``ValueError`` raised inside becomes a ``UserError`` saying ``prefix`` and its message: a
    library's complaint about an argument, worded as the command line names that argument
    (``with as_user_error("--methods: "): parse_methods(text)``)."""
    try:
        yield
    except ValueError as err:
        raise UserError(f"{prefix}{err}") from None


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help text as the docstrings lay it out, reST double backticks dropped, and each option's
    default appended from its ``default=`` unless the help already says it in words.

    Not appended for switches (``store_true``: off unless given) and for ``None`` defaults, whose
    meaning ("the shipped head", "cuda when available") the help text states itself."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(text.replace("``", ""))

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").replace("``", "")
        switch = action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction)
        if switch or not action.option_strings or action.default in (None, argparse.SUPPRESS) or "default" in text:
            return text
        return f"{text} (default: {_shown(action.default)})"


def _shown(default) -> str:
    """A default as a user types it (``on``/``off``, lists space-separated), %-escaped for argparse."""
    if isinstance(default, bool):
        text = "on" if default else "off"
    elif isinstance(default, (list, tuple)):
        text = " ".join(map(str, default)) or "none"
    else:
        text = str(default) if default != "" else '""'
    return text.replace("%", "%%")


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one ``error:`` line naming the flag, with a
    pointer to ``--help`` instead of the usage block, and exits 2 (as argparse does)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def reports_user_errors(main):
    """Decorate a command's ``main(argv) -> int | None``: a ``UserError`` becomes one ``error:``
    line on stderr and exit status 2 (returned, so tests can call ``main`` directly)."""

    @functools.wraps(main)
    def run(*args, **kwargs) -> int:
        try:
            return int(main(*args, **kwargs) or 0)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2

    return run
