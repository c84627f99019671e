"""A JSON file of measured verdicts, one entry per key that names what a verdict depends on
(the CPU's linear order, ``cpu_choices.py``; the engine step's cost, ``measure/step_cost.py``).

Read whole, added to one entry at a time, written through a temporary file and a rename, so a
reader never sees half a file. A file that is missing, unreadable or not a JSON object reads as
empty, and one that cannot be written says so in one line: either only costs a measurement.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def read_entries(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: measure again
    return data if isinstance(data, dict) else {}


def add_entry(path: Path, key: str, *, value: dict, tag: str, what: str) -> None:
    """Add (or replace) one entry; ``tag`` and ``what`` make the line said when the file cannot
    be written: ``{tag} note: could not cache {what} in PATH: why``."""
    path = Path(path)
    data = read_entries(path)
    data[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    except OSError as err:
        print(f"{tag} note: could not cache {what} in {path}: {err.strerror or err}", file=sys.stderr)
