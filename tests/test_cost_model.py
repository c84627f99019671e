"""The one cost model (workbench/cost_model.py): a step's parts, a setting's prediction, a closed
loop's tokens/s with each request's prefill and the draft's catch-up, and that every place that
predicts reads it (no second interpolator)."""

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest

from workbench.cost_model import Curve, Overhead, StepCost, decode_context
from workbench.engine.config import SpecConfig, parse_spec

ROOT = Path(__file__).resolve().parents[1]
COST = StepCost(verify=((1, 10.0), (4, 11.0), (8, 16.0)), draft=((1, 1.0), (8, 2.4)),
                overhead=Overhead(plain_per_step=0.5, plain_per_request=0.5, spec_per_step=2.0, spec_per_request=1.0))


def test_a_step_is_its_verify_its_draft_phases_and_its_overhead():
    tree = parse_spec("eagle2:4/3/2")  # D=4, S=3, K=2
    parts = COST.parts(tree, batch=1, tau=2.0)
    assert parts.verify_ms == 11.0  # verify(1 x 4)
    assert parts.draft_extend_ms == pytest.approx(1.2)  # draft(1 x τ rows) = draft(2)
    assert parts.draft_levels_ms == pytest.approx(2 * 1.2)  # (S - 1) x draft(1 x K)
    assert parts.overhead_ms == 3.0  # 2 + 1 x 1
    assert parts.total_ms == pytest.approx(11.0 + 3.6 + 3.0)
    plain = COST.parts(SpecConfig("vanilla"), batch=2)
    assert (plain.verify_ms, plain.draft_ms, plain.overhead_ms) == (pytest.approx(10 + 1 / 3), 0.0, 1.5)
    assert COST.step_ms(tree, 2, 1.0) == pytest.approx(16.0 + 1.2 + 2 * 1.6 + 4.0)  # two requests


def test_the_speculative_overhead_moves_with_the_draft_levels_where_both_were_timed():
    """The speculative overhead was timed at a tree of 3 levels and at a chain of one: each level
    more or fewer adds or takes the per-level difference (``Overhead``), per step and per request.
    Timed at one setting only (``spec_levels`` 0), every speculative setting pays the same."""
    timed = replace(COST, overhead=replace(COST.overhead, spec_levels=3, level_per_step=0.5, level_per_request=0.25))
    chain, tree, deep = parse_spec("linear:1"), parse_spec("eagle2:4/3/2"), parse_spec("eagle2:8/5/4")
    assert timed.parts(tree, batch=2).overhead_ms == COST.parts(tree, batch=2).overhead_ms == 4.0  # 2 + 1 x 2
    assert timed.parts(chain, batch=2).overhead_ms == pytest.approx(4.0 - 2 * (0.5 + 0.25 * 2))
    assert timed.parts(deep, batch=2).overhead_ms == pytest.approx(4.0 + 2 * (0.5 + 0.25 * 2))
    assert COST.parts(chain, batch=2).overhead_ms == COST.parts(deep, batch=2).overhead_ms == 4.0
    assert timed.parts(SpecConfig("vanilla"), batch=2).overhead_ms == 1.5  # plain decoding has no levels
    assert StepCost.from_dict(json.loads(json.dumps(timed.as_dict()))) == timed
    noisy = replace(COST, overhead=replace(COST.overhead, spec_levels=3, level_per_step=2.0, level_per_request=-1.0))
    assert noisy.parts(chain, batch=1).overhead_ms == pytest.approx(3.0 - 2 * 1.0)  # 2 - 1 a level at one request
    assert noisy.parts(chain, batch=4).overhead_ms == noisy.parts(tree, batch=4).overhead_ms == 6.0  # never below 0


def test_the_overhead_measurement_times_the_tree_and_the_chain_and_splits_the_difference_per_level(monkeypatch):
    """The overhead's lines on made-up step times: a tree's step 6 ms + 2 ms a request over its
    forwards, a chain's 2 + 1 ms a request: 2 ms + 0.5 ms a request per level of the two between them."""
    import workbench.measure.step_cost as sc

    def took(wb, spec, *, batch, forwards, prefix_len, probe):
        if not spec.speculative:
            return [1.0 + 0.5 * batch] * 3
        return [{3: 6.0 + 2.0 * batch, 1: 2.0 + 1.0 * batch}[spec.num_steps]] * 3

    monkeypatch.setattr(sc, "_step_overheads", took)
    got = sc.overhead_fields([sc.time_overhead_steps(None, parse_spec("linear:1").draft, COST)])
    points = got.pop("points")
    assert got == {"plain_per_step": 1.0, "plain_per_request": 0.5, "spec_per_step": 6.0, "spec_per_request": 2.0,
                   "spec_levels": 3, "level_per_step": 2.0, "level_per_request": 0.5}
    assert points["chain"] == [[b, 2.0 + 1.0 * b] for b in sc.OVERHEAD_BATCHES]  # what the chain's line went through
    assert Overhead(**got).ms(True, 4, levels=1) == pytest.approx(2.0 + 1.0 * 4)  # the chain's own line back


def test_the_overhead_line_goes_through_each_batchs_median_over_every_rounds_steps():
    """Three rounds of a batch of 8 that disagree (one slow round): its point is the median of all
    nine steps, not the median of the rounds' medians, and the line is fitted once through the
    pooled points; the rounds as JSON keeps them (lists) pool the same."""
    import workbench.measure.step_cost as sc

    rounds = [{"plain": {1: [2.0, 2.0, 2.0], 8: [17.7, 17.0, 16.0]}},
              {"plain": {1: [2.0, 3.0, 2.5], 8: [-1.7, 0.0, 1.0]}},
              {"plain": {1: [1.5, 2.0, 2.0], 8: [0.4, 0.5, 0.2]}}]
    assert sc.overhead_points(rounds) == {"plain": [[1, 2.0], [8, 0.5]]}  # the rounds' medians: 0.4 at 8
    as_json = [{k: [[b, ms] for b, ms in v.items()] for k, v in r.items()} for r in rounds]
    assert sc.overhead_points(as_json) == sc.overhead_points(rounds)
    got = sc.overhead_fields(rounds)
    assert (got["plain_per_step"], got["plain_per_request"]) == (pytest.approx(2.0 + 1.5 / 7, abs=1e-3),
                                                              pytest.approx(-1.5 / 7, abs=1e-3))
    assert got["spec_per_step"] == 0.0 and got["points"] == {"plain": [[1, 2.0], [8, 0.5]]}
    assert Overhead(**got).points_of("plain") == ((1, 2.0), (8, 0.5)) and Overhead().points_of("tree") == ()


def test_a_prediction_is_tokens_per_second_tpot_and_the_speedup_at_the_same_batch():
    tree = parse_spec("eagle2:4/3/2")
    p = COST.predict(tree, tau=2.0)
    step = 11.0 + 3.6 + 3.0
    assert p.tokens_per_s == pytest.approx(2.0 / step * 1e3) and p.tpot_ms == pytest.approx(step / 2.0)
    assert p.speedup == pytest.approx(2.0 * 11.0 / step)  # plain decoding's step: verify(1) + its overhead
    off = COST.predict(SpecConfig("vanilla"), batch=4)
    assert off.tau == 1.0 and off.tokens_per_s == pytest.approx(4 / (11.0 + 2.5) * 1e3) and off.speedup == 1.0
    at4 = COST.predict(tree, tau=2.0, batch=4)
    assert at4.plain_ms == pytest.approx(11.0 + 2.5) and at4.parts.verify_ms == pytest.approx(16.0 + 8 * 5 / 4)
    with pytest.raises(ValueError, match="τ >= 1"):
        COST.predict(tree, tau=0.5)
    with pytest.raises(ValueError, match="batch"):
        COST.predict(tree, tau=2.0, batch=0)


def test_a_tree_the_draft_filled_in_part_is_priced_at_the_verify_it_ran():
    """``nodes``: the tokens a step verified (the n-gram lookup proposes only what matches), read by
    the bench report from the run's own counts (``report.verified_nodes``)."""
    from workbench.bench.report import verified_nodes

    wide = parse_spec("eagle2:8/5/4")
    assert COST.parts(wide, tau=1.5).verify_ms == 16.0  # verify(8): num_draft_tokens
    assert COST.parts(wide, tau=1.5, nodes=4.0).verify_ms == 11.0  # verify(4): what the steps verified
    assert COST.predict(wide, 1.5, nodes=4.0).speedup > COST.predict(wide, 1.5).speedup
    assert verified_nodes({"vllm": {"num_drafts": 10, "num_draft_tokens": 30}}) == 4.0  # root + 3 drafts a step
    assert verified_nodes({"vllm": {"num_drafts": 0, "num_draft_tokens": 0}}) is None and verified_nodes({}) is None


def test_a_mix_of_verify_sizes_is_priced_at_the_mean_forward_of_one_request():
    """A draft that fills its tree on some steps and not on others (the n-gram lookup: the root
    alone where nothing matches) verifies a mix of sizes; the curve is not a line, so one
    request's verify is the mix's mean forward, not the forward at the mean size. At a batch the
    requests' trees share each forward: the mean size, its batch pace the mix's mean of each
    count's (each request's attention runs at its own count's pace). The bench report reads the mix from each
    step's count of drafts verified, the steps that drafted nothing included."""
    from workbench.bench.report import mean_nodes, verified_mix
    from workbench.cost_model import verify_mix

    wide = parse_spec("eagle2:8/5/4")
    mix = {1: 1, 8: 1}  # half the steps the root alone, half a full tree of 8
    assert COST.parts(wide, tau=1.5, nodes=mix).verify_ms == pytest.approx((10.0 + 16.0) / 2)
    assert COST.parts(wide, tau=1.5, nodes=4.5).verify_ms == pytest.approx(11.0 + 0.5 * 5 / 4)  # the curve at 4.5
    at_two = COST.parts(wide, batch=2, tau=1.5, nodes=mix).verify_ms
    assert at_two == pytest.approx(COST.parts(wide, batch=2, tau=1.5, nodes=4.5).verify_ms)
    assert verify_mix(4) == {4.0: 1.0} and verify_mix({1: 3, 4: 1}) == {1.0: 0.75, 4.0: 0.25}
    for bad in ({}, {4: 0}, {0: 1}, 0.5):
        with pytest.raises(ValueError):
            verify_mix(bad)
    paced = replace(COST, batched_tokens=((2, 1, 1.2), (2, 8, 1.5)))  # a batch's pace by new tokens a request
    at_mean = paced.parts(wide, batch=2, tau=1.5, nodes=4.5).verify_ms  # every request 4.5 tokens: one pace
    mixed = paced.parts(wide, batch=2, tau=1.5, nodes=mix).verify_ms  # half the requests 1, half 8: each its own
    bare = COST.parts(wide, batch=2, tau=1.5, nodes=4.5).verify_ms
    assert at_mean == pytest.approx(bare * paced.batch_pace(2, 4.5)) and mixed == pytest.approx(bare * (1.2 + 1.5) / 2)
    assert paced.pace_of(wide, 2, mix) == pytest.approx(1.35) and paced.pace_of(parse_spec("vanilla"), 2) == 1.2
    assert paced.pace_of(wide, 1, mix) == 1.0  # one request: the curves' own
    recs = [{"drafts_verified": [[0, 3, 3, 1]]}, {"drafts_verified": [[3]]}]
    assert verified_mix(recs) == {1: 1, 2: 1, 4: 3} and mean_nodes(verified_mix(recs)) == 3.0
    assert verified_mix([{"output_ids": [[5]]}]) is None  # a record without per-step counts


def test_without_a_measured_overhead_the_forwards_alone_are_priced():
    bare = StepCost(verify=COST.verify, draft=COST.draft)
    assert not bare.overhead.measured and COST.overhead.measured
    assert bare.plain_ms(1) == 10.0 and bare.parts(parse_spec("linear:1"), 1).overhead_ms == 0.0


def test_curves_read_as_measured_and_keep_their_range():
    c = Curve.from_rows([{"tokens": 1, "ms": 10.0, "lo": 9.0, "hi": 12.0}, {"tokens": 4, "ms": 8.0, "lo": 7.0, "hi": 9.0},
                         {"tokens": 8, "ms": 16.0, "lo": 15.0, "hi": 18.0}])
    assert c.at(4) == 8.0 and c.at(2) == pytest.approx(9 + 1 / 3)  # a dip is kept: a prediction reads it
    assert c.at(16) == 32.0 and c.at(0.5) == 10.0  # the last slope past the end, the first value before it
    assert c.range_at(4) == (7.0, 9.0)
    assert c.fit.ms == (9.0, 9.0, 16.0)  # the non-decreasing fit pools the dip (for naming a regime)
    with pytest.raises(ValueError, match="outside the measured range"):
        c.at(9, extrapolate=False)
    with pytest.raises(ValueError, match="one value per size"):
        Curve(((1, 1.0), (2, 2.0)), low=(1.0,))


def test_the_model_round_trips_through_json():
    again = StepCost.from_dict(COST.as_dict())
    assert again == COST
    priced = replace(COST, prefill=((32, 20.0), (128, 50.0)), catch_up=((32, 2.0), (128, 5.0)))
    assert StepCost.from_dict(json.loads(json.dumps(priced.as_dict()))) == priced
    before = {k: v for k, v in priced.as_dict().items() if k not in ("prefill", "catch_up")}  # a cache entry of old
    assert StepCost.from_dict(before) == COST and StepCost.from_dict(before).prefill_ms(100) == 0.0
    rows = StepCost.from_rows([{"tokens": 1, "ms": 10.0, "lo": 9, "hi": 11}], [{"rows": 1, "ms": 1.0}])
    assert rows.verify_range == ((9.0, 11.0),) and rows.draft_range == () and rows.draft == ((1, 1.0),)


# ---- a closed loop: the decode steps' shares, and each request's prefill and catch-up whole --------------------
PRICED = replace(COST, prefill=((32, 20.0), (128, 50.0)), catch_up=((32, 2.0), (128, 5.0)))


def test_a_request_outside_its_decode_steps_costs_its_prefill_and_the_drafts_catch_up():
    assert PRICED.prefill_ms(80) == pytest.approx(35.0)  # read linearly between 32 and 128 tokens
    assert PRICED.prefill_ms(512) == pytest.approx(50.0 + 30.0 * 4)  # the last slope past 128
    # the extend over the prompt's rows less the τ rows a step's extend is priced at, draft(2) = 1.2
    assert PRICED.catch_up_ms(80, tau=2.0) == pytest.approx(3.5 - 1.2)
    assert PRICED.catch_up_ms(1, tau=8.0) == 0.0  # never below nothing
    assert COST.prefill_ms(80) == 0.0 and COST.catch_up_ms(80) == 0.0  # not measured: priced 0
    with pytest.raises(ValueError, match="prefill cost"):
        StepCost(verify=COST.verify, prefill=((128, 5.0), (32, 2.0)))


def test_a_closed_loop_adds_each_requests_share_of_the_steps_to_its_prefill_and_catch_up():
    tree = parse_spec("eagle2:4/3/2")
    got = PRICED.closed_loop(tree, 2.0, 2, prompt_lens=[32, 80, 500], output_lens=[5, 9, 0])
    step = PRICED.step_ms(tree, 2, 2.0)
    # 4 and 8 tokens after the prefills' first, 2 a step, each step shared by 2; the third was refused
    assert got.decode_ms == pytest.approx((4 + 8) / 2.0 * step / 2)
    assert got.prefill_ms == pytest.approx(20.0 + 35.0) and got.catch_up_ms == pytest.approx((2.0 - 1.2) + (3.5 - 1.2))
    assert got.tokens == 14 and got.tokens_per_s == pytest.approx(14 / (got.decode_ms + 55.0 + 3.1) * 1e3)
    assert got.step == PRICED.predict(tree, 2.0, 2) and got.prefill_priced
    plain = PRICED.closed_loop(SpecConfig("vanilla"), None, 1.5, prompt_lens=[32], output_lens=[3])
    assert plain.catch_up_ms == 0.0 and plain.decode_ms == pytest.approx(2 * PRICED.plain_ms(1.5) / 1.5)
    # with no prefill measured the loop is its decode steps alone, and says so
    bare = COST.closed_loop(tree, 2.0, 2, prompt_lens=[32, 80], output_lens=[5, 9])
    assert not bare.prefill_priced and bare.total_ms == pytest.approx(got.decode_ms)
    with pytest.raises(ValueError, match="one output length per prompt"):
        PRICED.closed_loop(tree, 2.0, 2, prompt_lens=[32], output_lens=[5, 9])
    # a run that verified fewer tokens than num_draft_tokens (an n-gram tree filled in part) is priced at them
    small = PRICED.closed_loop(tree, 2.0, 2, prompt_lens=[32, 80], output_lens=[5, 9], nodes=2.0)
    assert small.step == PRICED.predict(tree, 2.0, 2, nodes=2.0) and small.decode_ms < got.decode_ms


def test_prompts_admitted_in_one_prefill_step_share_its_fixed_part():
    """A run that admitted its requests in fewer prefill steps than requests (a closed loop's
    first ones together) saves ``prefill_joined`` for each prompt beyond the first of a step;
    without the count, or without the saving measured, a step each."""
    joined = replace(PRICED, prefill_joined=6.0)
    tree = parse_spec("eagle2:4/3/2")
    kw = dict(prompt_lens=[32, 80, 128, 500], output_lens=[5, 9, 3, 0])  # the last refused: never prefilled
    alone = joined.closed_loop(tree, 2.0, 2, **kw)
    assert alone.prefill_ms == pytest.approx(20.0 + 35.0 + 50.0) and alone.prefill_saved_ms == 0.0
    two = joined.closed_loop(tree, 2.0, 2, prefill_steps=2, **kw)  # three prompts in two steps
    assert two.prefill_ms == pytest.approx(105.0 - 6.0) and two.prefill_saved_ms == pytest.approx(6.0)
    assert joined.closed_loop(tree, 2.0, 2, prefill_steps=1, **kw).prefill_ms == pytest.approx(105.0 - 12.0)
    assert joined.closed_loop(tree, 2.0, 2, prefill_steps=2.5, **kw).prefill_ms == pytest.approx(105.0 - 3.0)
    assert PRICED.closed_loop(tree, 2.0, 2, prefill_steps=1, **kw).prefill_ms == alone.prefill_ms  # not measured
    assert two.decode_ms == alone.decode_ms and two.catch_up_ms == alone.catch_up_ms
    for steps in (0, 4):
        with pytest.raises(ValueError, match="3 prefilled requests take 1 to 3 prefill steps"):
            joined.closed_loop(tree, 2.0, 2, prefill_steps=steps, **kw)
    assert StepCost.from_dict(joined.as_dict()).prefill_joined == 6.0
    assert StepCost.from_dict({k: v for k, v in joined.as_dict().items() if k != "prefill_joined"}).prefill_joined == 0.0


# ---- one model: nothing else interpolates a cost curve or writes a step's formula ----------------------------
PREDICTORS = ("workbench/engine/policy/auto.py", "workbench/bench/tune.py", "workbench/viz/compare.py",
              "workbench/lessons/cost_curve.py", "workbench/lessons/takeaways.py", "workbench/measure/step_cost.py")


def _calls_and_defs(path: Path) -> tuple[set[str], set[str]]:
    tree = ast.parse(path.read_text())
    defs = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    calls = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute):
            calls.add(n.attr)
        elif isinstance(n, ast.Name):
            calls.add(n.id)
    return defs, calls


def test_every_predictor_reads_the_one_model_and_none_interpolates_on_its_own():
    for rel in PREDICTORS:
        text = (ROOT / rel).read_text()
        assert "cost_model" in text, f"{rel} does not use workbench/cost_model.py"
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        if path.name == "cost_model.py":
            continue
        defs, calls = _calls_and_defs(path)
        rel = path.relative_to(ROOT)
        assert not {d for d in defs if d.lstrip("_") in ("interp", "interpolate")}, f"{rel} defines its own interpolation"
        assert "interp" not in calls, f"{rel} interpolates with numpy's interp: read a cost_model.Curve instead"
        assert not {"CostCurve"} & defs, f"{rel} defines a second cost curve"


def test_a_steps_context_is_priced_in_its_verify_beyond_the_context_the_curves_held():
    """``kv_ms(D)`` a committed token a request reads when each brings D new tokens: B requests of
    mean context L cost ``kv_ms(D) * B*L - kv_ms(B*D) * verify_prefix`` over the curves (every
    request reads its own context; the curve's one sequence of B*D tokens read its prefix), in the
    verify; plain decoding (D = 1) pays less a token than a tree's verify at the same batch; a
    closed loop reads its requests' mean context."""
    from dataclasses import replace

    cost = replace(COST, kv=((1, 0.01), (4, 0.02), (32, 0.04)), prefix=128.0)
    tree = parse_spec("eagle2:4/3/2")  # 4 new tokens a request
    assert cost.kv_ms(2) == pytest.approx(0.01 + 0.01 / 3) and cost.kv_ms(64) == 0.04  # flat past the last point
    assert cost.context_ms(8, 400) == pytest.approx(0.01 * 8 * 400 - cost.kv_ms(8) * 128)
    assert cost.context_ms(8, 400, 4) == pytest.approx(0.02 * 8 * 400 - 0.04 * 128)
    assert cost.context_ms(8, 128) > 0  # eight requests read eight prefixes, the curve's one sequence one
    assert cost.context_ms(1, 128) == 0.0 and cost.context_ms(1, 128, 4) == 0.0  # the curves' own context
    assert cost.context_ms(8, None) == 0.0 and COST.context_ms(8, 400) == 0.0
    assert cost.context_ms(1, 64) == pytest.approx(-0.64)  # shorter than the curves': cheaper
    more = cost.parts(tree, 8, 2.0, context=400).verify_ms - cost.parts(tree, 8, 2.0).verify_ms
    assert more == pytest.approx(cost.context_ms(8, 400, 4))
    plain_more = cost.plain_ms(8, 400) - cost.plain_ms(8)
    assert plain_more == pytest.approx(cost.context_ms(8, 400)) and plain_more < more
    fewer = cost.parts(tree, 1, 2.0, nodes=2.5, context=400).verify_ms - cost.parts(tree, 1, 2.0, nodes=2.5).verify_ms
    assert fewer == pytest.approx(cost.context_ms(1, 400, 2.5))  # a tree the draft filled in part: its own tokens
    p = cost.predict(tree, 2.0, batch=8, context=400)
    assert p.plain_ms == pytest.approx(cost.plain_ms(8, 400)) and p.parts.total_ms == pytest.approx(
        cost.step_ms(tree, 8, 2.0, context=400))
    assert replace(cost, verify_prefix=300.0).context_ms(1, 428) == pytest.approx(0.01 * 128)  # a probe's verify
    loop = cost.closed_loop(tree, 2.0, 1, prompt_lens=[100, 300], output_lens=[11, 31])
    context = ((100 + 5.5) * 10 + (300 + 15.5) * 30) / 40  # each request's steps at p + n/2, by its n - 1 steps
    assert decode_context([100, 300, 50], [11, 31, 0]) == pytest.approx(context)  # a refused request reads nothing
    assert decode_context([100], [1]) is None  # the prefill's token alone: no decode step
    assert loop.step.parts.total_ms == pytest.approx(cost.step_ms(tree, 1, 2.0, context=context))
    assert StepCost.from_dict(cost.as_dict()).context_ms(8, 400, 4) == pytest.approx(cost.context_ms(8, 400, 4))
    assert StepCost.from_dict({**COST.as_dict(), "kv": [], "kv_ms": 0.01}).kv == ((1, 0.01),)  # an older record
