"""The template set's raw material, read from ``workbench/data/prompt_templates.json``: templates,
the topics that fill them, and the names, places and numbers that word problems and paragraphs
draw from, as lists grouped by kind (the file says what each group is).

``TEMPLATES.TOPICS``, ``TEMPLATES.MATH_T``, ...: every list by its name, read by
``prompt_set.build_prompt_set``. Their order is part of the set: the products are taken in list
order and then shuffled by the seed, so a list edited in the middle changes which prompt lands in
which shard (``tests/test_train_data.py`` pins the set's digest).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

TEMPLATES_FILE = Path(__file__).resolve().parent.parent / "data" / "prompt_templates.json"


def load_templates(path: Path = TEMPLATES_FILE) -> SimpleNamespace:
    """Every list of the file by its name (``TOPICS``, ``FORMS``, ...), whatever its group."""
    groups = json.loads(path.read_text(encoding="utf-8"))["groups"]
    return SimpleNamespace(**{name: words for group in groups.values() for name, words in group.items()})


TEMPLATES = load_templates()
