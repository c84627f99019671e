"""tools/retau.py: stored benchmark reports recomputed to today's τ (tokens a verify step
emitted), from the output and walk lengths their records keep."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tools.retau import Retau, calibration_tau, emitted_lengths, main, rewrite_markdown, upgrade_record
from workbench.bench import report

BENCH = Path(__file__).resolve().parents[1] / "docs" / "bench"


def test_only_a_turns_last_step_loses_what_the_output_did_not_take():
    assert emitted_lengths(list(range(8)), [2, 3, 4]) == [2, 3, 2]  # 7 after the prefill: 2 + 3 + the 2 left
    assert emitted_lengths(list(range(10)), [2, 3, 4]) == [2, 3, 4]  # nothing cut
    assert emitted_lengths([5], []) == []  # the prefill's token alone: no verify step
    with pytest.raises(ValueError, match="would have emitted 0"):
        emitted_lengths(list(range(6)), [2, 3, 4])
    with pytest.raises(ValueError, match="would have emitted 5"):
        emitted_lengths(list(range(11)), [2, 3, 4])


def _record(qid: int, task: str, outputs: list[int], walks: list[list[int]]) -> dict:
    """An old-format record: walk lengths (n + 1) as accept_lengths, τ by that count."""
    steps = [a for w in walks for a in w]
    return {"question_id": qid, "task": task, "output_ids": [list(range(n)) for n in outputs], "accept_lengths": walks,
            "tau": round(sum(steps) / len(steps), 3)}


def _result() -> dict:
    """Three turns whose last steps the end of the output cut: walks 2 3 4 | 2 2 | 1 2 2 (18 / 8 by
    the old count) emitted 2 3 2 | 2 1 | 1 2 1, the 7 + 3 + 4 tokens after their prefills (14 / 8)."""
    recs = [_record(1, "mt_bench", [8, 4], [[2, 3, 4], [2, 2]]), _record(2, "qa", [5], [[1, 2, 2]])]
    summary = {"label": "eagle2", "tau": 2.25, "tau_mtbench_turn1": 3.0, "tokens_per_s": 1.0,
               "per_task": {"mt_bench": {"tau": 2.6}, "qa": {"tau": 1.667}},
               "per_depth": [0.875, 0.286, 0.5]}  # drafts 1 2 3 1 1 0 1 1: 7 of 8 at depth 1, 2 of 7, 1 of 2
    return {"summary": {"vanilla": {"label": "vanilla", "tokens_per_s": 1.0, "per_task": {}}, "eagle2:4/3/2": summary},
            "records": {"vanilla": [], "eagle2:4/3/2": recs}}


def test_a_report_is_recomputed_from_its_records():
    before = _result()
    after = copy.deepcopy(before)
    job = Retau(after)
    job.run()
    recs = after["records"]["eagle2:4/3/2"]
    assert recs[0]["accept_lengths"] == [[2, 3, 2], [2, 1]] and recs[0]["drafts_accepted"] == [[1, 2, 3], [1, 1]]
    assert recs[1]["accept_lengths"] == [[1, 2, 1]] and recs[1]["drafts_accepted"] == [[0, 1, 1]]
    assert (recs[0]["tau"], recs[1]["tau"]) == (2.0, 1.333)
    s = after["summary"]["eagle2:4/3/2"]
    assert (s["tau"], s["tau_mtbench_turn1"]) == (1.75, 2.333)
    assert (s["per_task"]["mt_bench"]["tau"], s["per_task"]["qa"]["tau"]) == (2.0, 1.333)
    assert s["per_depth"] == [0.875, 0.286, 0.5]  # the walk's, unchanged
    assert {c.where for c in job.changes} >= {"summary eagle2:4/3/2 tau", "records eagle2:4/3/2 q2"}
    again = copy.deepcopy(after)
    Retau(again).run()
    assert again == after  # a rewritten report stays as it is
    text = "# report\n\n" + report.headline_table(before) + "\n\n" + report.task_table(before) + "\n"
    assert rewrite_markdown(text, before, after) == \
        "# report\n\n" + report.headline_table(after) + "\n\n" + report.task_table(after) + "\n"
    with pytest.raises(ValueError, match="does not hold this rendering"):
        rewrite_markdown("# another report\n", before, after)


def test_a_report_whose_records_do_not_give_its_figures_is_refused():
    for key, value in (("tau", 1.75), ("per_depth", [0.875, 0.25, 0.5])):
        bad = _result()
        bad["summary"]["eagle2:4/3/2"][key] = value
        with pytest.raises(ValueError, match="by the old count" if key == "tau" else "from the records"):
            Retau(bad).run()
    rec = _record(3, "qa", [3], [[1, 1]])
    upgrade_record(rec)
    rec["accept_lengths"] = [[1, 2]]  # 3 tokens after a prefill that emitted 1 of 3
    with pytest.raises(ValueError, match="do not add up"):
        upgrade_record(rec)


def test_a_shorter_calibration_pass_is_the_first_steps_of_the_records():
    rec = {"output_ids": [list(range(8))], "drafts_accepted": [[1, 2, 3]]}
    # 5 new tokens: the prefill's, then walks of 2 (both emitted) and 3 (2 emitted); 3 drafts accepted
    summary = {"steps": 2, "accepted": 3}
    assert calibration_tau([rec], 5, 2.5, summary) == 2.0  # stored by the old count
    assert calibration_tau([rec], 5, 2.0, summary) == 2.0  # already rewritten
    assert calibration_tau([rec], 5, 2.4, summary) is None  # another pass
    assert calibration_tau([rec], 5, 2.5, {"steps": 3, "accepted": 3}) is None


def test_stored_reports_count_what_each_verify_step_emitted():
    asset = BENCH.parents[1] / "workbench" / "assets" / "eagle-smollm2-135m" / "calibration.json"
    reports = [str(p) for p in sorted(BENCH.rglob("*.json"))]  # the archive too
    assert main(["--check", *reports, "--calibration", str(asset)]) == 0, "run python -m tools.retau (its docstring)"
