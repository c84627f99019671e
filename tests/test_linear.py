"""The few-row CPU linear is F.linear up to float rounding, contiguous, with or without bias,
differentiable, and used only where it applies; its order is decided by a measurement on this
machine (cached), never assumed."""

import json

import pytest
import torch
import torch.nn.functional as F

from helpers import fresh_prefill
from workbench import cpu_choices
from workbench.cpu_choices import choose_linear_order, linear_weights
from workbench.models.linear import (MEASURED_ROWS, Linear, LinearOrder, apply_linear_order, decide, linear,
                                     uses_weight_left)

MAX = MEASURED_ROWS[-1]


@pytest.mark.parametrize("rows", [1, 2, 3, 8, MAX, MAX + 1, 40])
@pytest.mark.parametrize("bias", [False, True])
def test_equals_f_linear(rows, bias):
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 96, generator=gen), torch.randn(200, 96, generator=gen)
    b = torch.randn(200, generator=gen) if bias else None
    y = linear(x, w, b, max_left_rows=MAX)
    assert y.shape == (rows, 200) and y.is_contiguous()
    torch.testing.assert_close(y, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    assert uses_weight_left(x, MAX) == (2 <= rows <= MAX)
    assert not uses_weight_left(x, 0)  # the default: F.linear everywhere
    assert torch.equal(linear(x, w, b), F.linear(x, w, b))


def test_only_few_row_fp32_cpu_matrices():
    assert uses_weight_left(torch.zeros(4, 8), 4) and not uses_weight_left(torch.zeros(5, 8), 4)
    assert not uses_weight_left(torch.zeros(1, 8), MAX)  # one row: F.linear's own path already streams W
    assert not uses_weight_left(torch.zeros(2, 4, 8), MAX)  # batched training input
    assert not uses_weight_left(torch.zeros(4, 8, dtype=torch.bfloat16), MAX)
    assert not uses_weight_left(torch.zeros(4, 8, dtype=torch.float64), MAX)


def _timing(rows, plain, left):
    return {"rows": rows, "linear_ms": plain, "weight_left_ms": left}


def test_decide_keeps_f_linear_unless_the_other_order_clearly_wins():
    wins_all = [_timing(r, 10.0, 5.0) for r in MEASURED_ROWS]
    assert decide(wins_all) == MAX
    # the AMX Xeon's figures at 2 rows (21.5 ms F.linear, 49.6 ms the other way): never chosen
    assert decide([_timing(2, 21.5, 49.6)] + wins_all[1:]) == 0
    # wins at 2 and 4, loses at 8: stops at 4 even though it wins again at 16
    assert decide([_timing(2, 10, 5), _timing(4, 10, 5), _timing(8, 10, 11), _timing(16, 10, 5)]) == 4
    assert decide([_timing(2, 10.0, 9.8)]) == 0  # inside the 5 % margin: no change
    assert decide(wins_all + [_timing(32, 10.0, 5.0)]) == MAX  # a count past the measured ones is not decided on
    assert decide([]) == 0


def test_order_is_validated_and_described():
    with pytest.raises(ValueError, match="max_left_rows"):
        LinearOrder(1)
    with pytest.raises(ValueError, match="max_left_rows"):
        LinearOrder(MAX + 1)
    assert "F.linear (default)" in LinearOrder().describe()
    assert "(W @ x^T)^T for 2-8 rows (measured)" in LinearOrder(8, "measured").describe()


def _tiny_target(tmp_path):
    from workbench.models.loading import load_target
    from workbench.testing.tiny import make_tiny_checkpoint

    make_tiny_checkpoint(tmp_path / "t", vocab_size=32)
    return load_target(tmp_path / "t")


def test_choice_measured_once_then_cached(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)
    calls = []

    def fake_time(weights, rows=MEASURED_ROWS, repeats=5):
        calls.append(len(weights))
        return [_timing(r, 10.0, 4.0 if r <= 4 else 12.0) for r in rows]

    monkeypatch.setattr(cpu_choices, "time_orders", fake_time)
    order = choose_linear_order("auto", target, tmp_path)
    assert order.max_left_rows == 4 and order.reason == "measured on this CPU"
    assert calls == [len(linear_weights(target))]  # every distinct weight, tied lm_head once
    again = choose_linear_order("auto", target, tmp_path)
    assert again.max_left_rows == 4 and "cached" in again.reason and len(calls) == 1
    cache = json.loads((tmp_path / cpu_choices.CACHE_FILE).read_text())
    (entry,) = cache.values()
    assert entry["max_left_rows"] == 4 and entry["cpu"] == cpu_choices.cpu_signature()
    # forcing never measures; a bf16 model needs no choice
    assert choose_linear_order("plain", target, tmp_path).max_left_rows == 0
    assert choose_linear_order("weight-left", target, tmp_path).max_left_rows == MAX
    assert choose_linear_order("auto", target.to(torch.bfloat16), tmp_path).reason == "not an fp32 CPU run"
    assert len(calls) == 1
    with pytest.raises(ValueError, match="--linear-order must be one of"):
        choose_linear_order("fast", target, tmp_path)


def test_unreadable_cache_measures_again(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)
    (tmp_path / cpu_choices.CACHE_FILE).write_text("not json")
    monkeypatch.setattr(cpu_choices, "time_orders",
                        lambda weights, rows=MEASURED_ROWS, repeats=5: [_timing(r, 1.0, 2.0) for r in rows])
    assert choose_linear_order("auto", target, tmp_path).max_left_rows == 0


def test_applied_order_reaches_every_layer_and_keeps_the_output(tmp_path):
    target = _tiny_target(tmp_path)
    tokens = [3, 5, 7, 9]
    *_, plain = fresh_prefill(target, tokens)
    apply_linear_order(target, LinearOrder(MAX, "forced"))
    layers = [m for m in target.modules() if isinstance(m, Linear)]
    assert layers and all(m.max_left_rows == MAX for m in layers)
    *_, left = fresh_prefill(target, tokens)
    torch.testing.assert_close(left, plain, rtol=1e-5, atol=1e-5)


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
