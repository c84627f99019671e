"""The notebooks: stored without outputs, exactly as ``notebooks/build.py`` writes them, and each
runs from a clean kernel without an error (slow: they load the real target).

The kernel starts in ``notebooks/`` as a reader's would. Each notebook takes at most about two
minutes on a quiet 2-core CPU; the cell timeout is generous because a shared machine can be
several times slower.
"""

import importlib.util
from pathlib import Path

import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 900


def _build_script():
    spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOK_DIR / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_seven_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == sorted(_build_script().NOTEBOOKS)
    assert len(NOTEBOOKS) == 7


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear the outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_notebook_is_what_build_writes(path):
    built = _build_script().build(path.name)
    stored = nbformat.read(path, as_version=4)
    assert [c.source for c in stored.cells] == [c.source for c in built.cells], \
        f"{path.name} differs from notebooks/build.py: run `python notebooks/build.py`"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_from_a_clean_kernel(path, smollm2_dir):
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on the first error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
