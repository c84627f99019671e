"""The load benchmark (``measure/load_spec.py``, ``load.py``, ``load_run.py``, ``load_report.py``) on a tiny random
model: closed and open loops keep their promises (requests in flight, arrivals, times in order,
outputs equal to plain decoding under every policy), a refused or queued request loses nothing
of the others, a time limit keeps what finished; bad input is one line, exit 2, before the model
loads; ``--quick`` writes load.json and load.md in their layout and a stopped run resumes; what
a policy settled on per batch size becomes a schedule and vLLM's / SGLang's flags."""

from __future__ import annotations

import json

from types import SimpleNamespace

import pytest

from workbench.measure import load as ld
from workbench.bench import load_report, load_run
from workbench.measure.load import LoadRun, check_load, run_load
from workbench.measure.load_spec import Load
from workbench.engine.policy import DEFAULT_LADDER, StepCost, parse_policies, read_policy
from workbench.errors import UserError

PROMPTS_TEXT = ["tell me about the cat", "the dog ran on the mat and the cat sat", "soft rug", "the cat sat on the mat",
                "tell me about the dog and the rug and the mat"]
MAX_NEW = 10


@pytest.fixture(scope="module")
def wb(tmp_path_factory):
    from workbench.testing.tiny import make_tiny_app_model
    from workbench.pipeline import Workbench

    path = make_tiny_app_model(tmp_path_factory.mktemp("tiny-load"), seed=1)
    return Workbench.load(target=str(path), draft="random:1", dtype="fp32")


@pytest.fixture(scope="module")
def prompts(wb):
    return [wb.encode(t) for t in PROMPTS_TEXT]


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in PROMPTS_TEXT))
    return path


POLICIES = ["off", "eagle2:4/3/2", "linear:2", "adaptive", "schedule:1=eagle2:4/3/2,2-3=off,4+=linear:2"]


@pytest.fixture(scope="module")
def off_outputs(wb, prompts):
    """Each request of a 6-request load decoded by plain decoding alone."""
    res = run_load(wb, read_policy("off"), prompts=prompts, load=Load("closed", 1, 6), max_new_tokens=MAX_NEW)
    return [t.output_ids for t in res.timed]


# ---- what a load is and the policies it names -------------------------------------------------------
def test_loads_refuse_what_cannot_run():
    with pytest.raises(ValueError, match=r"concurrency must be a whole number >= 1 \(requests in flight\), got 0"):
        Load("closed", 0, 4)
    with pytest.raises(ValueError, match="concurrency must be a whole number"):
        Load("closed", 1.5, 4)
    for rate in (0, -2, float("inf")):
        with pytest.raises(ValueError, match="a rate must be > 0 requests per second"):
            Load("open", rate, 4)
    with pytest.raises(ValueError, match="at least one request"):
        Load("open", 1, 0)


def test_open_loop_arrivals_are_seeded_poisson():
    a = Load("open", 4.0, 400, seed=3).arrivals()
    assert a == Load("open", 4.0, 400, seed=3).arrivals() != Load("open", 4.0, 400, seed=4).arrivals()
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert a[0] == 0 and min(gaps) > 0
    assert 0.2 < sum(gaps) / len(gaps) < 0.3  # mean gap 1 / rate = 0.25 s
    assert Load("closed", 2, 4).arrivals() is None


def test_policies_are_named_as_the_bench_takes_them():
    named = parse_policies("off,eagle2:4/3/2,adaptive")
    assert [p.name for p in named] == ["off", "eagle2:4/3/2", "adaptive"]
    assert named[1].build().name == "fixed" and named[2].text == f"adaptive:{DEFAULT_LADDER}"
    both = parse_policies("off; schedule:1-2=eagle2:4/3/2,3+=off; adaptive:linear:1,linear:3")
    assert [p.build().name for p in both] == ["off", "schedule", "adaptive"]
    assert read_policy("linear:3@ngram").build().settings()[0].draft.kind == "ngram"


@pytest.mark.parametrize("text,message", [
    ("off,bogus", r"unknown speculation policy 'bogus'; write off \(plain decoding"),
    ("off,eagle2:4/3", r"eagle2:4/3: unknown method"),
    ("off;schedule:1-3=eagle2:4/3/2,2+=off", r"batch-size ranges overlap"),
    ("off;schedule:1-2=eagle2:4/3/2,4+=off", r"batch-size ranges leave a gap: batch 3 has no setting"),
    ("off,schedule:1-2=eagle2:4/3/2,3+=off", r"separate the policies with ';'"),
    ("off,off", r"named twice"),
    ("", r"no policy named"),
])
def test_a_bad_policy_is_named_in_one_message(text, message):
    with pytest.raises(ValueError, match=message):
        parse_policies(text)


# ---- the driver ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", POLICIES)
def test_a_closed_loop_keeps_its_concurrency_and_every_output_equals_plain_decoding(wb, prompts, off_outputs, policy):
    res = run_load(wb, read_policy(policy), prompts=prompts, load=Load("closed", 3, 6), max_new_tokens=MAX_NEW)
    assert [t.output_ids for t in res.timed] == off_outputs
    assert [t.prompt_index for t in res.timed] == [0, 1, 2, 3, 4, 0]
    decode = res.decode_steps
    assert decode and max(s.batch for s in decode) <= 3 and not res.stopped
    assert res.tokens == sum(len(o) for o in off_outputs) == sum(s.tokens for s in res.steps)
    for t in res.timed:
        assert t.arrival == t.submitted <= t.first_token <= t.finished <= res.seconds
        n = len(t.output_ids)  # a one-token answer (a stop token first) has no TPOT
        assert t.tpot_ms == (pytest.approx((t.e2e_ms - t.ttft_ms) / (n - 1)) if n > 1 else None)
    in_flight = max(sum(t.submitted <= s.t - 1e-9 < t.finished for t in res.timed) for s in res.steps)
    assert in_flight == 3  # topped up as requests finish, never over
    spec = [s for s in decode if s.speculative]
    assert res.spec_step_share == len(spec) / len(decode)
    assert (res.tau is None) == (not spec) and (policy != "off" or not spec)


def test_an_open_loop_submits_each_request_once_it_has_arrived(wb, prompts, off_outputs):
    load = Load("open", 200.0, 6, seed=1)
    res = run_load(wb, read_policy("eagle2:4/3/2"), prompts=prompts, load=load, max_new_tokens=MAX_NEW)
    assert [t.arrival for t in res.timed] == load.arrivals()
    assert all(t.arrival <= t.submitted <= t.first_token <= t.finished for t in res.timed)
    assert [t.output_ids for t in res.timed] == off_outputs
    slow = run_load(wb, read_policy("off"), prompts=prompts[:1], load=Load("open", 20.0, 3, seed=2), max_new_tokens=2)
    assert slow.seconds >= slow.timed[-1].arrival  # the clock waited for the last arrival


def test_a_refused_request_loses_nothing_of_the_others(wb, prompts, off_outputs):
    policy = read_policy("eagle2:4/3/2")
    long_one = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    needs, _ = ld.plan_capacity(wb, policy, prompts=prompts, load=Load("closed", 1, 5), max_new_tokens=MAX_NEW)
    room = sorted(needs)[-2]  # every request fits but the longest
    res = run_load(wb, policy, prompts=prompts, load=Load("closed", 2, 5), max_new_tokens=MAX_NEW, kv_slots=room)
    refused = [t for t in res.timed if t.refused]
    assert [t.prompt_index for t in refused] == [long_one] and "could never run" in refused[0].refused
    assert all(t.output_ids == off_outputs[t.index] for t in res.timed if not t.refused)
    with pytest.raises(UserError, match=rf"prompt {long_one}: it needs up to \d+ KV slots .* but the pool holds {room}"):
        check_load(wb, policy, prompts=prompts, load=Load("closed", 2, 5), max_new_tokens=MAX_NEW, kv_slots=room)


def test_queued_requests_wait_for_room_and_all_finish(wb, prompts, off_outputs):
    policy = read_policy("adaptive")
    needs, _ = ld.plan_capacity(wb, policy, prompts=prompts, load=Load("closed", 1, 6), max_new_tokens=MAX_NEW)
    res = run_load(wb, policy, prompts=prompts, load=Load("closed", 3, 6), max_new_tokens=MAX_NEW,
                   kv_slots=max(needs))  # room for one
    assert [t.output_ids for t in res.timed] == off_outputs
    assert {s.batch for s in res.steps} == {1}  # three in flight, one at a time in the batch
    assert max(t.ttft_ms for t in res.timed) > min(t.e2e_ms for t in res.timed)  # a later one waited


def test_a_run_stopped_before_its_first_step_has_nothing_and_says_so(wb, prompts):
    cut = LoadRun(wb, read_policy("off"), prompts=prompts, load=Load("closed", 2, 6),
                  max_new_tokens=MAX_NEW).run(seconds=0.0)
    assert cut.stopped and cut.tokens == 0 and not cut.steps and cut.throughput_tok_s == 0.0


def test_a_run_cut_by_its_time_limit_keeps_its_finished_requests(wb, prompts, off_outputs, monkeypatch):
    clock = iter(range(10_000))
    # one second per reading of the run's own clock (the engine's phase clocks keep the real one)
    monkeypatch.setattr(ld, "time", SimpleNamespace(perf_counter=lambda: float(next(clock)), sleep=lambda s: None))
    res = run_load(wb, read_policy("off"), prompts=prompts, load=Load("closed", 1, 6), max_new_tokens=MAX_NEW,
                   seconds=30)
    done = [t for t in res.timed if t.finished is not None]
    assert res.stopped and 0 < len(done) < 6 and res.seconds >= 30
    assert all(t.output_ids == off_outputs[t.index] for t in done)
    rec = res.record()
    assert sum(q["e2e_ms"] is not None for q in rec["requests"]) == len(done)
    assert ld.equal_outputs(rec, run_load(wb, read_policy("off"), prompts=prompts, load=Load("closed", 1, 6),
                                          max_new_tokens=MAX_NEW).record())


# ---- the command ------------------------------------------------------------------------------------------
def bench(*argv) -> int:
    return load_run.main(list(argv))


@pytest.mark.parametrize("argv,message", [
    (["--concurrency", "0"], "--concurrency must be whole numbers >= 1 (requests in flight), got 0"),
    (["--concurrency", "1,x"], "--concurrency takes numbers separated by commas"),
    (["--rate", "0"], "--rate must be > 0 requests per second, got 0"),
    (["--rate", "-1.5"], "--rate must be > 0 requests per second, got -1.5"),
])
def test_bad_loads_are_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as err:
        bench("--target", "/nonexistent", *argv)
    assert err.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0]


@pytest.mark.parametrize("policies,message", [
    ("off,nope", "--policies: unknown speculation policy 'nope'"),
    ("off;schedule:1-2=eagle2:4/3/2,2+=off", "--policies: schedule:1-2=eagle2:4/3/2,2+=off: batch-size ranges overlap"),
    ("off;schedule:1=eagle2:4/3/2,3+=off", "batch-size ranges leave a gap: batch 2 has no setting"),
])
def test_bad_policies_are_one_line_before_the_model_loads(policies, message, capsys, monkeypatch):
    monkeypatch.setattr("workbench.pipeline.load_target", lambda *a, **k: pytest.fail("the model loaded"))
    assert bench("--target", "/nonexistent", "--policies", policies, "--threads", "1") == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_no_load_at_all_is_refused(capsys):
    assert bench("--concurrency", "none", "--rate", "none", "--threads", "1") == 2
    assert "leave no load to run" in capsys.readouterr().err


def test_a_prompt_longer_than_the_pool_is_one_line_before_any_decoding(wb, prompts_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ld.LoadRun, "steps", lambda *a, **k: pytest.fail("a load ran"))
    code = bench("--target", str(wb.target_dir), "--draft", "random:1", "--prompts", str(prompts_file), "--quick",
                 "--kv-slots", "20", "--threads", "1", "--out", str(tmp_path / "out"))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error")]
    assert code == 2 and len(lines) == 1
    assert "prompt 0: it needs up to" in lines[0] and "but the pool holds 20: it could never run" in lines[0]


@pytest.fixture
def quick_run(wb, prompts_file, tmp_path, monkeypatch):
    """``--quick`` on the tiny model (a high rate: tiny steps take a millisecond), two rounds."""
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)  # keep the tests' one thread
    monkeypatch.setattr("workbench.measure.step_cost.step_cost_for", lambda *a, **k: FLAT_COST)  # the model beside
    out = tmp_path / "out"

    def run(*extra) -> int:
        return bench("--target", str(wb.target_dir), "--draft", "random:1", "--prompts", str(prompts_file), "--quick",
                     "--rate", "100", "--rounds", "2", "--policies", "off,eagle2:4/3/2,adaptive", "--threads", "1",
                     "--out", str(out), *extra)

    return run, out


def test_quick_writes_load_json_and_load_md_in_their_layout(quick_run, capsys):
    run, out = quick_run
    assert run() == 0
    result = json.loads((out / "load.json").read_text())
    assert {"machine", "command", "rows", "requests"} <= set(result)
    assert result["command"].startswith("python -m workbench.bench load")
    rows = result["rows"]
    assert [(r["mode"], r["load"]) for r in rows[::3]] == [("closed", 1), ("closed", 2), ("open", 100.0)]
    for r in rows:
        assert set(load_run.FIGURES) | {"policy", "mode", "load", "equal_to_off", "spreads"} <= set(r)
        assert r["equal_to_off"] is True and r["spreads"]["throughput_tok_s"]["runs"] == 2
        assert (r["tau"] is None) == (r["policy"] == "off") and r["mean_batch"] <= max(r["load"], 4)
    assert len(result["requests"]) == 3 * 3 * 4
    assert set(result["requests"][0]) == {"policy", "mode", "load", "prompt_index", "output_ids"}
    assert [q["prompt_index"] for q in result["requests"][:4]] == [0, 1, 2, 3]
    md = (out / "load.md").read_text()
    assert "## Closed loop" in md and "## Open loop" in md and "| concurrency | policy | tokens/s |" in md
    verdicts, crossover = md.split("## Where the best fixed tree stops paying")
    assert verdicts.count("- concurrency ") == 2 and "- rate 100/s: tokens/s: " in verdicts
    assert crossover.count("- concurrency ") == 2 and "`eagle2:4/3/2`" in crossover
    assert "fp32" in md and "1 torch threads" in md and result["command"] in md
    assert {"commit", "date", "threads", "dtype"} <= set(result)  # where the record came from
    assert f"{result['date']}, commit {result['commit'] or 'not recorded'}, " in md
    verdict = result["verdicts"][0]["throughput_tok_s"]
    assert "level within noise" in verdict or " wins: " in verdict
    # the one cost model beside every closed-loop row of a one-setting policy (adaptive has several)
    got = result["predicted"]
    assert got["source"] == FLAT_COST.source
    assert [(r["policy"], r["load"]) for r in got["rows"]] == [("off", 1), ("eagle2:4/3/2", 1), ("off", 2),
                                                               ("eagle2:4/3/2", 2)]
    for r in got["rows"]:
        spec = load_run.parse_policies(r["policy"])[0].settings()[0]
        assert r["predicted_tok_s"] == round(FLAT_COST.predict(spec, r["tau"], batch=r["batch"]).tokens_per_s, 2)
    assert "## Predicted beside measured" in md and "| 1 | `eagle2:4/3/2` |" in md
    assert "| concurrency | policy |" in capsys.readouterr().out


def test_a_stopped_run_resumes_with_only_the_missing_runs(quick_run, capsys, monkeypatch):
    run, out = quick_run
    calls = {"n": 0, "stop_after": 3}
    real = load_run.run_load

    def counted(*args, **kwargs):
        if kwargs["load"] is not ld.WARMUP:
            if calls["stop_after"] is not None and calls["n"] >= calls["stop_after"]:
                raise KeyboardInterrupt
            calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(load_run, "run_load", counted)
    assert run() == 130
    assert "interrupted: 3 runs are kept" in capsys.readouterr().err
    calls.update(n=0, stop_after=None)
    assert run() == 0
    assert calls["n"] == 3 * 3 * 2 - 3
    err = capsys.readouterr().err
    assert "3 of 18 runs reused" in err
    assert "**Resumed run**: 3 of 18 runs" in (out / "load.md").read_text()
    assert run("--max-new-tokens", "5") == 0  # a finished run's journal is begun anew: other settings are fine


# ---- what a policy settled on --------------------------------------------------------------------------------
def test_what_a_policy_settled_on_becomes_a_schedule_and_the_engines_flags():
    records = {("closed 1", "auto", 0): {"choices": [[1, "eagle2:8/5/4", 30], [2, "eagle2:4/3/2", 5]]},
               ("closed 4", "auto", 0): {"choices": [[2, "eagle2:4/3/2", 9], [3, "eagle2:4/3/2", 4], [4, "off", 20],
                                                     [1, "off", 2]]},
               ("closed 4", "off", 0): {"choices": [[4, "off", 50]]}}
    found = load_run.settled("auto", records)
    assert found["batch"] == {1: "eagle2:8/5/4", 2: "eagle2:4/3/2", 3: "eagle2:4/3/2", 4: "off"}
    assert found["steps"] == {1: 32, 2: 14, 3: 4, 4: 20}
    assert found["schedule"] == "schedule:1-1=eagle2:8/5/4,2-3=eagle2:4/3/2,4+=off"
    assert read_policy(found["schedule"]).build().name == "schedule"
    vllm = found["frameworks"]["vLLM"]
    assert '"num_speculative_tokens_per_batch_size": [[1, 1, 5], [2, 3, 3], [4, 4, 0]]' in vllm  # chains as deep as each tree
    assert '"num_speculative_tokens": 5' in vllm and "verifies chains only" in vllm
    assert '{"candidate_steps": [3, 5]}' in found["frameworks"]["SGLang"]
    assert load_run.settled("nobody", records) is None


# ---- auto: a step cost given, or measured once and cached -----------------------------------------------
FLAT_COST = StepCost(verify=((1, 10.0), (256, 11.0)), draft=((1, 0.1), (64, 0.2)))  # made up: nothing is timed


def test_auto_under_load_equals_plain_decoding_and_needs_a_step_cost(wb, prompts, off_outputs):
    auto = read_policy("auto")
    assert auto.needs_cost and auto.draft.kind == "head" and not read_policy("adaptive").needs_cost
    res = run_load(wb, auto, prompts=prompts, load=Load("closed", 3, 6), max_new_tokens=MAX_NEW, cost=FLAT_COST)
    assert [t.output_ids for t in res.timed] == off_outputs
    assert res.spec_step_share > 0  # a free verify: it speculated
    with pytest.raises(ValueError, match="measure it first"):
        LoadRun(wb, auto, prompts=prompts, load=Load("closed", 1, 2), max_new_tokens=MAX_NEW)


def test_the_report_says_what_auto_settled_on(wb, prompts_file, tmp_path, monkeypatch):
    import workbench.measure.step_cost as sc

    monkeypatch.setattr("torch.set_num_threads", lambda n: None)
    monkeypatch.setattr(sc, "step_cost_for", lambda *a, **k: FLAT_COST)
    out = tmp_path / "out"
    assert bench("--target", str(wb.target_dir), "--draft", "random:1", "--prompts", str(prompts_file), "--quick",
                 "--rate", "none", "--policies", "off,auto", "--threads", "1", "--out", str(out)) == 0
    result = json.loads((out / "load.json").read_text())
    assert result["machine"]["step_cost"]["verify_ms"] == [[1, 10.0], [256, 11.0]]
    found = result["settled"]["auto"]
    assert found["schedule"].startswith("schedule:1") and all(r["equal_to_off"] for r in result["rows"])
    md = (out / "load.md").read_text()
    assert "## What `auto` settled on" in md and "It weighed each setting by this step cost (given)" in md
    assert "num_speculative_tokens_per_batch_size" in md


def test_a_step_cost_is_cached_only_when_its_rounds_agree(wb, tmp_path, monkeypatch):
    import statistics

    import workbench.measure.step_cost as sc

    draft = [(r, 1.0) for r in sc.DRAFT_ROWS]
    good = ([(n, 10.0 + n) for n in sc.VERIFY_SIZES], draft)
    busy_round = ([(1, 30.0)] + good[0][1:], draft)
    rounds = iter([good] * sc.ROUNDS + [good, busy_round] + [good] * (sc.ROUNDS - 2))  # quiet, then busy
    monkeypatch.setattr(sc, "_measure", lambda wb, source: next(rounds))
    head = read_policy("auto").draft
    busy, quiet = tmp_path / "busy", tmp_path / "quiet"
    got = sc.step_cost_for(wb, head, cache_dir=quiet, log=lambda m: None)
    assert got.source == "measured on this machine" and got.verify == tuple(good[0])
    assert got.measured.count(",") >= 3  # the date, the CPU, threads and dtype: what every quote names
    cached = sc.step_cost_for(wb, head, cache_dir=quiet, log=lambda m: None)
    assert cached.source == f"cached in {sc.CACHE_FILE}"
    assert cached.overhead == got.overhead and cached.measured == got.measured  # the engine steps' overhead kept
    said = []
    got = sc.step_cost_for(wb, head, cache_dir=busy, log=said.append)
    first = statistics.median([11.0, 30.0] + [11.0] * (sc.ROUNDS - 2))
    assert got.source == "measured, rounds disagreed" and got.verify_ms(1) == first  # the medians, for this run
    assert "nothing cached" in said[-1] and not (busy / sc.CACHE_FILE).exists()


def test_a_step_cost_cached_on_a_sparser_grid_is_measured_again(wb, tmp_path, monkeypatch):
    import workbench.measure.step_cost as sc
    from workbench.cache_file import add_entry

    head = read_policy("auto").draft
    key = sc._cache_key(wb, head)
    old = {"verify": [[1, 10.0], [4, 12.0], [16, 30.0], [64, 90.0]], "draft": [[1, 1.0], [16, 2.0], [64, 4.0]]}
    add_entry(tmp_path / sc.CACHE_FILE, key, value=old, tag="[auto]", what="the step cost")
    good = ([(n, 10.0 + n) for n in sc.VERIFY_SIZES], [(r, 1.0) for r in sc.DRAFT_ROWS])
    monkeypatch.setattr(sc, "_measure", lambda wb, source: good)
    got = sc.step_cost_for(wb, head, cache_dir=tmp_path, log=lambda m: None)
    assert got.source == "measured on this machine" and got.verify_ms(2) == 12.0  # not 10.67, the old grid's line
    assert sc.step_cost_for(wb, head, cache_dir=tmp_path, log=lambda m: None).source == f"cached in {sc.CACHE_FILE}"


def _row(policy: str, load: float, tput: tuple[float, float, float], tpot: tuple[float, float, float],
         mode: str = "closed") -> dict:
    spans = {k: {"median": m, "low": lo, "high": hi, "runs": 3}
             for k, (m, lo, hi) in (("throughput_tok_s", tput), ("tpot_ms_p50", tpot))}
    return {"policy": policy, "mode": mode, "load": load, "spreads": spans}


def test_the_report_states_the_crossover_and_auto_against_the_best_from_the_ranges():
    rows = [_row("off", 1, (10, 9, 11), (100, 95, 105)), _row("eagle2:4/3/2", 1, (20, 19, 21), (50, 48, 52)),
            _row("auto", 1, (19.5, 18, 21), (51, 49, 53)),
            _row("off", 4, (30, 28, 32), (130, 125, 135)), _row("eagle2:4/3/2", 4, (29, 27, 31), (135, 130, 140)),
            _row("auto", 4, (25, 24, 26), (160, 155, 165)),
            _row("off", 8, (40, 39, 41), (200, 195, 205)), _row("eagle2:4/3/2", 8, (20, 18, 22), (400, 390, 410)),
            _row("auto", 8, (39, 38.5, 38.8), (203, 196, 206))]
    cross = load_report.crossover_md(rows)
    assert cross[0] == "The best fixed tree falls clear below off at concurrency 8; it is clear above off at 1."
    assert "- concurrency 4: `eagle2:4/3/2` 29.0 (27.0–31.0) tok/s against off 30.0 (28.0–32.0): 0.97x, level " \
           "within noise" in cross
    lines = load_report.auto_md(rows)
    assert lines[0].startswith("- concurrency 1: 1.95x off in tokens/s; against the best of off and the fixed "
                               "trees (`eagle2:4/3/2`) 0.97x, level within noise; TPOT p50 1.02x")
    assert "0.83x, clear behind" in lines[1] and "TPOT p50 1.23x `off`'s, clear behind" in lines[1]
    assert "(`off`) 0.97x, behind, within 5 %" in lines[2] and lines[2].endswith("level within noise")
    md_rows = rows + [_row("off", 1, (5, 4, 6), (1, 1, 1), mode="open")]
    assert load_report.crossover_md([r for r in md_rows if r["mode"] == "open"]) == []


def test_the_curves_figure_draws_each_policy_median_with_its_range():
    from workbench.viz.load import curves_figure

    rows = [_row("off", 1, (10, 9, 11), (100, 95, 105)), _row("off", 4, (30, 28, 32), (130, 125, 135)),
            _row("auto", 1, (19.5, 18, 21), (51, 49, 53)), _row("auto", 4, (25, 24, 26), (160, 155, 165)),
            _row("off", 2, (5, 4, 6), (1, 1, 1), mode="open")]
    fig = curves_figure(rows)
    assert [(t.name, t.meta) for t in fig.data] == [("off", "throughput_tok_s"), ("off", "tpot_ms_p50"),
                                                   ("auto", "throughput_tok_s"), ("auto", "tpot_ms_p50")]
    auto_tpot = fig.data[3]
    assert list(auto_tpot.x) == [1, 4] and list(auto_tpot.y) == [51, 160]
    assert list(auto_tpot.error_y.array) == [2, 5] and list(auto_tpot.error_y.arrayminus) == [2, 5]
    assert list(fig.layout.xaxis.tickvals) == [1, 4] and fig.layout.xaxis.type == "log"
    # what each panel shows is on its y axis, and no subplot title sits under the legend above the plots
    assert not fig.layout.annotations
    assert "tokens/s" in fig.layout.yaxis.title.text and "TPOT" in fig.layout.yaxis2.title.text


def test_an_early_exits_step_cost_is_read_from_the_cache(wb, tmp_path, monkeypatch):
    """exit:N's draft curve is read off the verify curve (its points at the verify sizes): it is
    cached like a timed one, not measured again at every run."""
    import workbench.measure.step_cost as sc
    from workbench.engine.drafts.registry import parse_draft

    verify = [(n, 10.0 + n) for n in sc.VERIFY_SIZES]
    monkeypatch.setattr(sc, "_measure", lambda wb, source: (verify, [(n, ms / 2) for n, ms in verify]))
    exit_source = parse_draft("exit:1")
    assert sc.step_cost_for(wb, exit_source, cache_dir=tmp_path, log=lambda m: None).source == "measured on this machine"
    again = sc.step_cost_for(wb, exit_source, cache_dir=tmp_path, log=lambda m: None)
    assert again.source == f"cached in {sc.CACHE_FILE}" and again.draft_ms(4) == 7.0
