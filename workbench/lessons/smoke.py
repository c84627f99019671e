"""The notebooks' smoke size: every cell runs, on less data, so that a test can tell in seconds
that a notebook still runs from a clean kernel.

The test suite sets ``WORKBENCH_NOTEBOOK_SMOKE=1`` in the kernel's environment
(``tests/test_notebooks.py``); the lessons' measuring helpers then take at most ``PROMPTS``
prompts (``settings.lesson_prompts``), one repeat per timed round (``cost_curve.time_forwards``),
``NEW_TOKENS`` new tokens per timed or traced run (``settings.measure_settings``,
``draft_routes.run_route``), ``SAMPLES`` sequences of a sampled law (``exact_law.sample_sequences``)
and ``CONTEXT`` committed tokens before a timed forward (``cost_curve.verify_forwards``). The
number of rounds stays (the notebooks index them). The stored notebooks are always full-size runs
(``make notebooks`` never sets it).
"""

from __future__ import annotations

import os

ENV = "WORKBENCH_NOTEBOOK_SMOKE"
PROMPTS = 4  # the first four of any list of categories (the lessons' default three stay whole; notebook 08 halves them)
NEW_TOKENS = 8  # several speculative steps of every tree the notebooks try (the prefill emits the first)
SAMPLES = 500  # sequences per sampled law: a chi-square test still has cells to pool
CONTEXT = 512  # committed tokens before a timed forward: a prefill of thousands takes seconds on one thread


def on() -> bool:
    """Whether this process runs at smoke size."""
    return os.environ.get(ENV) == "1"


def repeats(asked: int) -> int:
    return 1 if on() else asked


def new_tokens(asked: int) -> int:
    return min(asked, NEW_TOKENS) if on() else asked


def samples(asked: int) -> int:
    return min(asked, SAMPLES) if on() else asked


def context(asked: int) -> int:
    return min(asked, CONTEXT) if on() else asked


def prompts(categories: tuple[str, ...]) -> tuple[str, ...]:
    return categories[:PROMPTS] if on() else categories
