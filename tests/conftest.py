"""Run Triton kernels in its CPU interpreter when no GPU is present.

Triton reads TRITON_INTERPRET when a ``@triton.jit`` function is defined (its own ``tl.*``
helpers at ``import triton``), so it is set here, before any test module imports triton.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
