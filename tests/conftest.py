"""Run Triton kernels in its CPU interpreter when no GPU is present, every Engine with its
debug invariant checks on (docs/design.md §4), and torch on the cores this process has.

Triton reads TRITON_INTERPRET when a ``@triton.jit`` function is defined (its own ``tl.*``
helpers at ``import triton``), so it is set here, before any test module imports triton.

``make test`` runs two pytest-xdist workers on a 2-core machine: each then runs its real-model
tests, and the processes it starts (the CLI, the app, notebook kernels: OMP_NUM_THREADS, which
torch reads when they import it), on one thread, so that the workers never ask for more threads
than there are cores (``helpers.real_model_threads``).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("WORKBENCH_DEBUG", "1")  # inherited by the app and CLI processes the tests start

from helpers import real_model_threads  # noqa: E402  (after TRITON_INTERPRET: it imports the package)

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", str(real_model_threads()))  # for the processes tests start

# Tiny-model tests run many small ops: one thread avoids paying for thread wake-ups (on a busy
# 2-core machine, an idle OpenMP worker can stall each op by a scheduler tick). Tests on the
# real model raise it again (see ``real_threads``).
torch.set_num_threads(1)


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_dir():
    """The default target, fetched by ``make test`` (``python -m workbench fetch``)."""
    from workbench import store

    path = store.default_model_dir()
    if not (path / "config.json").exists():
        pytest.skip("SmolLM2 not fetched: run `python -m workbench fetch`")
    return path


@pytest.fixture
def real_threads():
    """Every core this process has for real-model tests (one thread is faster for tiny models)."""
    torch.set_num_threads(real_model_threads())
    yield
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def back_to_one_thread():
    """Every test starts on one torch thread: a command run in-process (``--threads 2`` of a
    documented bench command, say) would otherwise leave its worker on two, and with two
    workers on two cores each test after it would run four threads on two cores, spinning
    OpenMP workers against each other (seen: a suite a third slower)."""
    yield
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def pytest_collection_modifyitems(items):
    """The tests on the real model first: they are the long ones (a notebook, a CLI run over six
    prompts: up to two minutes each), so ``make test``'s two workers each start on them, and the
    short tiny-model tests fill in at the end, when one worker would otherwise wait for the
    other's last long test. The real-model tests are dealt one module at a time, round robin
    (each module's own order kept): two tests of one module often share a result computed once
    for the session (``helpers.computed_once``, such as transformers' reference in
    ``test_smollm2``), and side by side the second worker would sit idle while the first
    computes it."""
    real, rest = [], []
    for item in items:
        (real if "smollm2_dir" in getattr(item, "fixturenames", ()) else rest).append(item)
    by_module: dict = {}
    for item in real:
        by_module.setdefault(item.nodeid.split("::")[0], []).append(item)
    queues = list(by_module.values())
    dealt = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]
    items[:] = dealt + rest


def pytest_configure(config):
    """Before any worker starts, the default target's few-row linear choice is measured (or read
    from its cache) on the quiet machine, at the threads the real-model tests will run on. Under
    load the choice's timing rounds disagree, nothing is cached and every later load measures
    again (``workbench/cpu_choices.py``); measured here, every load in the suite reads the cache."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller has done it
        return
    from workbench import store

    path = store.default_model_dir()
    if not (path / "config.json").exists():
        return
    from workbench.cpu_choices import choose_linear_order
    from workbench.models.loading import load_target

    workers = config.getoption("numprocesses", None) or 1  # -n N; "auto" and the like: one per core
    workers = int(workers) if str(workers).isdigit() else (os.cpu_count() or 1)
    torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // max(1, workers))))
    try:
        choose_linear_order("auto", load_target(path, dtype=torch.float32))
    finally:
        torch.set_num_threads(1)
