"""The few-row CPU linear is F.linear up to float rounding, contiguous, with or without bias,
differentiable, and used only where it applies; its order is decided by a measurement on this
machine (cached only when its rounds agree), never assumed."""

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


def fake_timer(results_per_call, calls):
    """A stand-in for ``time_orders``: call i returns ``results_per_call[i]`` as (rows -> (plain, left))."""
    def fake_time(weights, rows=MEASURED_ROWS, repeats=5):
        calls.append(len(weights))
        result = results_per_call[min(len(calls), len(results_per_call)) - 1]
        return [_timing(r, *result(r)) for r in rows]

    return fake_time


def up_to_4(r):  # (plain, left) ms: the weight-left order wins up to 4 rows
    return 10.0, 4.0 if r <= 4 else 12.0


def up_to_4_slower(r):  # another round, slower all over, the same verdict
    return 11.0, 4.5 if r <= 4 else 13.0


def loaded(r):  # a round with another process on the cores: the weight-left order seen losing
    return 10.0, 50.0


def test_agreeing_rounds_are_measured_once_then_cached(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)
    calls = []
    monkeypatch.setattr(cpu_choices, "time_orders", fake_timer([up_to_4, up_to_4_slower, up_to_4], calls))
    order = choose_linear_order("auto", target, tmp_path)
    assert order.max_left_rows == 4 and order.reason == "measured on this CPU"
    assert calls == [len(linear_weights(target))] * cpu_choices.ROUNDS  # every distinct weight, tied lm_head once
    again = choose_linear_order("auto", target, tmp_path)
    assert again.max_left_rows == 4 and "cached" in again.reason and len(calls) == cpu_choices.ROUNDS
    cache = json.loads((tmp_path / cpu_choices.CACHE_FILE).read_text())
    (entry,) = cache.values()
    assert entry["max_left_rows"] == 4 and entry["cpu"] == cpu_choices.cpu_signature()
    # how it was measured: rounds, repeats, each round's verdict, medians and spreads over the rounds
    assert (entry["rounds"], entry["repeats"], entry["verdicts"]) == (3, cpu_choices.REPEATS, [4, 4, 4])
    two = entry["timings"][0]
    assert two["rows"] == 2 and (two["linear_ms"], two["weight_left_ms"]) == (10.0, 4.0)  # the medians
    assert two["linear_spread"] == pytest.approx(0.1) and two["weight_left_spread"] == pytest.approx(0.125)
    assert choose_linear_order("auto", target.to(torch.bfloat16), tmp_path).reason == "not an fp32 CPU run"
    with pytest.raises(ValueError, match="--linear-order must be one of"):
        choose_linear_order("fast", target, tmp_path)


def test_disagreeing_rounds_are_refused_run_plain_and_are_not_cached(tmp_path, monkeypatch, capsys):
    """One round under load makes the verdict untrusted: F.linear, and the next load measures again."""
    target = _tiny_target(tmp_path)
    calls = []
    monkeypatch.setattr(cpu_choices, "time_orders", fake_timer([up_to_4, loaded, up_to_4], calls))
    order = choose_linear_order("auto", target, tmp_path)
    assert order.max_left_rows == 0 and "disagreed, not cached" in order.reason
    assert "chose differently" in capsys.readouterr().err
    assert not (tmp_path / cpu_choices.CACHE_FILE).exists()
    choose_linear_order("auto", target, tmp_path)  # nothing was kept: the next load measures again
    assert len(calls) == 2 * cpu_choices.ROUNDS


def test_a_forced_order_never_measures(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)

    def no_timing(*args, **kwargs):
        raise AssertionError("a forced order must not measure")

    monkeypatch.setattr(cpu_choices, "time_orders", no_timing)
    assert choose_linear_order("plain", target, tmp_path).max_left_rows == 0
    assert choose_linear_order("weight-left", target, tmp_path).max_left_rows == MAX
    assert not (tmp_path / cpu_choices.CACHE_FILE).exists()


def test_an_entry_without_rounds_is_measured_again(tmp_path, monkeypatch):
    """A verdict cached before the rounds existed was one measurement, possibly under load."""
    target = _tiny_target(tmp_path)
    key = cpu_choices._cache_key(linear_weights(target))
    (tmp_path / cpu_choices.CACHE_FILE).write_text(json.dumps({key: {"max_left_rows": MAX, "timings": []}}))
    calls = []
    monkeypatch.setattr(cpu_choices, "time_orders", fake_timer([up_to_4], calls))
    assert choose_linear_order("auto", target, tmp_path).max_left_rows == 4 and calls
    assert json.loads((tmp_path / cpu_choices.CACHE_FILE).read_text())[key]["verdicts"] == [4, 4, 4]


def test_unreadable_cache_measures_again(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)
    (tmp_path / cpu_choices.CACHE_FILE).write_text("not json")
    monkeypatch.setattr(cpu_choices, "time_orders", fake_timer([loaded], []))
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
