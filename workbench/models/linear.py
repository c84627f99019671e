"""``y = x W^T + b`` for the few-row products of decoding and verification, in the order this CPU
runs faster.

Decode, verify and draft run a linear layer on a handful of rows (1 to a few dozen tokens)
against a large weight: the product is bound by reading ``W`` from memory, once. How well the CPU
BLAS does that with ``F.linear`` depends on the CPU, and so does whether the same product the
other way round, ``(W @ x^T)^T`` (the large matrix on the left, where some BLAS builds stream it),
is faster: on one CPU the weight-left order runs the lm_head at 2 rows in a third of
``F.linear``'s time, on another in more than twice it (docs/benchmarks.md, "Measurements behind
code choices").

(``python -m experiments.linear_order`` prints both orders and the choice on your machine.) So the
order is not assumed: ``LinearOrder`` says which rows take the weight-left order, and
``workbench.cpu_choices`` decides it once per CPU model and torch version by timing both orders on
the loaded model's own weights, keeping ``F.linear`` unless the other order is clearly faster.
A model built directly (tests, training) uses ``F.linear`` everywhere until
``apply_linear_order`` says otherwise.

The two orders sum the same terms in a different order, so results differ by float rounding
only (fp32: ~1e-6 relative). Only fp32 CPU matrices of 2 to ``max_left_rows`` rows are
affected; one row, many rows, a GPU or another dtype always run ``F.linear``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

MEASURED_ROWS = (2, 4, 8, 16)  # row counts timed to decide; rows in between follow the next lower one
WIN_MARGIN = 0.95  # the weight-left order must take under 95 % of F.linear's time to be chosen


@dataclass(frozen=True)
class LinearOrder:
    """Which few-row fp32 CPU products run as ``(W @ x^T)^T``.

    ``max_left_rows``: inputs of 2..max_left_rows rows take the weight-left order; 0 = F.linear
    for every input. ``reason``: how that was decided, for the one line a user sees.
    """

    max_left_rows: int = 0
    reason: str = "default"

    def __post_init__(self) -> None:
        if self.max_left_rows != 0 and not 2 <= self.max_left_rows <= MEASURED_ROWS[-1]:
            raise ValueError(f"max_left_rows must be 0 or 2..{MEASURED_ROWS[-1]}, got {self.max_left_rows}")

    def describe(self) -> str:
        order = "F.linear" if not self.max_left_rows else f"(W @ x^T)^T for 2-{self.max_left_rows} rows"
        return f"few-row linear: {order} ({self.reason})"


def uses_weight_left(x: torch.Tensor, max_left_rows: int) -> bool:
    """Whether ``linear`` takes the ``(W @ x^T)^T`` order for this input."""
    return (max_left_rows > 0 and x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() == 2
            and 2 <= x.shape[0] <= max_left_rows)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           max_left_rows: int = 0) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; fp32 CPU inputs of 2..max_left_rows rows as ``(weight @ x^T)^T``."""
    if not uses_weight_left(x, max_left_rows):
        return F.linear(x, weight, bias)
    out = torch.matmul(weight, x.t()).t().contiguous()  # [N, M] -> [M, N]
    return out if bias is None else out + bias


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and names) whose forward is ``linear`` above."""

    max_left_rows: int = 0  # set per model by apply_linear_order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.max_left_rows)


def apply_linear_order(module: nn.Module, order: LinearOrder) -> None:
    """Every ``Linear`` in ``module`` (and the module itself, when it keeps a ``max_left_rows``
    for a functional ``linear`` call, as the draft head does) follows ``order``."""
    for m in module.modules():
        if isinstance(m, Linear) or hasattr(m, "max_left_rows"):
            m.max_left_rows = order.max_left_rows


def time_orders(weights: list[torch.Tensor], rows: tuple[int, ...] = MEASURED_ROWS,
                repeats: int = 5) -> list[dict]:
    """Best-of-``repeats`` ms to apply every weight in ``weights`` (as one forward does, each read
    from memory in turn) to ``m`` rows, with ``F.linear`` and with ``(W @ x^T)^T``, for each m.
    The fastest repeat, not the median: another process on the cores only ever adds time, so
    the minimum is the least disturbed estimate of what each order can do."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for m in rows:
        xs = {w.shape[1]: torch.randn(m, w.shape[1], generator=gen, dtype=w.dtype) for w in weights}
        with torch.inference_mode():
            plain = _best_ms(lambda: [F.linear(xs[w.shape[1]], w) for w in weights], repeats)
            left = _best_ms(lambda: [(w @ xs[w.shape[1]].t()).t().contiguous() for w in weights], repeats)
        out.append({"rows": m, "linear_ms": plain, "weight_left_ms": left})
    return out


def decide(timings: list[dict]) -> int:
    """``max_left_rows`` from ``time_orders``: the largest measured row count up to which the
    weight-left order won at every measured count (0 if it did not win at 2 rows), at most
    ``MEASURED_ROWS[-1]``: counts past it are shown by the benchmark, never decided on."""
    best = 0
    for t in sorted((t for t in timings if t["rows"] <= MEASURED_ROWS[-1]), key=lambda t: t["rows"]):
        if t["weight_left_ms"] >= WIN_MARGIN * t["linear_ms"]:
            break
        best = t["rows"]
    return best if best >= 2 else 0


def _best_ms(fn, repeats: int) -> float:
    fn()  # warm-up: first-touch of the inputs, BLAS thread start
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return min(times)
