"""Run Triton kernels in its CPU interpreter when no GPU is present.

Triton reads TRITON_INTERPRET when a ``@triton.jit`` function is defined (its own ``tl.*``
helpers at ``import triton``), so it is set here, before any test module imports triton.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Tiny-model tests run many small ops: one thread avoids paying for thread wake-ups (on a busy
# 2-core machine, an idle OpenMP worker can stall each op by a scheduler tick). Tests on the
# real model raise it again (see ``real_threads``).
torch.set_num_threads(1)
