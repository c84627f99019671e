"""The timing harness: interleaved rounds, spreads, verdicts that name a winner only when the
ranges separate, and the monotone fit of a cost curve."""

import random

import pytest

from workbench import timing
from workbench.timing import NOISE, Spread, interleaved, monotone, spread, verdict


def test_interleaved_rotates_the_first_setting_and_keeps_one_value_per_round():
    order = []
    settings = {name: (lambda name=name: order.append(name) or len(order)) for name in "abc"}
    values = interleaved(settings, rounds=3, warmup=1)
    assert order == list("abc") + list("abc") + list("bca") + list("cab")
    assert values == {"a": [4, 9, 11], "b": [5, 7, 12], "c": [6, 8, 10]}


def test_interleaved_times_a_setting_that_returns_nothing():
    values = interleaved({"x": lambda: None}, rounds=2)
    assert len(values["x"]) == 2 and all(0 <= v < 1 for v in values["x"])


def test_interleaved_refuses_no_rounds_and_no_settings():
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        interleaved({"x": lambda: 1.0}, rounds=0)
    with pytest.raises(ValueError, match="at least one setting"):
        interleaved({}, rounds=1)


def test_verdict_names_a_winner_only_when_its_range_is_clear():
    clear = verdict({"fast": spread([10, 11, 12]), "slow": spread([7, 8, 9])})
    assert clear.winner == "fast" and clear.level == ("fast",) and "wins" in clear.text
    tied = verdict({"fast": spread([10, 11, 12]), "slow": spread([8, 9, 10.5])})
    assert tied.winner is None and set(tied.level) == {"fast", "slow"} and NOISE in tied.text
    lower = verdict({"a": spread([5, 6]), "b": spread([7, 8])}, higher_is_better=False)
    assert lower.winner == "a"


def test_verdict_leaves_out_a_setting_clear_below_the_best():
    v = verdict({"a": spread([10, 12]), "b": spread([9, 11]), "c": spread([1, 2])})
    assert v.winner is None and v.level == ("a", "b")


def test_spread_ratio_is_conservative_and_overlap_is_symmetric():
    a, b = Spread(2.0, 1.5, 2.5, 3), Spread(1.0, 0.9, 1.1, 4)
    r = a.ratio(b)
    assert (r.median, r.low, r.high, r.runs) == (2.0, 1.5 / 1.1, 2.5 / 0.9, 3)
    assert a.overlaps(Spread(2.4, 2.4, 3, 1)) and Spread(2.4, 2.4, 3, 1).overlaps(a)
    assert not a.overlaps(b) and not b.overlaps(a)


def test_monotone_pools_a_dip_and_keeps_a_rising_curve():
    assert monotone([1, 2, 4, 8, 16], [39, 42, 54, 77, 75]) == [39, 42, 54, 76, 76]
    assert monotone([1, 2, 3], [1, 2, 3]) == [1, 2, 3]
    assert monotone([1, 2, 3, 4], [5, 1, 1, 1]) == [2, 2, 2, 2]
    fit = monotone(range(6), [3, 1, 4, 1, 5, 9])
    assert all(b >= a for a, b in zip(fit, fit[1:]))
    with pytest.raises(ValueError, match="sizes must increase"):
        monotone([1, 1], [1, 2])


def test_a_range_of_few_rounds_misses_a_perfect_prediction_at_the_rate_chance_gives():
    # every repeat on one side of the median is 2 of the 2**n orderings of sides
    assert timing.range_holds_median(3) == 0.75 and timing.range_holds_median(5) == pytest.approx(0.9375)
    rng = random.Random(7)  # the closed form against a simulation of a symmetric spread
    trials = 20000
    held = sum(min(xs) <= 0 <= max(xs) for xs in ([rng.gauss(0, 1) for _ in range(3)] for _ in range(trials)))
    assert abs(held / trials - 0.75) < 0.02
    with pytest.raises(ValueError, match="at least two runs"):
        timing.range_holds_median(1)


def test_prediction_check_counts_the_sides_and_what_chance_expects():
    said = timing.prediction_check([10.0, 12.0, 9.0, 11.0], [10.5, 11.0, 9.5, 11.0], [True, False, True, True], 3)
    assert said.startswith("1 above the measured median and 2 below")  # 11.0 on its median counts neither way
    assert "1 − 2·0.5^3 = 75%" in said and "about 3.0 of 4 times (here: 3)" in said
    with pytest.raises(ValueError, match="one median and one inside flag"):
        timing.prediction_check([1.0], [1.0, 2.0], [True], 3)


def test_paired_points_take_the_pace_out_of_a_curve_timed_in_rounds():
    # three rounds at three paces: 1 token at 40, 50, 42 ms and 4 tokens 5 ms over it in each
    rounds = [{1: 40.0, 4: 45.0}, {1: 50.0, 4: 55.0}, {1: 42.0, 4: 47.0, 8: 60.0}]
    assert timing.paired_points(rounds) == [(1, 42.0), (4, 47.0), (8, 60.0)]  # 8: one pair, 18 over its 42
    # a round slow for 4 tokens alone: each size's own median says 47, the paired one 40 + 5
    skewed = [{1: 40.0, 4: 45.0}, {1: 40.0, 4: 70.0}, {1: 42.0, 4: 47.0}]
    assert dict(timing.paired_points(skewed))[4] == 45.0  # 40 + the median of 5, 30 and 5
    assert timing.paired_points([{}, {}]) == []
    assert timing.paired_points([{4: 9.0}, {4: 11.0}]) == [(4, 10.0)]  # nothing to pair with: its own median
