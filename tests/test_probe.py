"""The run's own forwards (``measure/probe.py``): what one probe times on a tiny model, the step
cost they price (medians in place of the cached curves, the overhead kept), and the bench report's
whole-turn prediction read from them, checked by hand."""

from __future__ import annotations

import pytest

from workbench.bench import report
from workbench.cost_model import Overhead, StepCost
from workbench.measure.probe import (ProbePlan, batch_paces, label, prefill_joined, probe, probed, probed_curve, summary,
                                     verify_sizes)


def test_a_probe_times_the_sizes_a_run_verifies():
    assert verify_sizes([2, 4, 4, 6, 8]) == (1, 2, 4, 6, 8)
    assert verify_sizes([1.39, 3]) == (1, 2, 3)  # a fractional verify (the n-gram's) rounded up
    assert verify_sizes([]) == (1,)


@pytest.fixture(scope="module")
def tiny_wb(tmp_path_factory):
    from helpers import tiny_app_workbench

    return tiny_app_workbench(tmp_path_factory.mktemp("probe"))


def test_one_probe_on_a_tiny_model(tiny_wb):
    prompt = [5, 6, 7, 8, 9, 10, 11]
    got = probe(tiny_wb, prompt, (1, 2, 4), rows=(1, 2), head=True)
    assert got["prompt_tokens"] == 7 and got["prefill_ms"] > 0 and got["catch_up_ms"] > 0
    assert [n for n, _ in got["verify"]] == [1, 2, 4] and all(ms > 0 for _, ms in got["verify"])
    assert [n for n, _ in got["draft"]] == [1, 2] and all(ms > 0 for _, ms in got["draft"])
    plain = probe(tiny_wb, prompt, (1,))
    assert set(plain) == {"prompt_tokens", "prefill_ms", "verify"}  # no head: no draft timed
    with pytest.raises(ValueError, match="needs a prompt"):
        probe(tiny_wb, [], (1,))
    with pytest.raises(ValueError, match="sizes >= 1"):
        probe(tiny_wb, prompt, (0, 2))


def test_a_probe_at_a_batch_times_the_batchs_own_forwards_after_the_runs_prompts(tiny_wb):
    from workbench.measure.methods import parse_methods

    specs = [m.spec for m in parse_methods("vanilla,linear:1,eagle2:4/3/2", None)]
    plan = ProbePlan.of(specs, tiny_wb, batch=3)
    assert plan.batch == 3 and plan.per_request == (1, 2, 4)  # a decode step and each setting's verify
    assert ProbePlan.of(specs, tiny_wb).per_request == ()  # one request: its verify curve is the batch's
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12], [13, 14]]
    got = plan.take(tiny_wb, prompts[0], prompts)
    assert got["batch"]["requests"] == 3 and got["batch"]["context"] == pytest.approx(10 / 3)
    assert [n for n, _ in got["batch"]["forward"]] == [1, 2, 4] and all(ms > 0 for _, ms in got["batch"]["forward"])
    assert "batch" not in plan.take(tiny_wb, prompts[0])  # no prompts for it: none timed
    prefill = got["batch"]["prefill"]  # each prompt in a step of its own, then all three in one
    assert len(prefill["alone"]) == 3 and all(ms > 0 for ms in prefill["alone"]) and prefill["together"] > 0
    found = summary([got, got])
    assert found["batch"]["requests"] == 3 and [n for n, _ in found["batch"]["forward"]] == [1, 2, 4]
    assert found["batch"]["prefill_joined"] == prefill_joined([got])


def test_a_probes_sizes_take_turns_and_each_keeps_its_median(tiny_wb, monkeypatch):
    """The verify sizes are timed in ``REPEATS`` rounds, the first size rotating, so that the
    forward right after the prefill is not always the smallest verify's; each size keeps the
    median of its rounds."""
    from workbench.measure import probe as probe_module

    order, times = [], iter([5.0, 9.0, 7.0, 1.0, 3.0, 2.0])  # in the order the forwards run

    def timed(pool, n, forward):
        order.append(n)
        return next(times)

    monkeypatch.setattr(probe_module, "_chain_ms", timed)
    monkeypatch.setattr(probe_module, "REPEATS", 3)
    got = probe(tiny_wb, [5, 6, 7], (1, 2))
    assert order == [1, 2, 2, 1, 1, 2]  # rounds: 1 first, then 2 first, then 1 first
    assert got["verify"] == [[1, 3.0], [2, 7.0]]  # 1: the median of 5, 1, 3; 2: of 9, 7, 2


def test_prompts_sharing_a_prefill_step_save_its_fixed_part_once_each():
    """``prefill_joined``: the prompts' prefills alone less theirs in one step, over the prompts
    beyond the first, the median over probes; none where no probe timed a batch's prefill."""
    from dataclasses import replace

    batched = [{**p, "batch": {"requests": 3, "context": 10.0, "forward": [[1, 60.0]],
                               "prefill": {"alone": [30.0, 40.0, 50.0], "together": together}}}
               for p, together in zip(PROBES, (100.0, 90.0, 80.0))]
    assert prefill_joined(batched) == pytest.approx(15.0)  # (120 - 90) / 2, the middle of 10, 15, 20
    assert prefill_joined(PROBES) is None
    assert probed(COST, batched, head=False).prefill_joined == pytest.approx(15.0)
    assert probed(replace(COST, prefill_joined=4.0), PROBES, head=False).prefill_joined == 4.0  # none timed: kept
    assert StepCost.from_dict(probed(COST, batched, head=False).as_dict()).prefill_joined == pytest.approx(15.0)


def test_the_batched_forwards_pace_is_their_time_over_the_curves_word():
    """A probe's batched forward against what the probed curve and the context term say of the
    same forward (every request's context priced by the context term), a factor per count of new
    tokens a request; it scales a step of more than one request, 1 at one, linear between the
    counts timed and flat past them; the pooled factor (``batched``) is their median; probes that
    timed no batch leave the step cost's own."""
    from dataclasses import replace

    cost = replace(COST, kv=((1, 0.01),), prefix=4.0)
    probes = [{**p, "batch": {"requests": 4, "context": 10.0, "forward": [[1, 60.0], [4, 80.0]]}} for p in PROBES]
    got = probed(cost, probes, head=False)
    alone = replace(got, batched=(), batched_tokens=())
    bare = [alone.verify_ms(4 * n) + 0.01 * 4 * 10.0 - 0.01 * got.verify_prefix for n in (1, 4)]
    f1, f4 = 60.0 / bare[0], 80.0 / bare[1]
    assert got.batched == ((4, pytest.approx((f1 + f4) / 2, rel=1e-3)),)  # the median of two
    assert got.batched_tokens == ((4, 1, pytest.approx(f1, rel=1e-3)), (4, 4, pytest.approx(f4, rel=1e-3)))
    f1, f4 = got.batched_tokens[0][2], got.batched_tokens[1][2]
    assert f1 != pytest.approx(f4)  # the counts' paces differ: one factor would misprice one of them
    assert got.batch_pace(1) == got.batch_pace(1, 4) == 1.0
    assert got.batch_pace(4) == f1 and got.batch_pace(4, 4) == f4 and got.batch_pace(16, 8) == f4
    assert got.batch_pace(4, 2) == pytest.approx(f1 + (f4 - f1) / 3)  # between the counts timed
    assert got.batch_pace(2.5) == pytest.approx(1 + (f1 - 1) / 2)  # between one request and the batch timed
    assert got.forward_ms(4, 2, 30.0) == pytest.approx(alone.forward_ms(4, 2, 30.0) * got.batch_pace(4, 2))
    mixed = got.forward_ms(4, 2.5, 30.0, mix={1.0: 0.5, 4.0: 0.5})  # half the requests one token, half four
    assert mixed == pytest.approx(alone.forward_ms(4, 2.5, 30.0) * (f1 + f4) / 2)
    assert got.plain_ms(4) == pytest.approx(alone.verify_ms(4) * f1 + got.overhead.ms(False, 4))
    assert got.plain_ms(1) == alone.plain_ms(1)  # one request: the curves' own
    back = StepCost.from_dict(got.as_dict())
    assert back.batched == got.batched and back.batched_tokens == got.batched_tokens
    assert batch_paces(cost, PROBES) == () and probed(cost, PROBES, head=False).batch_pace(8) == 1.0  # none timed
    measured = replace(cost, batched=((8, 1.3),), batched_tokens=((8, 1, 1.2), (8, 2, 1.4)))  # its own steps' pace
    assert probed(measured, PROBES, head=False).batched_tokens == ((8, 1, 1.2), (8, 2, 1.4))
    assert probed(measured, probes, head=False).batched_tokens == got.batched_tokens  # the run's, where its probes timed one
    with pytest.raises(ValueError, match="requests >= 2"):
        StepCost(verify=((1, 1.0),), batched_tokens=((1, 1, 1.2),))


def test_a_batched_probe_lays_each_request_out_as_the_engine_does_and_its_counts_take_turns(tiny_wb, monkeypatch):
    """Each request's new tokens take the slots right after its prompt's (one run of slots, read
    as a view, as the engine keeps a request's cache); each count of new tokens is timed
    ``REPEATS`` times, the first rotating after one untimed round, and keeps its median."""
    from workbench.measure import cost as cost_module
    from workbench.measure import probe as probe_module

    seen, real = [], cost_module.requests_batch

    def recording(n, prefixes, new_slots, device):
        seen.append(n)
        for prefix, new in zip(prefixes, new_slots):
            run = list(prefix) + list(new)
            assert run == list(range(run[0], run[0] + len(run)))  # one ascending run
        return real(n, prefixes, new_slots, device)

    monkeypatch.setattr(cost_module, "requests_batch", recording)
    monkeypatch.setattr(probe_module, "REPEATS", 3)
    got = probe_module.batched_forwards(tiny_wb.target, [[5, 6, 7], [8, 9, 10, 11, 12], [13, 14]], (1, 2, 4))
    assert seen == [1, 2, 4] + [1, 2, 4, 2, 4, 1, 4, 1, 2]  # the untimed round, then three, the first rotating
    assert [n for n, _ in got["forward"]] == [1, 2, 4] and all(ms > 0 for _, ms in got["forward"])


PROBES = [{"prompt_tokens": 10, "prefill_ms": 30.0, "verify": [[1, 9.0], [4, 11.0]], "catch_up_ms": 2.0,
           "draft": [[1, 1.0], [2, 1.5]]},
          {"prompt_tokens": 10, "prefill_ms": 34.0, "verify": [[1, 10.0], [4, 12.0]], "catch_up_ms": 3.0,
           "draft": [[1, 1.2], [2, 1.7]]},
          {"prompt_tokens": 20, "prefill_ms": 50.0, "verify": [[1, 12.0], [4, 16.0]], "catch_up_ms": 4.0,
           "draft": [[1, 1.4], [2, 1.9]]}]
COST = StepCost(((1, 20.0), (4, 30.0)), ((1, 5.0), (2, 6.0)), overhead=Overhead(plain_per_step=1.0, spec_per_step=2.0),
                measured="the cached one", prefill=((10, 99.0),), catch_up=((10, 9.0),))


def test_a_probed_curves_shape_is_the_probes_own_differences():
    """The smallest size at the probes' median; each other size that plus the median of each
    probe's own difference from the smallest (a probe's sizes share its prompt and the machine's
    pace), not the median of the size's own figures, which another probe may hold."""
    probes = [{"verify": [[1, 30.0], [4, 33.0]]}, {"verify": [[1, 34.0], [4, 37.0]]},
              {"verify": [[1, 40.0], [4, 44.0]]}, {"verify": [[1, 31.0], [4, 45.0]]}, {"verify": [[4, 50.0]]}]
    curve = probed_curve(probes)
    # 1: the median of 30, 34, 40, 31; 4: that + the median of 3, 3, 4, 14 (the sizes' own median: 44)
    assert curve.points == ((1, 32.5), (4, 36.0)) and curve.range_at(4) == (33.0, 50.0)
    assert probed_curve([{"verify": [[2, 5.0]]}, {"verify": [[4, 7.0]]}]).points == ((2, 5.0), (4, 7.0))  # unpaired


def test_the_probed_step_cost_takes_the_probes_medians_and_keeps_the_overhead():
    got = probed(COST, PROBES, head=True)
    assert got.verify == ((1, 10.0), (4, 12.0)) and got.verify_range == ((9.0, 12.0), (11.0, 16.0))
    assert got.draft == ((1, 1.2), (2, 1.7)) and got.draft_range == ((1.0, 1.4), (1.5, 1.9))
    assert got.prefill == ((10, 32.0), (20, 50.0)) and got.catch_up == ((10, 2.5), (20, 4.0))  # per prompt length
    assert got.overhead == COST.overhead
    assert got.verify_prefix == 10  # the probes' median prompt: the context their verify read
    assert got.measured == label("the cached one", 3) == \
        "the run's own forwards (3 probes between its timed runs), the overhead of the cached one"
    other = probed(COST, PROBES, head=False)  # another source's draft: its own curve and catch-up kept
    assert other.draft == COST.draft and other.catch_up == COST.catch_up and other.verify == got.verify
    curve = probed_curve(PROBES)
    assert curve.points == ((1, 10.0), (4, 12.0)) and curve.range_at(4) == (11.0, 16.0)
    with pytest.raises(ValueError, match="no probe"):
        probed(COST, [], head=True)


def test_the_report_predicts_whole_turns_from_the_probes():
    """linear:1 over two one-turn questions, each at its own τ (2 and 1.5): each turn's prefill and
    catch-up from the probes, then (n - 1) / τ steps; tokens/s the mean over questions, as the
    benchmark's speed is; plain decoding the same way; computed here by hand."""
    rounds = lambda *v: {"runs": 3, "tokens_per_s": list(v)}  # noqa: E731
    plain_recs = [{"question_id": 1, "prompt_tokens": [10], "output_ids": [list(range(9))]},
                  {"question_id": 2, "prompt_tokens": [20], "output_ids": [list(range(4))]}]
    spec_recs = [{**plain_recs[0], "accept_lengths": [[2, 2, 2, 2]]}, {**plain_recs[1], "accept_lengths": [[2, 1]]}]
    result = {"summary": {"vanilla": {"tokens_per_s": 80.0, "speedup_vs_vanilla": 1.0, "rounds": rounds(70.0, 80.0, 90.0)},
                          "linear:1": {"tau": 1.83, "tokens_per_s": 100.0, "speedup_vs_vanilla": 1.2,
                                       "rounds": {**rounds(95.0, 100.0, 105.0), "speedup_vs_vanilla": [1.1, 1.2, 1.3]}}},
              "records": {"vanilla": plain_recs, "linear:1": spec_recs}, "probes": PROBES,
              "step_costs": {"methods": {"linear:1": COST.as_dict()}, "priced_by": {"head": "the cached one"}}}
    (row,) = report.predicted_rows(result)
    # probed: verify(1) 10, verify(2) 10 + (12 - 10) / 3, the extend at τ rows (draft 1.2 + 0.5 a row), no levels
    verify2, overhead = 10.0 + 2.0 / 3, 2.0
    step = lambda tau: verify2 + 1.2 + 0.5 * (tau - 1) + overhead  # noqa: E731
    assert row["step_ms"] == pytest.approx(step(1.83), abs=0.01)  # the step columns: at the method's τ
    catch_up = lambda n, tau: max(0.0, (2.5 if n == 10 else 4.0) - (1.2 + 0.5 * (tau - 1)))  # noqa: E731
    q1 = 9 / (32.0 + catch_up(10, 2.0) + 8 / 2.0 * step(2.0)) * 1e3
    q2 = 4 / (50.0 + catch_up(20, 1.5) + 3 / 1.5 * step(1.5)) * 1e3
    p1, p2 = 9 / (32.0 + 8 * 11.0) * 1e3, 4 / (50.0 + 3 * 11.0) * 1e3
    assert row["predicted_tok_s"] == pytest.approx((q1 + q2) / 2, abs=0.01)
    assert row["predicted"] == pytest.approx((q1 + q2) / (p1 + p2), abs=1e-3)
    assert row["measured_range_tok_s"] == [95.0, 105.0] and row["inside_tok_s"] == (95.0 <= row["predicted_tok_s"] <= 105.0)
    assert row["measured_range"] == [1.1, 1.3] and row["inside"] == (1.1 <= row["predicted"] <= 1.3)
    assert row["step_predicted"] == pytest.approx(1.83 * 11.0 / step(1.83), abs=1e-3)  # the decode step's alone
    plain = report.plain_row(result, [row])
    assert plain["predicted_tok_s"] == pytest.approx((p1 + p2) / 2, abs=0.01)
    assert plain["inside_tok_s"] == (70.0 <= plain["predicted_tok_s"] <= 90.0)
    table = report._predicted_table(result)
    assert table.splitlines()[2].startswith("| `vanilla` | 1 | 11.0 |") and "3 probes, one after each" in table
    inside = sum((row["inside_tok_s"], plain["inside_tok_s"]))
    assert f"for {inside} of 2 settings (plain decoding included)" in table
    for rec in plain_recs + spec_recs:  # records kept before prompt lengths were: the decode step's speedup alone
        del rec["prompt_tokens"]
    (row,) = report.predicted_rows(result)
    assert row["predicted"] == row["step_predicted"] and "predicted_tok_s" not in row


def test_the_lessons_settings_take_a_probe_each_round(tiny_wb):
    """``measure_settings(..., probes=[])``: a probe of each prompt a round, at the settings' verify
    sizes and the sizes asked for, the head's forwards too; the settings' figures as without it."""
    from workbench.engine.config import SpecConfig
    from workbench.lessons.settings import measure_settings

    probes = []
    got = measure_settings(tiny_wb, [SpecConfig("vanilla"), SpecConfig.linear(3)], {"a": [5, 6, 7], "b": [8, 9]},
                           rounds=2, max_new_tokens=6, probes=probes, probe_sizes=(6,))
    assert list(got) == ["vanilla", "linear:3"] and got["linear:3"].speedup.runs == 2
    assert [p["prompt_tokens"] for p in probes] == [3, 2, 3, 2]  # each prompt's prefill, in each round
    assert [n for n, _ in probes[0]["verify"]] == [1, 2, 4, 6] and [n for n, _ in probes[0]["draft"]] == [1, 2, 4]
    assert probed(COST, probes, head=True).verify[-1][0] == 6
