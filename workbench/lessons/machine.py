"""Which machine a notebook ran on, and when: printed at the top of its stored outputs, so a
reader knows whose numbers they are looking at."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_label(now: datetime.datetime | None = None) -> str:
    """One line: CPU model, cores, GPU (if any), torch version and the date (UTC)."""
    import torch

    now = now or datetime.datetime.now(datetime.timezone.utc)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no GPU"
    return (f"Ran on {cpu_model()} ({cores} cores{gpu}), torch {torch.__version__}, "
            f"Python {platform.python_version()}, {now:%Y-%m-%d %H:%M} UTC")
