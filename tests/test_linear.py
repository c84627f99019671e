"""The few-row CPU linear is F.linear up to float rounding by every implementation, at every row
count, contiguous, with or without bias, differentiable, and used only where it applies; the
implementation per row count is decided by a measurement on this machine (cached only when its
rounds agree), never assumed; MKL's private packed GEMM is used only where this torch has it."""

import json

import pytest
import torch
import torch.nn.functional as F

from helpers import fresh_prefill
from workbench import cpu_choices
from workbench.cpu_choices import choose_linear_order, linear_weights
from workbench.models import linear as lin
from workbench.models.linear import (ONEDNN, PACKED, PATHS, PLAIN, ROW_BUCKETS, WEIGHT_LEFT, Linear, LinearOrder,
                                     apply_linear_order, check_paths, decide, linear, within_rounding)

needs_mkl = pytest.mark.skipif(not lin.mkl_packed_available(), reason="torch built without MKL's packed GEMM")
needs_onednn = pytest.mark.skipif(not lin.onednn_packed_available(), reason="torch built without oneDNN's packed linear")
needs_onednn_bf16 = pytest.mark.skipif(not (lin.onednn_packed_available() and lin.onednn_bf16_available()),
                                       reason="oneDNN's bf16 products need AVX-512 BW/VL/DQ or AVX-NE-CONVERT")


def everywhere(path):
    return LinearOrder(tuple(path for _ in ROW_BUCKETS), "test")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 7, 8, 16, 32, 33, 40])
@pytest.mark.parametrize("bias", [False, True])
def test_every_implementation_equals_f_linear(path, rows, bias):
    if path not in lin.available_paths():
        pytest.skip(f"torch built without {lin.PATH_NAMES[path]}")
    gen = torch.Generator().manual_seed(rows)
    mod = Linear(96, 200, bias=bias)
    with torch.no_grad():
        mod.weight.copy_(torch.randn(200, 96, generator=gen))
        if bias:
            mod.bias.copy_(torch.randn(200, generator=gen))
    apply_linear_order(mod, everywhere(path))
    x = torch.randn(rows, 96, generator=gen)
    with torch.inference_mode():
        y = mod(x)
    assert y.shape == (rows, 200) and y.is_contiguous()
    torch.testing.assert_close(y, F.linear(x, mod.weight, mod.bias), rtol=1e-5, atol=1e-5)
    assert torch.equal(linear(x, mod.weight, mod.bias), F.linear(x, mod.weight, mod.bias))  # default: F.linear


def test_rows_follow_the_next_larger_bucket():
    order = LinearOrder((PLAIN, WEIGHT_LEFT, PACKED, PACKED, WEIGHT_LEFT, PLAIN))
    assert [order.path(r) for r in (1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33)] == [
        PLAIN, WEIGHT_LEFT, PACKED, PACKED, PACKED, PACKED, WEIGHT_LEFT, WEIGHT_LEFT, PLAIN, PLAIN, PLAIN]
    assert order.bucket(3) == 4 and order.bucket(33) is None and order.packed_rows == (4, 8)
    assert LinearOrder().path(4) == PLAIN


def test_only_few_row_fp32_cpu_matrices():
    w = torch.zeros(8, 8)
    assert lin.takes_choice(torch.zeros(4, 8), w) and not lin.takes_choice(torch.zeros(33, 8), w)
    assert not lin.takes_choice(torch.zeros(2, 4, 8), w)  # batched training input
    assert not lin.takes_choice(torch.zeros(4, 8, dtype=torch.bfloat16), w.bfloat16())  # an fp32 order
    assert lin.takes_choice(torch.zeros(4, 8, dtype=torch.bfloat16), w.bfloat16(), torch.bfloat16)
    assert not lin.takes_choice(torch.zeros(4, 8), w, torch.bfloat16)  # a bf16 order
    assert not lin.takes_choice(torch.zeros(4, 8, dtype=torch.float64), w.double())


@needs_onednn_bf16
@pytest.mark.parametrize("rows", [1, 3, 8, 32])
@pytest.mark.parametrize("bias", [False, True])
def test_bf16_through_onednn_gives_f_linears_bits(rows, bias):
    """In bf16 the packed path is not merely close: F.linear's bf16 CPU product is oneDNN's."""
    gen = torch.Generator().manual_seed(rows)
    mod = Linear(576, 1536, bias=bias).to(torch.bfloat16)
    with torch.no_grad():
        mod.weight.copy_(torch.randn(1536, 576, generator=gen))
        if bias:
            mod.bias.copy_(torch.randn(1536, generator=gen))
    apply_linear_order(mod, LinearOrder(tuple(ONEDNN for _ in ROW_BUCKETS), "test", dtype=torch.bfloat16))
    assert set(mod.packed) == {ONEDNN}
    x = torch.randn(rows, 576, generator=gen).bfloat16()
    with torch.inference_mode():
        y = mod(x)
    assert y.dtype == torch.bfloat16 and torch.equal(y, F.linear(x, mod.weight, mod.bias))


def test_a_bf16_order_runs_only_what_bf16_may_run():
    native = lin.onednn_packed_available() and lin.onednn_bf16_available()
    assert lin.available_paths(torch.bfloat16) == ((PLAIN, ONEDNN) if native else (PLAIN,))
    assert lin.available_paths(torch.float16) == (PLAIN,)
    with pytest.raises(ValueError, match="for bf16"):
        LinearOrder(tuple(WEIGHT_LEFT for _ in ROW_BUCKETS), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="fp32 or bf16"):
        LinearOrder(dtype=torch.float16)
    mod = Linear(8, 8).to(torch.bfloat16)  # an MKL row count asked of a bf16 weight packs nothing
    assert mod.pack((4,)) == 0 and mod.packed == {}


@needs_mkl
def test_a_packed_weight_is_dropped_when_the_weight_changes():
    mod = Linear(16, 8, bias=False)
    apply_linear_order(mod, everywhere(PACKED))
    assert set(mod.packed) == set(ROW_BUCKETS)
    with torch.no_grad():
        mod.weight.mul_(2)  # an optimizer step: the packed copy is stale, F.linear runs
    x = torch.randn(4, 16)
    torch.testing.assert_close(mod(x), F.linear(x, mod.weight), rtol=1e-5, atol=1e-5)
    x.requires_grad_(True)
    mod(x).sum().backward()  # autograd never goes through a packed weight
    assert x.grad is not None


@needs_onednn
def test_one_onednn_copy_serves_every_row_count_and_is_dropped_when_the_weight_changes():
    mod = Linear(16, 8)
    assert apply_linear_order(mod, everywhere(ONEDNN)) == 8 * 16 * 4 and set(mod.packed) == {ONEDNN}
    with torch.inference_mode():
        for rows in (1, 3, 8, 32):
            x = torch.randn(rows, 16)
            torch.testing.assert_close(mod(x), F.linear(x, mod.weight, mod.bias), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        mod.weight.mul_(2)  # stale copy: F.linear runs
    x = torch.randn(4, 16)
    assert torch.equal(mod(x), F.linear(x, mod.weight, mod.bias))


@pytest.mark.parametrize("available, path", [("mkl_packed_available", PACKED), ("onednn_packed_available", ONEDNN)])
def test_a_torch_without_a_packed_paths_ops_runs_f_linear(monkeypatch, available, path):
    monkeypatch.setattr(lin, available, lambda: False)  # as on a build without the ops
    assert path not in lin.available_paths()
    mod = Linear(16, 8)
    assert apply_linear_order(mod, everywhere(path)) == 0 and not mod.packed
    x = torch.randn(4, 16)
    assert torch.equal(mod(x), F.linear(x, mod.weight, mod.bias))


def test_onednn_is_not_limited_like_mkls_copies_per_row_count():
    t = [_timing(r, plain=10, **{"weight-left": 9, "mkl-packed": 8, "onednn-packed": 5}) for r in ROW_BUCKETS]
    assert decide(t) == (ONEDNN,) * len(ROW_BUCKETS)
    t = [_timing(r, plain=10, **{"weight-left": 9, "mkl-packed": p, "onednn-packed": 6})
         for r, p in zip(ROW_BUCKETS, (3, 4, 5, 8, 8, 8))]
    assert decide(t) == (PACKED, PACKED, ONEDNN, ONEDNN, ONEDNN, ONEDNN)  # MKL's two largest savings over oneDNN


def test_missing_mkl_op_is_never_forced_nor_timed(tmp_path, monkeypatch):
    monkeypatch.delattr(torch.ops.mkl, "_mkl_linear", raising=False)
    monkeypatch.setattr(lin, "mkl_packed_available", lambda: False)  # as on a build without the ops
    target = _tiny_target(tmp_path)
    order = choose_linear_order("mkl-packed", target, tmp_path)
    assert order.paths == () and "not in this torch build" in order.reason
    seen = []
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer([packed_wins], [], seen))
    assert PACKED not in choose_linear_order("auto", target, tmp_path).paths
    assert seen and all(PACKED not in paths for paths in seen)  # never timed


def test_mkl_availability_needs_the_backend():
    orig = torch.backends.mkl.is_available
    try:
        torch.backends.mkl.is_available = lambda: False
        assert not lin.mkl_packed_available()
    finally:
        torch.backends.mkl.is_available = orig


def test_rounding_check_refuses_a_coarser_result():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 576, generator=gen), torch.randn(300, 576, generator=gen)
    ref = F.linear(x, w)
    assert within_rounding(lin.weight_left_linear(x, w), ref, x, w)
    coarse = F.linear(x.bfloat16(), w.bfloat16()).float()  # what a bf16 shortcut would give
    assert not within_rounding(coarse, ref, x, w)
    ok = check_paths([w], lin.available_paths(), rows=(1, 3, 8))
    assert all(ok.values())
    # in bf16: one rounding of the result is allowed, two (rounded before a bias is added) are not
    xb, wb, b = x.bfloat16(), w.bfloat16(), torch.randn(300, generator=gen).bfloat16()
    refb = F.linear(xb, wb, b)
    assert within_rounding(F.linear(xb.float(), wb.float(), b.float()).bfloat16(), refb, xb, wb)
    assert not within_rounding(refb.float().mul(1 + 2**-6).bfloat16(), refb, xb, wb)
    assert all(check_paths([wb], lin.available_paths(torch.bfloat16), rows=(1, 3, 8)).values())


def _timing(rows, **ms):
    return {"rows": rows, "ms": ms}


def test_decide_per_row_count():
    t = [_timing(1, plain=10, **{"weight-left": 12, "mkl-packed": 11}),  # F.linear fastest
         _timing(2, plain=10, **{"weight-left": 5, "mkl-packed": 6}),
         _timing(4, plain=10, **{"weight-left": 9, "mkl-packed": 4}),
         _timing(8, plain=10, **{"weight-left": 9.8, "mkl-packed": 9.7}),  # inside the 5 % margin
         _timing(16, plain=10, **{"weight-left": 5}),  # packed not measured here
         _timing(64, plain=10, **{"weight-left": 1})]  # past the buckets: never decided on
    assert decide(t) == (PLAIN, WEIGHT_LEFT, PACKED, PLAIN, WEIGHT_LEFT, PLAIN)  # 32 not measured: F.linear
    assert decide([_timing(2, plain=10, **{"weight-left": 11})]) == () and decide([]) == ()


def test_packed_only_where_it_saves_the_most():
    t = [_timing(r, plain=10, **{"weight-left": 9, "mkl-packed": p}) for r, p in zip(ROW_BUCKETS, (8, 3, 4, 7, 8, 8))]
    paths = decide(t)
    assert paths.count(PACKED) == lin.MAX_PACKED_SIZES == 2
    assert LinearOrder(paths).packed_rows == (2, 4)  # the two largest savings over weight-left's 9 ms
    assert paths[0] == WEIGHT_LEFT and decide(t, max_packed=0).count(PACKED) == 0


def test_order_is_validated_and_described():
    with pytest.raises(ValueError, match="one implementation per row count"):
        LinearOrder((PLAIN,))
    with pytest.raises(ValueError, match="unknown linear implementation"):
        LinearOrder(tuple("fast" for _ in ROW_BUCKETS))
    assert LinearOrder().describe() == "few-row linear: F.linear (default)"
    order = LinearOrder((PLAIN, WEIGHT_LEFT, PACKED, PACKED, WEIGHT_LEFT, PLAIN), "measured", 1234.0)
    assert LinearOrder().plain_everywhere and everywhere(PLAIN).plain_everywhere and not order.plain_everywhere
    assert order.describe() == ("few-row linear: 1 rows F.linear, 2 rows (W @ x^T)^T, 3-8 rows MKL packed GEMM, "
                                "9-16 rows (W @ x^T)^T, 17-32 rows F.linear, more F.linear "
                                "(measured; packed weights +1234 MB)")
    assert LinearOrder.forced(WEIGHT_LEFT, "f").paths == (PLAIN, WEIGHT_LEFT, WEIGHT_LEFT, WEIGHT_LEFT, WEIGHT_LEFT,
                                                          PLAIN)
    bf16 = LinearOrder((PLAIN, PLAIN, ONEDNN, ONEDNN, ONEDNN, PLAIN), "measured", 257.0, torch.bfloat16)
    assert bf16.describe() == ("few-row bf16 linear: 1-2 rows F.linear, 3-16 rows oneDNN packed GEMM, "
                               "17-32 rows F.linear, more F.linear (measured; packed weights +257 MB)")


def _tiny_target(tmp_path):
    from workbench.models.loading import load_target
    from workbench.testing.tiny import make_tiny_checkpoint

    make_tiny_checkpoint(tmp_path / "t", vocab_size=32)
    return load_target(tmp_path / "t")


def fake_timer(results_per_call, calls, seen=None):
    """A stand-in for ``time_paths``: call i returns ``results_per_call[i]`` as (rows -> {path: ms})."""
    def fake_time(weights, paths, rows=ROW_BUCKETS, repeats=5):
        calls.append(len(weights))
        if seen is not None:
            seen.append(paths)
        result = results_per_call[min(len(calls), len(results_per_call)) - 1]
        return [{"rows": r, "ms": {p: ms for p, ms in result(r).items() if p in paths}} for r in rows]

    return fake_time


def up_to_4(r):  # the weight-left order wins at 1 to 4 rows
    return {PLAIN: 10.0, WEIGHT_LEFT: 4.0 if r <= 4 else 12.0, PACKED: 11.0}


def up_to_4_slower(r):  # another round, slower all over, the same verdict
    return {PLAIN: 11.0, WEIGHT_LEFT: 4.5 if r <= 4 else 13.0, PACKED: 12.0}


def packed_wins(r):
    return {PLAIN: 10.0, WEIGHT_LEFT: 12.0, PACKED: 3.0}


def loaded(r):  # a round with another process on the cores: the other orders seen losing
    return {PLAIN: 10.0, WEIGHT_LEFT: 50.0, PACKED: 50.0}


UP_TO_4 = [WEIGHT_LEFT] * 3 + [PLAIN] * 3  # 1, 2 and 4 rows


def test_agreeing_rounds_are_measured_once_then_cached(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)
    calls = []
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer([up_to_4, up_to_4_slower, up_to_4], calls))
    order = choose_linear_order("auto", target, tmp_path)
    assert list(order.paths) == UP_TO_4 and order.reason == "measured on this CPU" and order.packed_mb == 0
    assert calls == [len(linear_weights(target))] * cpu_choices.ROUNDS  # every distinct weight, tied lm_head once
    again = choose_linear_order("auto", target, tmp_path)
    assert again.paths == order.paths and "cached" in again.reason and len(calls) == cpu_choices.ROUNDS
    (entry,) = json.loads((tmp_path / cpu_choices.CACHE_FILE).read_text()).values()
    assert entry["paths"] == UP_TO_4 and entry["cpu"] == cpu_choices.cpu_signature()
    # how it was measured: rounds, repeats, the check, each round's verdict, medians and spreads
    assert (entry["rounds"], entry["repeats"], entry["verdicts"]) == (3, cpu_choices.REPEATS, [UP_TO_4] * 3)
    assert all(entry["eligible"].values())
    one = entry["timings"][0]
    assert one["rows"] == 1 and (one["ms"][PLAIN], one["ms"][WEIGHT_LEFT]) == (10.0, 4.0)  # the medians
    assert one["spread"][PLAIN] == pytest.approx(0.1) and one["spread"][WEIGHT_LEFT] == pytest.approx(0.125)
    assert choose_linear_order("auto", target.to(torch.float16), tmp_path).reason == "not an fp32 or bf16 CPU run"
    with pytest.raises(ValueError, match="--linear-order must be one of"):
        choose_linear_order("fast", target, tmp_path)


@needs_mkl
def test_a_packed_verdict_says_its_memory_and_packs_the_model(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer([packed_wins], []))
    order = choose_linear_order("auto", target, tmp_path)
    assert order.packed_rows == (1, 2) and order.packed_mb > 0 and "packed weights +" in order.describe()
    tokens = [3, 5, 7, 9]
    *_, plain = fresh_prefill(target, tokens)
    assert apply_linear_order(target, order) > 0
    *_, packed = fresh_prefill(target, tokens)
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)


def test_disagreeing_rounds_are_refused_run_plain_and_are_not_cached(tmp_path, monkeypatch, capsys):
    """One round under load makes the verdict untrusted: F.linear, and the next load measures again."""
    target = _tiny_target(tmp_path)
    calls = []
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer([up_to_4, loaded, up_to_4], calls))
    order = choose_linear_order("auto", target, tmp_path)
    assert order.paths == () and "disagreed, not cached" in order.reason
    assert "chose differently" in capsys.readouterr().err
    assert not (tmp_path / cpu_choices.CACHE_FILE).exists()
    choose_linear_order("auto", target, tmp_path)  # nothing was kept: the next load measures again
    assert len(calls) == 2 * cpu_choices.ROUNDS


def level_at_16(r):  # MKL's packed path 6 % faster than F.linear from 16 rows: chosen (under 95 %)
    return {PLAIN: 10.0, WEIGHT_LEFT: 4.0 if r <= 4 else 12.0, PACKED: 9.4 if r >= 16 else 11.0}


def level_at_16_flipped(r):  # 4 % faster: not chosen; the two are level, which one a round picks is noise
    return {PLAIN: 10.0, WEIGHT_LEFT: 4.0 if r <= 4 else 12.0, PACKED: 9.6 if r >= 16 else 11.0}


@needs_mkl
def test_rounds_that_differ_only_between_level_implementations_are_cached(tmp_path, monkeypatch):
    """Rounds that pick F.linear or the packed path where the two are within LEVEL of each other
    agree on what matters: the verdict is the medians' and it is cached."""
    target = _tiny_target(tmp_path)
    calls = []
    rounds = [level_at_16, level_at_16_flipped, level_at_16]
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer(rounds, calls))
    order = choose_linear_order("auto", target, tmp_path)
    medians = [WEIGHT_LEFT] * 3 + [PLAIN] + [PACKED] * 2  # packed's median 9.4 ms: under 95 % of 10
    assert list(order.paths) == medians and order.reason == "measured on this CPU"
    (entry,) = json.loads((tmp_path / cpu_choices.CACHE_FILE).read_text()).values()
    assert entry["agreed"] and entry["paths"] == medians and len({tuple(v) for v in entry["verdicts"]}) == 2
    assert "cached" in choose_linear_order("auto", target, tmp_path).reason and len(calls) == cpu_choices.ROUNDS


def test_level_means_within_the_margin_in_every_round():
    per_round = [[{"rows": b, "ms": {PLAIN: 10.0, PACKED: p}} for b in ROW_BUCKETS] for p in (9.4, 9.6, 8.5)]
    verdicts = [[PLAIN] * 5 + [PACKED], [PLAIN] * 6]
    assert cpu_choices.rounds_agree(per_round[:2], verdicts)  # 10 against 9.4: within 15 %
    assert not cpu_choices.rounds_agree(per_round, verdicts)  # 10 against 8.5 in the third round: not level
    assert cpu_choices.rounds_agree(per_round, [[PLAIN] * 6, []])  # [] is F.linear everywhere: the same


def test_an_ineligible_implementation_is_never_timed(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)
    monkeypatch.setattr(cpu_choices, "check_paths", lambda weights, paths: {p: p == PLAIN for p in paths})
    seen = []
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer([packed_wins], [], seen))
    assert choose_linear_order("auto", target, tmp_path).paths == ()
    assert seen and all(paths == (PLAIN,) for paths in seen)


def test_a_forced_order_never_measures(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)

    def no_timing(*args, **kwargs):
        raise AssertionError("a forced order must not measure")

    monkeypatch.setattr(cpu_choices, "time_paths", no_timing)
    assert choose_linear_order("plain", target, tmp_path).paths == ()
    assert choose_linear_order("weight-left", target, tmp_path).path(16) == WEIGHT_LEFT
    if lin.mkl_packed_available():
        forced = choose_linear_order("mkl-packed", target, tmp_path)
        assert forced.packed_rows == (2, 4, 8, 16) and forced.packed_mb > 0
    if lin.onednn_packed_available():
        forced = choose_linear_order("onednn-packed", target, tmp_path)
        weights_mb = sum(w.numel() * 4 for w in linear_weights(target)) / 2**20
        assert forced.path(3) == ONEDNN and forced.packed_rows == () and forced.packed_mb == round(weights_mb, 1)
    bf16 = target.to(torch.bfloat16)
    assert "does not run bf16" in choose_linear_order("weight-left", bf16, tmp_path).reason
    assert "does not run bf16" in choose_linear_order("mkl-packed", bf16, tmp_path).reason
    forced = choose_linear_order("onednn-packed", bf16, tmp_path)
    if lin.onednn_packed_available() and lin.onednn_bf16_available():
        weights_mb = sum(w.numel() * 2 for w in linear_weights(bf16)) / 2**20
        assert forced.dtype == torch.bfloat16 and forced.path(3) == ONEDNN and forced.packed_mb == round(weights_mb, 1)
    else:  # an AVX2-only CPU: oneDNN would refuse to pack bf16, so the order says so and runs F.linear
        assert forced.paths == () and "not native on this CPU" in forced.reason
    assert not (tmp_path / cpu_choices.CACHE_FILE).exists()
    assert set(cpu_choices.LINEAR_ORDERS) == {"auto", "plain", "weight-left", "mkl-packed", "onednn-packed"}


def onednn_wins_from_4(r):
    return {PLAIN: 10.0, ONEDNN: 5.0 if r >= 4 else 10.0}


@needs_onednn_bf16
def test_a_bf16_model_is_measured_on_its_own_and_packs_in_bf16(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)
    seen = []
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer([up_to_4, up_to_4, up_to_4], [], seen))
    fp32 = choose_linear_order("auto", target, tmp_path)
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer([onednn_wins_from_4] * 3, [], seen))
    bf16_model = target.to(torch.bfloat16)
    bf16 = choose_linear_order("auto", bf16_model, tmp_path)
    assert seen[-1] == (PLAIN, ONEDNN)  # bf16 times only what bf16 may run
    assert fp32.dtype == torch.float32 and list(fp32.paths) == UP_TO_4
    assert bf16.dtype == torch.bfloat16 and bf16.paths == (PLAIN, PLAIN, ONEDNN, ONEDNN, ONEDNN, ONEDNN)
    entries = json.loads((tmp_path / cpu_choices.CACHE_FILE).read_text())
    assert len(entries) == 2 and {e.get("dtype") for e in entries.values()} == {"fp32", "bf16"}
    assert choose_linear_order("auto", bf16_model, tmp_path).paths == bf16.paths  # cached, per dtype
    apply_linear_order(bf16_model, bf16)
    tokens = [3, 5, 7, 9]
    *_, packed = fresh_prefill(bf16_model, tokens)
    from workbench.models.llama import Attention

    assert all(isinstance(a.qkv_packed, lin.FusedPack) and a.qkv_packed.packed.dtype == torch.bfloat16
               and set(a.o_proj.packed) == {ONEDNN} for a in bf16_model.modules() if isinstance(a, Attention))
    apply_linear_order(bf16_model, LinearOrder(dtype=torch.bfloat16))
    *_, plain = fresh_prefill(bf16_model, tokens)
    assert torch.equal(packed, plain)


def test_an_entry_from_before_the_per_row_choice_is_measured_again(tmp_path, monkeypatch):
    """A verdict cached as one weight-left range, or before the rounds existed, is measured again."""
    target = _tiny_target(tmp_path)
    key = cpu_choices._cache_key(linear_weights(target), lin.available_paths())
    old = {"max_left_rows": 16, "rounds": 3, "verdicts": [16, 16, 16], "timings": []}
    (tmp_path / cpu_choices.CACHE_FILE).write_text(json.dumps({key: old}))
    calls = []
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer([up_to_4], calls))
    assert list(choose_linear_order("auto", target, tmp_path).paths) == UP_TO_4 and calls
    assert json.loads((tmp_path / cpu_choices.CACHE_FILE).read_text())[key]["verdicts"] == [UP_TO_4] * 3


def test_unreadable_cache_measures_again(tmp_path, monkeypatch):
    target = _tiny_target(tmp_path)
    (tmp_path / cpu_choices.CACHE_FILE).write_text("not json")
    monkeypatch.setattr(cpu_choices, "time_paths", fake_timer([loaded], []))
    assert choose_linear_order("auto", target, tmp_path).paths == ()


@pytest.mark.parametrize("path", PATHS)
def test_applied_order_reaches_every_layer_and_keeps_the_output(tmp_path, path):
    if path not in lin.available_paths():
        pytest.skip(f"torch built without {lin.PATH_NAMES[path]}")
    target = _tiny_target(tmp_path)
    tokens = [3, 5, 7, 9]
    *_, plain = fresh_prefill(target, tokens)
    apply_linear_order(target, everywhere(path))
    layers = [m for m in target.modules() if isinstance(m, Linear)]
    assert layers and all(m.order.path(4) == path for m in layers)
    *_, other = fresh_prefill(target, tokens)
    torch.testing.assert_close(other, plain, rtol=1e-5, atol=1e-5)


def test_module_keeps_nn_linear_names_and_gradients():
    torch.manual_seed(0)
    mod = Linear(16, 8)
    apply_linear_order(mod, everywhere(PACKED if lin.mkl_packed_available() else WEIGHT_LEFT))
    assert set(mod.state_dict()) == {"weight", "bias"}  # packed copies are not saved
    x = torch.randn(4, 16, requires_grad=True)
    mod(x).square().sum().backward()
    ref = torch.nn.Linear(16, 8)
    ref.load_state_dict(mod.state_dict())
    x2 = x.detach().clone().requires_grad_(True)
    ref(x2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(mod.weight.grad, ref.weight.grad)


@needs_onednn
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_projections_give_the_same_bits_and_replace_the_members_copies(tmp_path, dtype):
    """q/k/v and gate/up as one oneDNN product each: the same logits, bit for bit, as every
    projection its own, at every row count the order sends to oneDNN; the members keep no copy
    of their own, so the fused packs hold exactly the bytes the members' copies would."""
    from workbench.models.llama import MLP, Attention

    if dtype == torch.bfloat16 and not lin.onednn_bf16_available():
        pytest.skip("oneDNN's bf16 products need AVX-512 BW/VL/DQ or AVX-NE-CONVERT")
    target = _tiny_target(tmp_path).to(dtype)
    order = LinearOrder(tuple(ONEDNN for _ in ROW_BUCKETS), "test", dtype=dtype)
    separate_mb = apply_linear_order(target, order, fuse=False)
    tokens = [3, 5, 7, 9, 11, 2, 4, 6]
    *_, separate = fresh_prefill(target, tokens)
    assert apply_linear_order(target, order) == separate_mb
    attn = [m for m in target.modules() if isinstance(m, Attention)]
    mlps = [m for m in target.modules() if isinstance(m, MLP)]
    assert attn and all(isinstance(a.qkv_packed, lin.FusedPack) and a.q_proj.packed == {} for a in attn)
    assert mlps and all(isinstance(m.gate_up_packed, lin.FusedPack) and m.down_proj.packed for m in mlps)
    *_, fused = fresh_prefill(target, tokens)
    assert torch.equal(fused, separate)
    apply_linear_order(target, LinearOrder(dtype=dtype))  # an order without oneDNN: no fused packs
    assert all(a.qkv_packed is None for a in attn) and all(m.gate_up_packed is None for m in mlps)


@needs_onednn
def test_a_fused_pack_runs_only_where_it_is_fresh_and_the_order_runs_onednn():
    from workbench.models.llama import MLP
    from workbench.models.config import ModelConfig

    cfg = ModelConfig(vocab_size=32, hidden_size=16, intermediate_size=24, num_layers=1, num_heads=2,
                      num_kv_heads=1, head_dim=8, mlp_bias=True)
    mlp = MLP(cfg)
    torch.nn.init.normal_(mlp.gate_proj.weight)
    torch.nn.init.normal_(mlp.up_proj.weight)
    order = LinearOrder((WEIGHT_LEFT, ONEDNN, ONEDNN, ONEDNN, ONEDNN, ONEDNN), "test")
    apply_linear_order(mlp, order)
    members = (mlp.gate_proj, mlp.up_proj)
    calls = []
    real = lin.onednn_linear
    lin.onednn_linear = lambda *a: calls.append(a[0].shape[0]) or real(*a)
    try:
        with torch.inference_mode():
            x = torch.randn(4, 16)
            gate, up = lin.project(x, members, mlp.gate_up_packed)
            assert calls == [4]  # one product for both
            torch.testing.assert_close(gate, mlp.gate_proj(x), rtol=1e-5, atol=1e-5)  # biases too
            torch.testing.assert_close(up, F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias), rtol=1e-5, atol=1e-5)
            lin.project(torch.randn(1, 16), members, mlp.gate_up_packed)  # 1 row: weight-left, no oneDNN
            assert calls == [4]
        with torch.no_grad():
            mlp.up_proj.weight.mul_(2)  # a changed member: the stale pack is not used
        with torch.inference_mode():
            _, up = lin.project(x, members, mlp.gate_up_packed)
            assert calls == [4] and torch.equal(up, F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias))
        apply_linear_order(mlp, order)  # packed afresh; then a changed bias alone makes it stale too
        with torch.no_grad():
            mlp.gate_proj.bias.add_(1)
        with torch.inference_mode():
            gate, _ = lin.project(x, members, mlp.gate_up_packed)
            assert calls == [4] and torch.equal(gate, F.linear(x, mlp.gate_proj.weight, mlp.gate_proj.bias))
    finally:
        lin.onednn_linear = real
    x = torch.randn(4, 16, requires_grad=True)  # a product autograd must differentiate: member by member
    apply_linear_order(mlp, order)
    gate, up = lin.project(x, members, mlp.gate_up_packed)
    (gate.sum() + up.sum()).backward()
    torch.testing.assert_close(x.grad, (mlp.gate_proj.weight + mlp.up_proj.weight).sum(0).expand(4, 16))


def test_plain_products_run_f_linear_inside_and_the_measured_order_after(monkeypatch):
    """The switch of ``experiments/beside_plain.py``: inside the block every product of the modules is F.linear's
    bits (no other implementation is called, the fused q/k/v of a oneDNN order included); after it,
    each Linear follows its own order again, its packs untouched."""
    from workbench.models.linear import plain_products

    calls = []
    for name in ("weight_left_linear", "onednn_linear", "packed_linear"):
        real = getattr(lin, name)
        monkeypatch.setattr(lin, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    gen = torch.Generator().manual_seed(3)
    first, second = Linear(64, 96), Linear(96, 32)
    with torch.no_grad():
        for m in (first, second):
            m.weight.copy_(torch.randn(m.weight.shape, generator=gen))
    apply_linear_order(first, everywhere(WEIGHT_LEFT))
    other = everywhere(ONEDNN) if lin.onednn_packed_available() else everywhere(WEIGHT_LEFT)
    apply_linear_order(second, other)
    packs = second.packed
    x = torch.randn(4, 64, generator=gen)
    with torch.inference_mode():
        with plain_products(first, None, second, first):  # None skipped, a module named twice counted once
            assert first.order.paths == () and second.order.paths == ()
            h = first(x)
            y = second(h)
        assert calls == []
        assert torch.equal(h, F.linear(x, first.weight, first.bias))
        assert torch.equal(y, F.linear(h, second.weight, second.bias))
        assert first.order == everywhere(WEIGHT_LEFT) and second.order == other and second.packed is packs
        second(first(x))
    assert calls[0] == "weight_left_linear" and len(calls) == 2


def test_plain_products_restore_the_order_when_the_block_fails():
    from workbench.models.linear import plain_products

    mod = Linear(8, 8)
    apply_linear_order(mod, everywhere(WEIGHT_LEFT))
    with pytest.raises(RuntimeError, match="inside"):
        with plain_products(mod):
            raise RuntimeError("inside")
    assert mod.order == everywhere(WEIGHT_LEFT)


@needs_onednn
@pytest.mark.parametrize("hot_first", [True, False])
def test_a_heads_hot_rows_follow_the_lm_heads_order_with_packs_of_their_own(tmp_path, hot_first):
    """The hot tokens' rows of the lm_head run the lm_head's few-row products with their own packed
    copy (the lm_head's copies hold every row), whether the hot list or the order came first; the
    log-probs are F.linear's; the copy is not saved with the head."""
    from workbench.models.draft import random_head

    target = _tiny_target(tmp_path)
    head = random_head(target, seed=0)
    hot = torch.tensor([3, 5, 7, 11, 13])
    order = everywhere(ONEDNN)
    if hot_first:
        head.set_hot_tokens(hot)
    apply_linear_order(target, order)
    apply_linear_order(head, order)
    if not hot_first:
        head.set_hot_tokens(hot)
    x = torch.randn(2, target.config.hidden_size)
    lp, ids = head.log_probs(x)
    rows = head._hot
    assert rows.order is order and set(rows.packed) == {ONEDNN} and torch.equal(ids, hot)
    want = torch.log_softmax(F.linear(x, target.lm_head.weight[hot]).float(), dim=-1)
    torch.testing.assert_close(lp, want, rtol=1e-5, atol=1e-5)
    assert not any("hot" in k for k in head.state_dict())
