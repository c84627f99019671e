"""The first code cell of every notebook: say which machine this is, set one thread, make the
figures visible without running, and (for the notebooks on the real target) load it once."""

from __future__ import annotations

import warnings

import torch

from workbench.lessons.figures import configure
from workbench.lessons.machine import machine_label

DTYPE_WHY = {"auto": "bf16 where the hardware computes it natively, else fp32",
             "fp32": "fp32: this notebook compares numbers exactly"}


def start(dtype: str | None = None):
    """Print the machine label; load the default target and shipped head in ``dtype`` when given.

    One thread: the draft head's small ops do not wait on idle OpenMP workers, and timings stay
    steady on a shared machine. Returns the ``Workbench`` (or None without ``dtype``).
    """
    if dtype is not None and dtype not in DTYPE_WHY:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_WHY)}, got {dtype!r}")
    print(machine_label())
    # transformers imports tqdm's notebook bar, which warns without ipywidgets: noise for a reader
    warnings.filterwarnings("ignore", message="IProgress not found")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards" bars of the tiny checkpoints
    torch.set_num_threads(1)
    configure()
    if dtype is None:
        return None
    from workbench.pipeline import Workbench

    wb = Workbench.load(dtype=dtype)
    print(f"target {wb.target_dir.name} in {wb.dtype_name} ({DTYPE_WHY[dtype]}); draft head: {wb.draft_source}")
    return wb
