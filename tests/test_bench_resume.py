"""The benchmark keeps each result as it finishes and resumes a stopped run: the journal's lines
(a torn last line dropped), a run interrupted midway and started again (only the missing results
run, the kept ones keep their timings, the report says so), and a start with other settings
refused in one line before the model loads (``--fresh`` starts over)."""

from __future__ import annotations

import json

import pytest

from workbench.measure import journal as jr
from workbench.bench import suite

METHODS = "vanilla,linear:3"
JOBS = 2 * 2 + 1  # 2 questions x 2 methods at T=0, then linear:3 on 1 question at T=1


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from workbench.testing.tiny import make_tiny_app_model

    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-resume"))


def bench(tiny_dir, out, *extra) -> int:
    from workbench.cli import main

    return main(["bench", "--target", str(tiny_dir), "--draft", "random", "--dtype", "fp32", "--limit", "2",
                 "--max-new-tokens", "4", "--methods", METHODS, "--tau-questions", "1", "--tau-max-new-tokens", "4",
                 "--calibration", "none", "--threads", "1", "--out", str(out), *extra])


@pytest.fixture
def questions_run(monkeypatch):
    """Counts ``Runner.question`` calls (one per result measured); ``stop_after`` = n raises
    KeyboardInterrupt at the (n+1)-th, as Ctrl-C would in the middle of the run. The step costs
    are made up (``helpers.MadeUpStepCosts``, the sources asked for in ``step_costs``)."""
    from helpers import MadeUpStepCosts

    made_up = MadeUpStepCosts()
    monkeypatch.setattr("workbench.measure.step_cost.step_cost_for", made_up)
    calls = {"n": 0, "stop_after": None, "step_costs": made_up.calls}
    question = suite.Runner.question

    def counted(self, *args, **kwargs):
        if calls["stop_after"] is not None and calls["n"] >= calls["stop_after"]:
            raise KeyboardInterrupt
        calls["n"] += 1
        return question(self, *args, **kwargs)

    monkeypatch.setattr(suite.Runner, "question", counted)
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)  # keep the tests' one thread
    return calls


def journal_lines(out) -> list[dict]:
    return [json.loads(line) for line in (out / jr.FILE).read_text().splitlines()]


def results_of(lines: list[dict]) -> list[dict]:
    return [ln["result"] for ln in lines if "result" in ln]


def test_each_result_is_kept_as_it_finishes_and_a_resume_runs_only_the_rest(tiny_dir, tmp_path, capsys,
                                                                              questions_run):
    out = tmp_path / "out"
    questions_run["stop_after"] = 2
    assert bench(tiny_dir, out) == 130
    err = capsys.readouterr().err
    assert "interrupted: 2 results are kept" in err and "[  1/5]" in err and "[  2/5]" in err
    assert not (out / "results.json").exists()
    before = results_of(journal_lines(out))
    assert [(r["phase"], r["method"]) for r in before] == [("t0", "vanilla"), ("t0", "linear:3")]  # interleaved

    assert [source.name for source in questions_run["step_costs"]] == ["head"]  # linear:3's, before any result
    questions_run.update(n=0, stop_after=None)
    assert bench(tiny_dir, out) == 0
    assert questions_run["n"] == JOBS - 2  # only the missing results ran
    assert len(questions_run["step_costs"]) == 1  # the step costs kept from the first start, not measured again
    err = capsys.readouterr().err
    assert "2 results kept from 1 earlier start(s)" in err and "2 of 5 results reused" in err
    assert "[  3/5]" in err and "[  1/5]" not in err
    res = json.loads((out / "results.json").read_text())
    kept = {(r["method"], r["question_id"]): r["record"] for r in before}
    for (method, qid), record in kept.items():  # reused as measured, timings included
        assert next(r for r in res["records"][method] if r["question_id"] == qid) == record
    assert [len(res["records"][m]) for m in ("vanilla", "linear:3")] == [2, 2]
    assert len(res["records_t1"]["linear:3"]) == 1
    resumed = res["meta"]["resumed"]
    assert resumed["reused"] == 2 and resumed["results"] == JOBS
    assert [s["measured"] for s in resumed["sessions"]] == [2, JOBS - 2]
    assert "**Resumed run**: 2 of 5 results" in (out / "report.md").read_text()
    assert list(res["step_costs"]["methods"]) == ["linear:3"] and \
        "`head`: the run's own forwards (2 probes between its timed runs), the overhead of made up for head" in \
        (out / "report.md").read_text()
    lines = journal_lines(out)
    probes = [ln["probe"] for ln in lines if "probe" in ln]  # the first question's kept from the first start
    assert [(p["session"], p["question_id"]) for p in probes] == [(0, before[0]["question_id"]),
                                                                  (1, res["records"]["vanilla"][1]["question_id"])]
    assert [p["record"] for p in probes] == res["probes"]
    assert "complete" in lines[-1] and len(results_of(lines)) == JOBS

    questions_run["n"] = 0  # a finished run started again measures again
    assert bench(tiny_dir, out) == 0
    assert questions_run["n"] == JOBS
    assert json.loads((out / "results.json").read_text())["meta"]["resumed"] is None


def test_a_resume_with_other_settings_is_refused_before_the_model_loads(tiny_dir, tmp_path, capsys,
                                                                         questions_run, monkeypatch):
    out = tmp_path / "out"
    questions_run["stop_after"] = 1
    assert bench(tiny_dir, out) == 130
    capsys.readouterr()
    loaded = []
    with monkeypatch.context() as m:
        m.setattr("workbench.pipeline.load_target", lambda *a, **k: loaded.append(1))
        assert bench(tiny_dir, out, "--max-new-tokens", "6") == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and "--max-new-tokens: 4 there, 6 here" in err[0]
    assert "--fresh" in err[0] and not loaded
    assert len(results_of(journal_lines(out))) == 1  # the journal is left as it was

    questions_run.update(n=0, stop_after=None)  # --fresh discards the old results and runs them all
    assert bench(tiny_dir, out, "--max-new-tokens", "6", "--fresh") == 0
    assert questions_run["n"] == JOBS
    assert json.loads((out / "results.json").read_text())["meta"]["max_new_tokens"] == 6


def test_a_torn_last_line_is_dropped_and_the_next_line_starts_whole(tmp_path):
    settings = {"methods": "vanilla", "question_ids": [1, 2]}

    def start(load: float, log=lambda m: None) -> jr.Journal:
        journal = jr.open_journal(tmp_path, settings, fresh=False, log=log)
        journal.start([load])
        return journal

    start(0.5).add_result("t0", "vanilla", {"question_id": 1, "seconds": 1.5})
    with open(tmp_path / jr.FILE, "a") as f:
        f.write('{"result": {"phase": "t0", "method": "vanil')  # killed in the middle of a write
    logged = []
    again = start(0.7, logged.append)
    assert again.get("t0", "vanilla", 1) == {"question_id": 1, "seconds": 1.5}
    assert again.get("t0", "vanilla", 2) is None and again.dropped == 1 and "1 torn line(s) dropped" in logged[0]
    again.add_result("t0", "vanilla", {"question_id": 2, "seconds": 2.5})
    third = start(0.9)
    assert third.dropped == 0 and third.get("t0", "vanilla", 2) == {"question_id": 2, "seconds": 2.5}
    assert third.session == 2 and [s["load_average_start"] for s in third.sessions] == [[0.5], [0.7], [0.9]]


def test_nothing_is_written_before_the_start_and_a_journal_without_results_is_begun_anew(tmp_path):
    settings = {"methods": "vanilla", "question_ids": [1]}
    journal = jr.open_journal(tmp_path, settings, fresh=False, log=lambda m: None)
    assert not (tmp_path / jr.FILE).exists()  # a model that fails to load leaves no journal behind
    journal.start([0.5])  # started, then stopped before its first result
    logged = []
    other = jr.open_journal(tmp_path, {**settings, "methods": "linear:3"}, fresh=False, log=logged.append)
    assert other.sessions == [] and "holds no result" in logged[0]  # nothing to lose: not refused


def test_settings_differences_name_the_flags():
    there = {"format": 1, "dtype": "fp32", "max_new_tokens": 128, "question_ids": [1, 2]}
    here = {"format": 1, "dtype": "bf16", "max_new_tokens": 128, "question_ids": [1]}
    assert jr.differences(there, here) == "--dtype: fp32 there, bf16 here; questions: [1, 2] there, [1] here"


def test_sigterm_stops_a_run_as_ctrl_c_does_and_the_handler_is_put_back():
    import os
    import signal
    import time

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with suite.stop_on_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises as soon as the signal is taken, well before this ends
    assert signal.getsignal(signal.SIGTERM) == before
