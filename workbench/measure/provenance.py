"""What a benchmark record says about where it came from: the commit of the code that measured,
and paths as any machine could read them.

Every record under ``docs/bench/`` holds the command, the commit, the CPU, the threads, the dtype
and the date (docs/bench/README.md indexes them). The commit comes from ``git describe``, so a run
from a work tree with changes is marked ``-dirty``; outside a git checkout (an installed wheel) it
is None. A path is written relative to the repository when it lies inside it, under
``$WORKBENCH_CACHE`` when it lies in the model store, and never with the machine's home or
working directory in it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def commit() -> str | None:
    """The code's commit as ``git describe --always --dirty`` gives it (``1a2b3c4d5e6f``, with
    ``-dirty`` when the work tree has changes), or None where git or the checkout is missing."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=REPO,
                             capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def shown(text: str) -> str:
    """``text`` with every path of this machine made portable: the repository's root dropped (a
    path inside it is written relative to it; the package's files, installed or not, as
    ``workbench/...``), the model store written ``$WORKBENCH_CACHE``, the
    home directory ``~``. ``/work/x/workbench/assets/h, 4096 hot draft tokens`` ->
    ``workbench/assets/h, 4096 hot draft tokens``."""
    from workbench.store import default_cache_dir

    package = Path(__file__).resolve().parents[1]  # workbench/, also where a wheel installed it
    for prefix, name in ((package, "workbench/"), (REPO, ""), (default_cache_dir(), "$WORKBENCH_CACHE/"),
                         (Path.home(), "~/")):
        text = text.replace(f"{prefix.resolve()}/", name).replace(f"{prefix}/", name)
    return text
