"""``y = x W^T + b`` for the few-row products of decoding and verification on a CPU.

Decode, verify and draft run a linear layer on a handful of rows (1 to a few dozen tokens)
against a large weight: the product is bound by reading ``W`` from memory, once. On a CPU,
``F.linear`` with a few rows can read it far less efficiently than that: on this project's 2-core
AVX2 machine, SmolLM2's lm_head (49152 x 576, fp32) took 23.5 ms for 2 rows and 23.2 ms for 8,
against 9.9 ms for 1 row. The same product the other way round, ``(W @ x^T)^T``, puts the large
matrix on the left where the BLAS streams it: 6.5 ms and 14.2 ms
(``python -m workbench.bench linear`` measures both on your machine; the layers' smaller
projections gain at 2-4 rows and tie from 8 to 16).

The two orders sum the same terms in a different order, so results differ by float rounding
only (fp32: ~1e-6 relative). Elsewhere (one row, many rows, GPU, other dtypes) this is
``F.linear``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SMALL_ROWS = (2, 16)  # rows for which the weight-on-the-left order is used (inclusive)


def uses_weight_left(x: torch.Tensor) -> bool:
    """Whether ``linear`` takes the ``(W @ x^T)^T`` order for this input."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() == 2
            and SMALL_ROWS[0] <= x.shape[0] <= SMALL_ROWS[1])


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; few-row fp32 CPU inputs as ``(weight @ x^T)^T``."""
    if not uses_weight_left(x):
        return F.linear(x, weight, bias)
    out = torch.matmul(weight, x.t()).t().contiguous()  # [N, M] -> [M, N]
    return out if bias is None else out + bias


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and names) whose forward is ``linear`` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
