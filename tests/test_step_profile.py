"""Where a step's time goes: the engine sums every step's phases per setting (``StepProfile``), the
phases and ``other`` add up to the step, the benchmark keeps the sums per question and its report
lays them out, and the predicted-against-measured gap splits into its two measured steps."""

import pytest

from helpers import random_prompts, tiny_pair
from workbench.bench import step_report
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.engine.timings import StepProfile, target_ms
from workbench.measure import metrics


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny"))


def run(pair, spec: SpecConfig, trace: bool = False) -> Engine:
    target, head = pair
    eng = Engine(target, head, spec, trace=trace)
    eng.add_requests(random_prompts(2, 16, seed=3), 12)
    traces = []
    while not eng.done:
        traces += eng.step()
    eng.traces = traces
    return eng


def test_every_step_is_profiled_under_its_setting_and_its_parts_add_up(pair):
    eng = run(pair, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=4), trace=True)
    got = eng.profile.per_step()
    assert set(got) == {"prefill", "eagle2:4/3/2"}
    spec = got["eagle2:4/3/2"]
    assert got["prefill"]["steps"] + spec["steps"] == eng.steps and spec["requests"] >= spec["steps"]
    for key in ("draft_extend_ms", "draft_tree_ms", "build_ms", "verify_ms", "logits_ms", "accept_ms", "commit_ms"):
        assert spec[key] > 0, key
    parts = sum(v for k, v in spec.items() if k.endswith("_ms") and k != "step_ms")
    assert parts == pytest.approx(spec["step_ms"], abs=0.01)  # the phases and "other" are the whole step
    step = next(t for t in eng.traces if t["kind"] == "spec")
    assert target_ms(step["timing_ms"]) == pytest.approx(step["timing_ms"]["verify_ms"] + step["timing_ms"]["logits_ms"])


def test_a_plain_step_splits_into_forward_logits_sampling_and_commit(pair):
    eng = run(pair, SpecConfig("vanilla"))
    plain = eng.profile.per_step()["off"]
    assert {"decode_ms", "logits_ms", "sample_ms", "commit_ms", "other_ms"} <= set(plain)
    assert plain["steps"] == eng.steps - 1  # every step but the prefill


def test_profiles_survive_json_and_add_up_across_engines(pair):
    eng = run(pair, SpecConfig.from_knobs("linear", num_steps=2))
    back = StepProfile.from_json(eng.profile.to_json())
    back.merge(eng.profile)
    one, two = eng.profile.per_step(), back.per_step()
    for setting in one:
        assert two[setting]["steps"] == 2 * one[setting]["steps"]
        assert two[setting]["step_ms"] == pytest.approx(one[setting]["step_ms"], abs=1e-2)  # the mean is kept
    records = [{"profile": eng.profile.to_json()}, {"profile": eng.profile.to_json()}, {"question_id": 3}]
    summed = metrics.step_profile(records)  # a record without phase times adds nothing
    assert summed.keys() == two.keys()
    for setting, row in summed.items():
        assert row == pytest.approx(two[setting], abs=0.01)  # the JSON keeps the sums to the µs


def _profile(step_ms: float, forward: float, steps: int, setting: str) -> dict:
    return {"prefill": {"steps": 1, "requests": 1, "prefill_ms": 40.0, "other_ms": 0.0, "step_ms": 40.0},
            setting: {"steps": steps, "requests": steps, "verify_ms": forward, "logits_ms": 1.0,
                      "draft_extend_ms": 2.0, "draft_tree_ms": 1.0, "other_ms": step_ms - forward - 4.0,
                      "step_ms": step_ms}}


def test_the_gap_splits_into_the_models_step_and_the_turns():
    result = {"summary": {
        "vanilla": {"step_profile": {"off": {"steps": 50, "requests": 50, "decode_ms": 9.0, "logits_ms": 1.0,
                                             "other_ms": 0.0, "step_ms": 10.0}}},
        "eagle2:4/3/2": {"step_profile": _profile(step_ms=16.0, forward=11.0, steps=30, setting="eagle2:4/3/2")}}}
    predicted = [{"method": "eagle2:4/3/2", "tau": 2.0, "predicted": 1.05, "step_predicted": 1.0, "measured": 1.1,
                  "verify_ms": 12.0, "draft_extend_ms": 3.0, "draft_levels_ms": 2.0, "overhead_ms": 3.0,
                  "step_ms": 20.0, "plain_step_ms": 10.0}]
    (row,) = step_report.gap_rows(result, predicted)
    assert row["from_steps"] == pytest.approx(2.0 * 10.0 / 16.0)  # τ × plain step / speculative step
    assert (row["target"], row["draft"], row["rest"]) == (12.0, 3.0, 1.0)
    # the model's own step speedup, not the whole turns' prediction of the row
    assert row["model_plain"] == pytest.approx(10.0) and row["predicted"] == 1.0
    table = step_report.gap_table(result, predicted)
    assert "+0.25" in table and "-0.15" in table  # model -> steps, then steps -> turns
    parts = step_report.decode_parts(result["summary"]["eagle2:4/3/2"]["step_profile"])
    assert parts["outside_target"] == pytest.approx(4.0 / 16.0) and parts["prefill"] == 40.0
    assert "| `eagle2:4/3/2` | 30 |" in step_report.profile_table(result)
    assert step_report.gap_rows({"summary": {"eagle2:4/3/2": {}}}, predicted) == []  # no vanilla: nothing to say


def test_the_runs_own_curve_says_which_verifies_it_holds():
    result = {"summary": {
        "vanilla": {"step_profile": {"off": {"steps": 50, "requests": 50, "decode_ms": 9.0, "logits_ms": 1.0,
                                             "other_ms": 0.0, "step_ms": 10.0}}},
        "eagle2:4/3/2": {"step_profile": _profile(step_ms=16.0, forward=11.0, steps=30, setting="eagle2:4/3/2")},
        "eagle2:8/5/4": {"step_profile": _profile(step_ms=22.0, forward=17.0, steps=20, setting="eagle2:8/5/4")}},
        "costs": {"prefix_len": 128, "verify": [{"tokens": 1, "ms": 10.0, "lo": 9.5, "hi": 10.5},
                                                 {"tokens": 4, "ms": 12.0, "lo": 11.0, "hi": 13.0},
                                                 {"tokens": 8, "ms": 14.0, "lo": 13.0, "hi": 15.0}]}}
    parts = dict(verify_ms=12.0, draft_extend_ms=3.0, draft_levels_ms=2.0, overhead_ms=3.0, step_ms=20.0)
    parts.update(step_predicted=1.0, plain_step_ms=10.0)
    predicted = [{"method": "eagle2:4/3/2", "tau": 2.0, "predicted": 1.0, "measured": 1.1, "nodes": 4, **parts},
                 {"method": "eagle2:8/5/4", "tau": 2.5, "predicted": 1.0, "measured": 1.1, "nodes": 8, **parts}]
    said = step_report.verify_bracket(result, step_report.gap_rows(result, predicted))
    # 4/3/2's target part, 11 + 1 = 12 ms, is inside 11-13 at 4 tokens; 8/5/4's 18 ms is above 13-15 at 8
    assert "in 1 of 2 speculative rows" in said and "plain decoding's (10.0 ms against 9.5–10.5 at one token) too" in said
    assert "`eagle2:8/5/4` 18.0 ms at 8 tokens (range 13.0–15.0)" in said
    assert "lies inside that range in 1 of 2" in said  # the model's 12 ms: inside at 4 tokens, below at 8
    # probes between the turns, where the run has them, stand for the curve: their median and extremes
    result["probes"] = [{"prompt_tokens": 20, "prefill_ms": 50.0, "verify": [[1, ms1], [4, ms4], [8, ms8]]}
                        for ms1, ms4, ms8 in ((9.0, 11.5, 17.0), (10.0, 12.5, 18.5), (11.0, 13.0, 19.0))]
    said = step_report.verify_bracket(result, step_report.gap_rows(result, predicted))
    assert said.startswith("The verify of the run's 3 probes") and "in 2 of 2 speculative rows" in said
    assert "(10.0 ms against 9.0–11.0 at one token) too" in said and "Above the range" not in said
    assert "the model's verify is the probes' median at one token and, at more, that plus the median of each " \
           "probe's own difference from its one-token forward" in said and "lies inside that range" not in said
    del result["costs"], result["probes"]
    assert step_report.verify_bracket(result, step_report.gap_rows(result, predicted)) is None
