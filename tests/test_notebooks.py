"""The notebooks: every ``notebooks/NN_*.py`` Jupytext script is paired with a stored ``.ipynb``
holding the same cells and the outputs of its last run (figures with a PNG a plain file viewer
shows, the machine and date on top), and each runs from a clean kernel without an error (slow:
they load the real target).

The execution test never rewrites the stored copies: it runs the script's cells in memory, in a
kernel started in a temporary directory, at the smoke size (``workbench.lessons.smoke``: every
cell, on fewer prompts, rounds and tokens; at full size the timed notebooks take two to four
minutes each on a quiet 2-core CPU, and the stored copies, checked above, are such runs). The
cell timeout is generous because a shared machine can be several times slower.
"""

import re
from pathlib import Path

import nbformat
import pytest

from workbench.lessons import smoke
from tools.notebooks import NOTEBOOK_DIR, execute, out_of_sync, paired, read_script, sources

SCRIPTS = sources()
FIGURE = "application/vnd.plotly.v1+json"
REFRESH = "run `make notebooks` (or `python -m tools.notebooks refresh NN`)"
# a folder of the machine that ran a notebook: its home, the checkout, a model cache
MACHINE_PATH = re.compile("|".join(map(re.escape, {str(Path.home()), str(NOTEBOOK_DIR.parent), "/root/",
                                                   ".cache/workbench"})))


# a Python replacement field left in a rendered sentence ("{short}", "{cost.verify_ms(1):.1f}"), not LaTeX
# ("\\text{layers}", "x_{t+1}": a letter, backslash or underscore before the brace)
PLACEHOLDER = re.compile(r"(?<![A-Za-z\\^_])\{[a-z_][a-z_0-9]*(?:\[[^\]]+\]|\.[a-z_]+(?:\([^)]*\))?)*(?::[^{}]+)?\}")


def _text(output) -> str:
    """What a reader sees of one output as text: a stream, or a result's plain, markdown and HTML forms."""
    data = output.get("data", {})
    return output.get("text", "") + "".join(str(data.get(k, "")) for k in ("text/plain", "text/markdown", "text/html"))


def test_every_notebook_has_a_source_and_the_lessons_come_in_order():
    numbers = [p.name[:2] for p in SCRIPTS]
    assert numbers[:8] == [f"{i:02d}" for i in range(8)], numbers
    assert len(set(numbers)) == len(numbers), "two notebooks share a number"
    orphans = {p.stem for p in NOTEBOOK_DIR.glob("*.ipynb")} - {p.stem for p in SCRIPTS}
    assert not orphans, f"stored notebooks without a percent script: {sorted(orphans)}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_pair_in_sync(script):
    problem = out_of_sync(script)
    assert problem is None, f"{problem}: {REFRESH}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_stored_copy_shows_its_results(script):
    nb = nbformat.read(paired(script), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{paired(script).name} was not executed: {REFRESH}"
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], f"{paired(script).name} stored an error"
    first = "".join(o.get("text", "") for o in code[0].outputs if o.output_type == "stream")
    assert first.startswith("Ran on "), "the first output must say which machine and when"
    assert re.search(r"; (bf16|fp32|fp16|no model loaded), \d+ torch threads?\n", first.splitlines(True)[0]), \
        f"the first line must name the dtype and the torch threads: {REFRESH}"
    leaks = sorted({m.group(0) for o in outputs for m in MACHINE_PATH.finditer(_text(o))})
    assert not leaks, f"{paired(script).name} prints folders of the machine that ran it ({leaks}): {REFRESH}"
    unfilled = sorted({m.group(0) for o in outputs for m in PLACEHOLDER.finditer(o.get("data", {}).get("text/markdown", ""))})
    assert not unfilled, f"{paired(script).name} shows f-string fields never filled in ({unfilled}): an f missing"
    figures = [o for o in outputs if FIGURE in o.get("data", {})]
    assert all("image/png" in o["data"] for o in figures), f"a figure of {paired(script).name} has no PNG: {REFRESH}"


# How a notebook names the step cost it priced by (``StepCost.measured``: date, CPU, threads,
# dtype); a load record read from docs/bench/ names its own, at that record's threads.
MEASUREMENT = re.compile(r"(\d{4}-\d\d-\d\d(?: \d\d:\d\d)?), ([A-Za-z][^,\n]*), (\d+) threads?, (bf16|fp32|fp16)")


def test_the_stored_notebooks_name_one_step_cost_measurement_at_their_threads():
    """Every stored notebook's step cost at its own torch threads is one measurement: a quantity
    priced in two notebooks has one value (docs/notebooks.md)."""
    seen = {}
    for script in SCRIPTS:
        nb = nbformat.read(paired(script), as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        first = "".join(o.get("text", "") for o in code[0].outputs if o.output_type == "stream")
        threads = re.search(r"(\d+) torch threads?\n", first.splitlines(True)[0])
        for o in (o for c in code for o in c.outputs):
            for m in MEASUREMENT.finditer(_text(o)):
                if threads and m.group(3) == threads.group(1):
                    seen.setdefault((m.group(1), m.group(2), m.group(4)), set()).add(paired(script).name)
    assert len(seen) <= 1, f"the stored notebooks name {len(seen)} step-cost measurements: {seen}: {REFRESH}"


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_notebook_runs_from_a_clean_kernel(script, smollm2_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(smoke.ENV, "1")  # the kernel inherits this process's environment
    nb = read_script(script)
    execute(nb, tmp_path)  # raises CellExecutionError, with the cell and its traceback, on the first error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
