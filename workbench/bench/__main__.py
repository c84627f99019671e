"""``python -m workbench.bench <command> [options]``: run one benchmark by name.

Each command is a module with ``main(argv: list[str]) -> int``, imported only when chosen
(so that one command's heavy imports never slow another's start).
"""

from __future__ import annotations

import importlib
import sys

# name -> module holding main(argv); add new benchmarks here.
COMMANDS: dict[str, str] = {
    "calibration": "workbench.bench.calibration",
    "load": "workbench.bench.load_run",
    "run": "workbench.bench.suite",
    "tune": "workbench.bench.tune",
}


def _usage() -> str:
    names = "\n".join(f"  {name:<12} {COMMANDS[name]}" for name in sorted(COMMANDS))
    return f"usage: python -m workbench.bench <command> [options]\n\ncommands (each has --help):\n{names}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help"):
        sys.stdout.write(_usage())
        return 0
    name, rest = (argv[0], argv[1:]) if argv else ("", [])
    if name not in COMMANDS:
        what = f"unknown benchmark {name!r}" if name else "no benchmark named"
        sys.stderr.write(f"error: {what}; choose one of {', '.join(sorted(COMMANDS))} "
                         "(see python -m workbench.bench --help)\n")
        return 2
    return int(importlib.import_module(COMMANDS[name]).main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
