"""The notebooks' measuring helpers on plain numbers: intervals over prompts, TPOT against
end-to-end latency, walk length over position, measured cost curves and the sentences read off
them."""

import pytest

from workbench.lessons.cost_curve import ticks_125
from workbench.lessons.intervals import bootstrap, paired
from workbench.lessons.latency import e2e_speedup, length_for, tpot_speedup
from workbench.lessons.position import by_bin, steps_by_position, trend
from workbench.lessons.takeaways import best_sentence
from workbench.metrics import Latency, tpot_ms
from workbench.timing import spread, verdict


def test_a_bootstrap_interval_is_seeded_and_holds_its_estimate():
    values = [0.1, 0.3, -0.2, 0.5, 0.2, 0.4]
    a = bootstrap(values, lambda v: sum(v) / len(v))
    assert a == bootstrap(values, lambda v: sum(v) / len(v))  # the same seed, the same interval
    assert a.low <= a.estimate <= a.high and a.n == 6
    with pytest.raises(ValueError, match="at least 2"):
        bootstrap([1.0], sum)


def test_a_paired_difference_that_never_changes_sign_is_above_zero():
    clear = paired([2.0, 2.5, 3.0, 2.2], [1.0, 1.1, 1.2, 1.0])
    assert clear.side() == "above"
    mixed = paired([1.0, 2.0, 1.0, 2.0], [2.0, 1.0, 2.0, 1.0])
    assert mixed.side() == "level within noise"
    with pytest.raises(ValueError, match="one value of each side"):
        paired([1.0], [1.0, 2.0])


def test_the_end_to_end_speedup_climbs_to_the_tpot_speedup():
    plain, spec = Latency(ttft_ms=100.0, tpot_ms=50.0), Latency(ttft_ms=100.0, tpot_ms=25.0)
    assert e2e_speedup(plain, spec, 1) == 1.0  # one token: the prefill alone, the same for both
    assert e2e_speedup(plain, spec, 10) < e2e_speedup(plain, spec, 100) < tpot_speedup(plain, spec) == 2.0
    n = length_for(plain, spec, 0.9)
    assert e2e_speedup(plain, spec, n) >= 1.8 > e2e_speedup(plain, spec, n - 1)


def test_a_measured_answers_tpot_is_what_its_latency_spreads_over_the_later_tokens():
    """One formula both ways (``workbench.metrics``): TPOT from a measured TTFT and e2e, and e2e
    back from TTFT and TPOT; a one-token answer has no TPOT."""
    tpot = tpot_ms(ttft_ms=100.0, e2e_ms=1000.0, tokens=19)
    assert tpot == pytest.approx(50.0) and Latency(ttft_ms=100.0, tpot_ms=tpot).e2e_ms(19) == pytest.approx(1000.0)
    assert tpot_ms(ttft_ms=100.0, e2e_ms=100.0, tokens=1) is None


def test_steps_are_placed_where_they_start_and_empty_bins_are_skipped():
    steps = steps_by_position([3, 1, 4], [2, 0, 3])
    assert steps == [(1, 3), (4, 1), (5, 4)]
    per_prompt = {"a": [(1, 3), (40, 2)], "b": [(2, 2), (45, 1)]}
    rows = by_bin(per_prompt, 16)
    assert [r["from"] for r in rows] == [0, 32]  # nothing started in 16..31
    assert rows[0]["mean walk"] == 2.5 and rows[0]["prompts"] == 2
    assert trend(per_prompt).slope.estimate < 0


def test_a_decaying_walk_gives_a_negative_slope_with_an_interval_below_zero():
    per_prompt = {p: [(x, 4 if x < 50 else 2) for x in range(1, 100, 5)] for p in "abcd"}
    assert trend(per_prompt).slope.side() == "below"


def test_a_best_is_named_only_when_its_range_is_clear():
    clear = verdict({"a": spread([2.0, 2.1]), "b": spread([1.0, 1.1])})
    assert best_sentence(clear, "chain") == "the best chain is a: its range is clear of every other's"
    close = verdict({"a": spread([2.0, 2.4]), "b": spread([1.9, 2.1])})
    assert "no single best chain is named" in best_sentence(close, "chain")


def test_log_ticks_are_round_and_cover_the_range():
    assert ticks_125(45, 900) == [20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
    with pytest.raises(ValueError):
        ticks_125(0, 1)


def test_hindsight_replays_the_big_trees_own_walk_and_its_smaller_trees_never_keep_more():
    import tempfile

    from workbench.engine.config import SpecConfig
    from workbench.engine.engine import Engine
    from workbench.engine.sampling import SamplingParams
    from workbench.lessons.hindsight import gains, shape_tau
    from workbench.models.draft import random_head
    from workbench.models.loading import load_target
    from workbench.testing.tiny import make_tiny_checkpoint

    target = load_target(make_tiny_checkpoint(tempfile.mkdtemp(), vocab_size=8, seed=0))
    head = random_head(target, seed=1, std=0.1)
    spec = SpecConfig("eagle2", num_steps=3, topk=3, num_draft_tokens=10)
    traces = []
    eng = Engine(target, head, spec, sampling=SamplingParams(), trace=True)
    eng.add_requests([[3, 5, 1, 6]], 24)
    while not eng.done:
        traces += eng.step()
    steps = [t for t in traces if t["kind"] == "spec"]
    assert steps
    for t in steps:
        assert shape_tau(t, spec.num_draft_tokens, spec.num_steps) == len(t["accept"]["path"])  # drafts + bonus
        small = shape_tau(t, 4, 2)
        assert small is None or 1 <= small <= shape_tau(t, spec.num_draft_tokens, spec.num_steps)
    got = gains({"p": traces}, (4, 2), (6, 2), (4, 3))
    assert got["p"]["steps"] + got["p"]["unknown"] == len(steps)


def test_the_smoke_size_shrinks_what_the_lessons_are_asked_for_and_only_then(monkeypatch):
    from workbench.lessons import smoke

    monkeypatch.delenv(smoke.ENV, raising=False)
    assert (smoke.samples(4000), smoke.context(4096), smoke.new_tokens(96)) == (4000, 4096, 96)
    monkeypatch.setenv(smoke.ENV, "1")
    assert (smoke.samples(4000), smoke.context(4096), smoke.new_tokens(96)) == (smoke.SAMPLES, smoke.CONTEXT,
                                                                               smoke.NEW_TOKENS)
    assert (smoke.samples(100), smoke.context(128)) == (100, 128)  # what is already small stays as asked
