"""Reading a JSON-lines file of prompts: the one place that knows what can be wrong with one.

``python -m workbench generate --prompts``, ``python -m workbench.bench load --prompts`` and the
training's prompt sets all read a UTF-8 file with one JSON value a line, blank lines skipped;
each then asks its own fields of every row. A file that cannot be read, is not UTF-8, or holds a
line that is not JSON is a ``ValueError`` that names the path (and the line): the commands say it
in one line, never as a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path


def read_rows(path: str | Path) -> list[tuple[int, object]]:
    """(line number from 1, the line's JSON value) for every non-blank line of ``path``."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ValueError(f"{path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{n}: not JSON ({err.msg})") from None
    return rows


def prompt_rows(path: str | Path) -> list[tuple[dict, str]]:
    """(row, its text) for every row of a prompts file (``generate --prompts``, ``bench load
    --prompts``): an object with ``"prompt"``, or with ``"turns"`` whose first is taken
    (Spec-Bench's format). A row that is neither is a ``ValueError`` naming ``path:line``."""
    out = []
    for n, row in read_rows(path):
        text = None
        if isinstance(row, dict):
            turns = row.get("turns")
            text = row["prompt"] if "prompt" in row else turns[0] if isinstance(turns, list) and turns else None
        if not isinstance(text, str):
            raise ValueError(f"{path}:{n}: expected a JSON object with 'prompt' or 'turns'")
        out.append((row, text))
    return out
