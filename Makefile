# make app   - set up, fetch the model, start the web app on http://127.0.0.1:7860
# make test  - set up, fetch the model, run the test suite
# make notebooks - execute every notebooks/NN_*.py from a clean kernel and store its .ipynb
#                  with outputs and a PNG of each figure (NOTEBOOKS='00 04' for a few)
# make gpu-check - on a CUDA machine, with the python3 that has torch/triton/transformers
#                  (no venv, no network): GPU tests, kernel benchmark, equality, timings
# make constraints - rewrite constraints.txt from the venv's pip freeze (docs/code.md#dependencies)
#
# TORCH_SPEC picks the torch build installed first (before the project's own
# requirements), so that pip never reaches for a large CUDA build on its own.
# CONSTRAINTS is the file of tested releases the venv installs with; CONSTRAINTS= installs the
# newest releases pyproject.toml allows instead (how the pins move forward).

PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
CONSTRAINTS ?= constraints.txt
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
NOTEBOOKS  ?=
CHROMIUM   ?= /usr/bin/chromium

PY    := $(VENV)/bin/python
STAMP := $(VENV)/.workbench-installed
NB_STAMP := $(VENV)/.workbench-notebooks
PIN   := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

.PHONY: venv fetch app test chromium notebooks gpu-check constraints

venv: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if ! $(PY) -c "import torch" >/dev/null 2>&1; then \
		echo "installing $(TORCH_SPEC) first" >&2; \
		$(PY) -m pip install "$(TORCH_SPEC)"; \
	fi
	$(PY) -m pip install $(PIN) -e '.[test]'
	@touch $(STAMP)

fetch: venv
	$(PY) -m workbench fetch

app: venv fetch
	$(PY) app.py

chromium:
	@if [ -x $(CHROMIUM) ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian chromium for the browser tests" >&2; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	else \
		echo "note: $(CHROMIUM) is missing and this is not root with apt-get;" \
		     "the browser tests will be skipped (install the Debian package chromium to run them)" >&2; \
	fi

# TEST_WORKERS pytest-xdist workers (one per core of the 2-core machine the suite is timed on;
# TEST_WORKERS=0 runs every test in one process), each handed one test at a time
# (--maxschedchunk 1), so that neither holds a queue of long tests while the other waits.
test: venv fetch chromium
	$(PY) -m pytest -q -n $(TEST_WORKERS) --maxschedchunk 1 $(PYTEST_ARGS)

$(NB_STAMP): $(STAMP)
	$(PY) -m pip install $(PIN) -e '.[test,notebooks]'
	@touch $(NB_STAMP)

# One thread per kernel (the notebooks set it too); nice, so a shared machine stays usable.
notebooks: $(NB_STAMP) fetch chromium
	OMP_NUM_THREADS=1 nice -n 5 $(PY) -m tools.notebooks refresh $(NOTEBOOKS)

gpu-check:
	$(PYTHON) -m experiments.gpu.check

# constraints.txt pins what the venv holds now (the notebooks extra added first, so that its
# pins are written too), less torch and triton, which follow TORCH_SPEC.
constraints:
	@test -x $(PY) || { echo "no $(VENV): run make test (with CONSTRAINTS= to take new releases) first" >&2; exit 1; }
	$(PY) -m pip install -e '.[test,notebooks]'
	$(PY) -m tools.constraints
