"""The notebooks' smoke size: every cell runs, on less data, so that a test can tell in seconds
that a notebook still runs from a clean kernel.

The test suite sets ``WORKBENCH_NOTEBOOK_SMOKE=1`` in the kernel's environment
(``tests/test_notebooks.py``); the lessons' measuring helpers then take at most ``PROMPTS``
prompts (``settings.lesson_prompts``), one repeat per timed round (``cost_curve.time_forwards``)
and ``NEW_TOKENS`` new tokens per timed or traced run (``settings.measure_settings``,
``draft_routes.run_route``). The number of rounds stays (the notebooks index them). The stored
notebooks are always full-size runs (``make notebooks`` never sets it).
"""

from __future__ import annotations

import os

ENV = "WORKBENCH_NOTEBOOK_SMOKE"
PROMPTS = 4  # the first four of any list of categories (the lessons' default three stay whole; notebook 08 halves them)
NEW_TOKENS = 12  # enough for several speculative steps of every tree the notebooks try


def on() -> bool:
    """Whether this process runs at smoke size."""
    return os.environ.get(ENV) == "1"


def repeats(asked: int) -> int:
    return 1 if on() else asked


def new_tokens(asked: int) -> int:
    return min(asked, NEW_TOKENS) if on() else asked


def prompts(categories: tuple[str, ...]) -> tuple[str, ...]:
    return categories[:PROMPTS] if on() else categories
