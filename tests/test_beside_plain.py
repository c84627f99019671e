"""The measured linear order beside F.linear in one run (``experiments/beside_plain.py``): the
suite with every engine method's F.linear twin, the verify curve both ways, and the comparison."""

import json

import pytest

from experiments import beside_plain
from workbench.bench import tune
from workbench.measure import metrics


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from workbench.testing.tiny import make_tiny_app_model

    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-bench"))


def test_beside_plain_runs_every_engine_method_twice_and_compares_the_orders(tiny_dir, tmp_path, monkeypatch):
    """Each engine method is followed by its F.linear twin on every question,
    the twins' outputs are the same tokens (fp32), the verify curve is measured both ways, and the
    comparison is recomputed from the records and the curves (the step costs made up)."""
    from helpers import MadeUpStepCosts

    monkeypatch.setattr("workbench.measure.step_cost.step_cost_for", MadeUpStepCosts())
    out = tmp_path / "out"
    rc = beside_plain.main(["--target", str(tiny_dir), "--draft", "random", "--dtype", "fp32", "--limit", "2",
               "--max-new-tokens", "6", "--methods", "vanilla,linear:2,hf-greedy", "--no-temperature-tau",
               "--calibration", "none", "--threads", "1", "--linear-order", "weight-left",
               "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert list(res["summary"]) == ["vanilla", "vanilla [F.linear]", "linear:2", "linear:2 [F.linear]", "hf-greedy"]
    assert res["summary"]["linear:2 [F.linear]"]["label"].endswith("every product by F.linear")
    assert all(s["equal_to_vanilla"] == 1.0 for s in res["summary"].values())
    plain, verify = res["costs"]["plain"], res["costs"]["verify"]
    assert [c["tokens"] for c in plain["verify"]] == [c["tokens"] for c in verify] and plain["decode_ms"] > 0
    rows = res["beside_plain"]["methods"]
    assert [r["method"] for r in rows] == ["vanilla", "linear:2"]
    for r in rows:  # each figure kept to 3 decimals
        mine, twin = res["records"][r["method"]], res["records"][r["method"] + " [F.linear]"]
        ratios = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(mine, twin)]
        assert r["same_output"] == r["questions"] == 2
        assert r["ratio"] == pytest.approx(metrics.speed(mine) / metrics.speed(twin), abs=1e-3)
        assert r["per_question"]["low"] == pytest.approx(min(ratios), abs=2e-3)
        assert r["call"] == beside_plain.call(min(ratios), max(ratios))
        assert r["x_vanilla"] == pytest.approx(metrics.speed(mine) / metrics.speed(res["records"]["vanilla"]), abs=1e-3)
        assert r["x_vanilla_plain"] == pytest.approx(
            metrics.speed(twin) / metrics.speed(res["records"]["vanilla [F.linear]"]), abs=1e-3)
    cost = res["beside_plain"]["cost"]
    assert [c["tokens"] for c in cost] == [c["tokens"] for c in verify]
    for c, a, b in zip(cost, verify, plain["verify"]):
        assert c["low"] <= c["ratio"] <= c["high"] and c["ratio"] == pytest.approx(b["ms"] / a["ms"], rel=1e-2)
    assert res["meta"]["command"].startswith("python -m experiments.beside_plain --target")
    md = (out / "report.md").read_text()
    assert "## The measured linear order beside F.linear" in md and "| `linear:2` |" in md
    assert "Every output is the same tokens both ways." in md


def test_beside_plain_calls_a_difference_only_where_every_measurement_agrees():
    assert beside_plain.call(1.02, 1.3) == beside_plain.FASTER
    assert beside_plain.call(0.7, 0.98) == beside_plain.SLOWER
    assert beside_plain.call(0.9, 1.4) == beside_plain.LEVEL
    curve = lambda *ms: [{"tokens": n, "ms": m, "lo": m * 0.95, "hi": m * 1.05} for n, m in zip((1, 4), ms)]  # noqa: E731
    costs = {"verify": curve(30.0, 33.0), "decode_ms": 30.0, "plain": {"verify": curve(31.0, 60.0), "decode_ms": 31.0}}
    rows = beside_plain.cost(costs)
    assert [r["call"] for r in rows] == [beside_plain.LEVEL, beside_plain.FASTER]  # 31 vs 30 within the repeats
    assert rows[1]["x_decode"] == 1.1 and rows[1]["x_decode_plain"] == pytest.approx(60 / 31, abs=1e-3)
    assert beside_plain.cost({"verify": curve(30.0, 33.0), "decode_ms": 30.0}) == []
    assert beside_plain.compare({"vanilla": []}, costs) is None  # no twins: nothing to compare


def test_the_plain_cost_curve_runs_with_every_product_by_f_linear(tiny_dir, monkeypatch):
    """``costs_beside`` times its second curve with the target's products
    switched to F.linear (not merely inside some block), and its first with the measured order."""
    from workbench.models.linear import PLAIN, WEIGHT_LEFT
    from workbench.pipeline import Workbench

    wb = Workbench.load(str(tiny_dir), "random", dtype="fp32", linear_order="weight-left")
    orders = []
    real_logits = wb.target.logits

    def logits(hidden):
        orders.append(wb.target.lm_head.order.path(2))
        return real_logits(hidden)

    monkeypatch.setattr(wb.target, "logits", logits)
    monkeypatch.setattr(tune, "VERIFY_SIZES", (1, 2))
    costs = beside_plain.costs_beside(wb, prefix_len=8, repeats=2)
    assert [c["tokens"] for c in costs["plain"]["verify"]] == [1, 2]
    assert orders.count(WEIGHT_LEFT) == orders.count(PLAIN) == 2 * (2 + 1)  # sizes x (repeats + a warm-up round)
    assert wb.target.lm_head.order.path(2) == WEIGHT_LEFT  # the measured order again afterwards


def test_beside_plain_refuses_where_every_product_already_runs_f_linear(tiny_dir, tmp_path, monkeypatch, capsys):
    """On a CPU whose measurement kept F.linear everywhere (or a GPU) the twins would run the same
    code: the run stops after loading with one line that says so, and writes no results."""
    import workbench.pipeline as pipeline
    from workbench.models.linear import LinearOrder

    monkeypatch.setattr(pipeline, "choose_linear_order", lambda choice, model: LinearOrder(reason="measured"))
    out = tmp_path / "out"
    rc = beside_plain.main(["--target", str(tiny_dir), "--draft", "random", "--dtype", "fp32", "--limit", "1",
                            "--max-new-tokens", "4", "--methods", "vanilla", "--no-temperature-tau",
                            "--calibration", "none", "--threads", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "every product already runs F.linear here" in err and "Traceback" not in err
    assert not (out / "results.json").exists()


def test_beside_plain_refuses_f_linear_everywhere_before_loading(capsys):
    assert beside_plain.main(["--linear-order", "plain", "--target", "/nonexistent"]) == 2
    assert "both would be F.linear" in capsys.readouterr().err


def test_the_suite_alone_runs_no_twins():
    """Outside ``beside()`` the suite's pieces are its own again."""
    from workbench.bench import suite

    with beside_plain.beside():
        assert suite.Runner is beside_plain.TwinRunner
        assert [m.name for m in suite.parse_methods("vanilla,hf-greedy")] == ["vanilla", "vanilla [F.linear]", "hf-greedy"]
    assert suite.Runner is not beside_plain.TwinRunner and tune.measure_costs is beside_plain.MEASURE_COSTS
    assert [m.name for m in suite.parse_methods("vanilla,hf-greedy")] == ["vanilla", "hf-greedy"]
