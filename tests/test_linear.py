"""The few-row CPU linear is F.linear up to float rounding, contiguous, with or without bias,
differentiable, and used only where it applies."""

import pytest
import torch
import torch.nn.functional as F

from workbench.bench.linear import main as bench_linear_main, measure
from workbench.models.linear import SMALL_ROWS, Linear, linear, uses_weight_left


@pytest.mark.parametrize("rows", [1, 2, 3, 8, SMALL_ROWS[1], SMALL_ROWS[1] + 1, 40])
@pytest.mark.parametrize("bias", [False, True])
def test_equals_f_linear(rows, bias):
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 96, generator=gen), torch.randn(200, 96, generator=gen)
    b = torch.randn(200, generator=gen) if bias else None
    y = linear(x, w, b)
    assert y.shape == (rows, 200) and y.is_contiguous()
    torch.testing.assert_close(y, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    assert uses_weight_left(x) == (SMALL_ROWS[0] <= rows <= SMALL_ROWS[1])


def test_only_few_row_fp32_cpu_matrices():
    assert uses_weight_left(torch.zeros(4, 8))
    assert not uses_weight_left(torch.zeros(1, 8))  # one row: F.linear's own path already streams W
    assert not uses_weight_left(torch.zeros(2, 4, 8))  # batched training input
    assert not uses_weight_left(torch.zeros(4, 8, dtype=torch.bfloat16))
    assert not uses_weight_left(torch.zeros(4, 8, dtype=torch.float64))


def test_module_keeps_nn_linear_names_and_gradients():
    torch.manual_seed(0)
    lin = Linear(16, 8)
    assert set(lin.state_dict()) == {"weight", "bias"}
    x = torch.randn(4, 16, requires_grad=True)
    lin(x).square().sum().backward()
    ref = torch.nn.Linear(16, 8)
    ref.load_state_dict(lin.state_dict())
    x2 = x.detach().clone().requires_grad_(True)
    ref(x2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad)


def test_bench_linear_measures_both_orders(capsys):
    (r,) = measure([2], layers=1, repeats=1)
    assert r["rows"] == 2 and all(r[k] > 0 for k in r if k.endswith("_ms"))
    with pytest.raises(SystemExit):
        bench_linear_main(["--rows", "0,x"])
    assert "positive integers" in capsys.readouterr().err
