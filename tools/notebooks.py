"""The notebooks are Jupytext percent scripts, ``notebooks/NN_name.py``, each paired with a stored
``notebooks/NN_name.ipynb`` that carries the outputs of its last run.

    python -m tools.notebooks refresh [NN ...]   # execute, store outputs + PNGs
    python -m tools.notebooks check              # is every pair in sync?

Every ``NN_*.py`` in the folder is a notebook: a new one needs no registration. ``refresh`` runs
each from a clean kernel started in ``notebooks/`` (as a reader's would), with
``WORKBENCH_NOTEBOOK_IMAGES=1`` so that every plotly figure also stores a PNG
(``figures.py``), and writes the ``.ipynb`` with stable cell ids. The script is the source; in
JupyterLab with jupytext installed, editing either file updates both.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from workbench.errors import ArgumentParser
from workbench.lessons.figures import IMAGES_ENV

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
SOURCE = re.compile(r"^\d\d_\w+\.py$")
FORMATS = "ipynb,py:percent"
CELL_TIMEOUT_S = 900


def sources(directory: Path = NOTEBOOK_DIR) -> list[Path]:
    """Every notebook source ``NN_name.py`` in ``directory``, in order."""
    return sorted(p for p in directory.glob("*.py") if SOURCE.match(p.name))


def paired(script: Path) -> Path:
    return script.with_suffix(".ipynb")


def read_script(script: Path):
    """The notebook a percent script describes (no outputs), with stable cell ids."""
    import jupytext

    nb = jupytext.read(script, fmt="py:percent")
    nb.metadata.setdefault("jupytext", {})["formats"] = FORMATS
    nb.metadata["jupytext"].pop("text_representation", None)  # records a jupytext version: churn
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"
    return nb


def cells(nb) -> list[tuple[str, str]]:
    """What a pair must agree on: each cell's type and source, outputs aside."""
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def out_of_sync(script: Path) -> str | None:
    """None when the stored ``.ipynb`` holds the script's cells; else what differs."""
    import nbformat

    stored_path = paired(script)
    if not stored_path.exists():
        return f"{stored_path.name} is missing"
    want, have = cells(read_script(script)), cells(nbformat.read(stored_path, as_version=4))
    if want == have:
        return None
    if len(want) != len(have):
        return f"{script.name} has {len(want)} cells, {stored_path.name} {len(have)}"
    first = next(i for i, (w, h) in enumerate(zip(want, have)) if w != h)
    return f"cell {first} differs between {script.name} and {stored_path.name}"


def execute(nb, cwd: Path, timeout: int = CELL_TIMEOUT_S):
    """Run ``nb`` in place from a clean kernel started in ``cwd``; raises on the first error."""
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def refresh(script: Path, images: bool = True) -> float:
    """Execute ``script`` from a clean kernel and store it, outputs included, as its ``.ipynb``.
    Returns the seconds it took."""
    import nbformat

    nb = read_script(script)
    os.environ[IMAGES_ENV] = "1" if images else "0"  # the kernel inherits this environment
    t0 = time.perf_counter()
    execute(nb, script.parent)
    seconds = time.perf_counter() - t0
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:  # per-cell timestamps: churn in every refresh, nothing for a reader
        cell.metadata.pop("execution", None)
    nbformat.write(nb, paired(script))
    return seconds


def _select(names: list[str]) -> list[Path]:
    everything = sources()
    if not names:
        return everything
    prefixes = [Path(n).stem if n.endswith((".py", ".ipynb")) else n for n in names]  # paths work too
    chosen = [p for p in everything if any(p.name.startswith(n) for n in prefixes)]
    if not chosen:
        raise SystemExit(f"error: no notebook matches {' '.join(names)} in {NOTEBOOK_DIR}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m tools.notebooks", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("refresh", "check"),
                        help="refresh: run each notebook and store it with its outputs; check: is each .ipynb "
                             "in step with its script")
    parser.add_argument("names", nargs="*", help="notebook numbers or name prefixes (default: all)")
    parser.add_argument("--no-images", action="store_true", help="refresh without PNG copies of the figures")
    args = parser.parse_args(argv)
    scripts = _select(args.names)
    if args.command == "check":
        problems = [p for p in map(out_of_sync, scripts) if p]
        for p in problems:
            print(p, file=sys.stderr)
        if not problems:
            print(f"{len(scripts)} notebook{'s' * (len(scripts) != 1)} in step with {'their' if len(scripts) != 1 else 'its'} "
                  "script", flush=True)
        return 1 if problems else 0
    for script in scripts:
        print(f"{script.name}: running ...", file=sys.stderr, flush=True)
        seconds = refresh(script, images=not args.no_images)
        size = paired(script).stat().st_size
        print(f"{paired(script).name}: {seconds:.0f} s, {size / 1024:.0f} KiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
