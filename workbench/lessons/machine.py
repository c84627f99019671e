"""Which machine a notebook ran on, and when: printed at the top of its stored outputs, so a
reader knows whose numbers they are looking at. Nothing here prints a folder: a stored notebook
is read on other machines, where this one's paths mean nothing."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path

from workbench.cpu_choices import cpu_flags, cpu_kind, cpu_model


def machine_label(now: datetime.datetime | None = None, dtype: str | None = None,
                  threads: int | None = None) -> str:
    """One line: CPU model and kind (its widest vector extension, as the benchmark records name
    it: ``cpu_choices.cpu_kind``), cores, GPU (if any), torch version, the date (UTC), then the dtype the
    notebook computes in and torch's thread count (``threads``: default ``torch.get_num_threads()``)."""
    import torch

    now = now or datetime.datetime.now(datetime.timezone.utc)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no GPU"
    threads = torch.get_num_threads() if threads is None else threads
    return (f"Ran on {cpu_model()} with {cpu_kind(cpu_flags())} ({cores} cores{gpu}), torch {torch.__version__}, "
            f"Python {platform.python_version()}, {now:%Y-%m-%d %H:%M} UTC; "
            f"{dtype or 'no model loaded'}, {threads} torch thread{'' if threads == 1 else 's'}")


def head_label(draft_source: str) -> str:
    """The draft head by name, never by folder: ``/x/y/eagle-smollm2-135m, 4096 hot draft tokens``
    becomes ``eagle-smollm2-135m, 4096 hot draft tokens``; a random head's label is kept."""
    where, sep, rest = draft_source.partition(", ")
    return (Path(where).name if os.sep in where or "/" in where else where) + sep + rest
