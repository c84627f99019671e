"""The first code cell of every notebook: say which machine this is, in which dtype and with how
many torch threads; set one thread, make the figures visible without running, and (for the
notebooks on the real target) load it once."""

from __future__ import annotations

import contextlib
import io
import warnings

import torch

from workbench.lessons.figures import configure
from workbench.lessons.machine import head_label, machine_label

DTYPE_WHY = {"auto": "bf16 where the hardware computes it natively, else fp32",
             "fp32": "fp32: tokens compared for equality, numbers within a printed tolerance"}


def start(dtype: str | None = None):
    """Print the machine label (first line: CPU, dtype, torch threads); load the default target
    and the shipped head in ``dtype`` when given, and name both (never their folders).

    One thread: the draft head's small ops do not wait on idle OpenMP workers, and timings stay
    steady on a shared machine. Returns the ``Workbench`` (or None without ``dtype``).
    """
    if dtype is not None and dtype not in DTYPE_WHY:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_WHY)}, got {dtype!r}")
    # transformers imports tqdm's notebook bar, which warns without ipywidgets: noise for a reader
    warnings.filterwarnings("ignore", message="IProgress not found")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards" bars of the tiny checkpoints
    torch.set_num_threads(1)
    configure()
    _whole_tables()
    if dtype is None:
        print(machine_label())
        return None
    wb = load_quietly(dtype)
    print(machine_label(dtype=wb.dtype_name))
    shipped = "" if wb.draft_source.startswith("random") else "the shipped head "
    print(f"target {wb.target_dir.name} (the default model) in {wb.dtype_name} ({DTYPE_WHY[dtype]}); "
          f"draft head: {shipped}{head_label(wb.draft_source)}")
    return wb


def load_quietly(dtype: str):
    """``Workbench.load(dtype=dtype)`` of the default target and head, without the fetch step's
    lines (they name the cache folder: a path of this machine only); warnings still show."""
    from workbench.pipeline import Workbench

    loading = io.StringIO()
    with contextlib.redirect_stderr(loading), contextlib.redirect_stdout(loading):
        wb = Workbench.load(dtype=dtype)
    for line in loading.getvalue().splitlines():  # e.g. an attention backend that failed its check
        if line.startswith("warning:"):
            print(line)
    return wb


def _whole_tables() -> None:
    """Tables print every column and whole cells: a stored "…" hides what a reader came for."""
    import pandas as pd

    pd.set_option("display.max_colwidth", None)
    pd.set_option("display.max_columns", None)
    pd.set_option("display.width", 200)
