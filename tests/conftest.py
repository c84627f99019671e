"""Run Triton kernels in its CPU interpreter when no GPU is present, and every Engine with its
debug invariant checks on (docs/design.md §4).

Triton reads TRITON_INTERPRET when a ``@triton.jit`` function is defined (its own ``tl.*``
helpers at ``import triton``), so it is set here, before any test module imports triton.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("WORKBENCH_DEBUG", "1")  # inherited by the app and CLI processes the tests start

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
    """Two threads for real-model tests (one is faster for tiny models)."""
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(1)
