"""Command line: ``python -m workbench {fetch,generate,bench}``.

Errors a user can cause print one line to stderr and exit 2; no traceback wall.
"""

from __future__ import annotations

import argparse
import sys


class UserError(Exception):
    """A problem with the user's input, reported as one clear line."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    from workbench import store

    store.add_fetch_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
