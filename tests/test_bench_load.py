"""The load benchmark (``measure/load_spec.py``, ``load.py``, ``load_run.py``, ``load_report.py``) on a tiny random
model: closed and open loops keep their promises (requests in flight, arrivals, times in order,
outputs equal to plain decoding under every policy), a refused or queued request loses nothing
of the others, a time limit keeps what finished; bad input is one line, exit 2, before the model
loads; ``--quick`` writes load.json and load.md in their layout and a stopped run resumes; what
a policy settled on per batch size becomes a schedule and vLLM's / SGLang's flags; the step cost
(its curves, its overhead line through every batch timed, the prefill and the draft's catch-up)
is measured and cached, and the prediction beside a run adds each prefill and splits the gap."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

from types import SimpleNamespace

import pytest

from workbench.measure import load as ld
from workbench.bench import load_prediction, load_report, load_run
from workbench.measure.load import LoadRun, check_load, run_load
from workbench.measure.load_spec import Load
from workbench.measure.probe import probed, verify_sizes
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
    # the tokens each step's verify held, roots included, are the drafts its requests put to the target
    drafts = [d for t in res.timed for d in t.request.drafts_verified]
    assert sum(s.verified for s in decode) == len(drafts) + sum(drafts)
    assert all(s.verified == s.batch for s in decode if not s.speculative)
    assert res.nodes == (None if not spec else sum(s.verified for s in spec) / sum(s.batch for s in spec))
    assert res.record()["nodes"] == (None if res.nodes is None else round(res.nodes, 3))
    # the mix of verify sizes, request by request: each request's drafts of each speculative step
    each = [n for s in spec for n in s.verified_each]
    assert all(len(s.verified_each) == s.batch and sum(s.verified_each) == s.verified for s in spec)
    assert res.nodes_mix == ({n: each.count(n) for n in sorted(set(each))} if spec else None)
    if spec:
        assert sum(n * k for n, k in res.nodes_mix.items()) / sum(res.nodes_mix.values()) == pytest.approx(res.nodes)
    alone = run_load(wb, read_policy(policy), prompts=prompts, load=Load("closed", 1, 2), max_new_tokens=MAX_NEW)
    ran = [s.verified for s in alone.decode_steps if s.speculative]
    assert alone.nodes_mix == ({n: ran.count(n) for n in sorted(set(ran))} if ran else None)
    assert load_run.pooled_mix([alone.record(), alone.record()]) == (None if not ran else {n: 2 * ran.count(n) for n in set(ran)})
    # the engine's own profile of the run, kept in its record: its prefill steps are the run's
    profile = res.record()["profile"]
    prefills = [s for s in res.steps if s.kind == "prefill"]
    assert profile["prefill"]["steps"] == len(prefills) and profile["prefill"]["requests"] == len(res.timed)
    assert sum(t["steps"] for t in profile.values()) == len(res.steps)
    assert 0 < profile["prefill"]["wall_ms"] < res.seconds * 1e3


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
    assert got["priced_by"] == {"head": f"undated ({FLAT_COST.source})", "no draft": f"undated ({FLAT_COST.source})"}
    assert [(r["policy"], r["load"]) for r in got["rows"]] == [("off", 1), ("eagle2:4/3/2", 1), ("off", 2),
                                                               ("eagle2:4/3/2", 2)]
    # each closed load's rounds gave a turn to a probe of the target's part, and its rows are priced by them
    assert set(result["probes"]) == {"closed 1", "closed 2"} and set(got["probes"]) == set(result["probes"])
    for load, found in result["probes"].items():
        c = int(load.split()[1])
        assert [p["question_id"] for p in found] == [0, 1] and got["probes"][load]["count"] == 2
        assert [n for n, _ in found[0]["verify"]] == list(verify_sizes([c, 4 * c]))  # plain and 4/3/2's tree
        assert found[0]["draft"] and found[0]["prompt_tokens"] > 0  # the head's forwards too
    for r in got["rows"]:
        spec = load_run.parse_policies(r["policy"])[0].settings()[0]
        model = probed(FLAT_COST, result["probes"][f"closed {r['load']}"], head=spec.speculative)
        assert r["probes"] == 2
        assert r["predicted_tok_s"] == round(model.predict(spec, r["tau"], batch=r["batch"]).tokens_per_s, 2)
        # the run's own prefill, from its engine's profile, beside the model's (the probes' prefill)
        assert r["measured_ms"]["prefill"] > 0 and r["model_ms"]["prefill"] > 0 and r["prefill_priced"]
        tokens = sum(len(q["output_ids"]) for q in result["requests"]
                     if (q["mode"], q["load"], q["policy"]) == ("closed", r["load"], r["policy"]))
        assert r["tokens"] == tokens
        wall_ms = sorted(tokens / x * 1e3 for x in r["measured_range"])  # the rounds' fastest and slowest wall
        assert r["measured_ms"]["decode"] > 0
        assert wall_ms[0] <= r["measured_ms"]["prefill"] + r["measured_ms"]["decode"] <= wall_ms[1] * 1.001
    assert "## Predicted beside measured" in md and "| 1 | `eagle2:4/3/2` |" in md
    # the step costs' figures kept beside the rows they priced, and said once per measurement
    assert got["step_costs"] == {"off": FLAT_COST.as_dict(), "eagle2:4/3/2": FLAT_COST.as_dict()}
    figures = md.split("(`predicted.step_costs`):")[1].split("\n\nThe probes'")[0]
    assert figures.count("\n- ") == 1 and "- `off`, `eagle2:4/3/2`: undated" in figures
    assert "Verify of N tokens, ms: 1: 10.0, 256: 11.0." in figures and "Draft forward of R rows, ms: 1: 0.1, 64: 0.2." in figures
    probes_said = md.split("(`predicted.probes`):")[1].split("\n#")[0]
    assert probes_said.count("\n- ") == 2 and "- 1 in flight: 2 probes; verify of N tokens, ms: 1: " in probes_said
    inside = sum(r["measured_range"][0] <= r["closed_loop_tok_s"] <= r["measured_range"][1] for r in got["rows"])
    assert f"the model lies inside the rounds' range of the measured tokens/s in {inside} of 4 rows" in md
    # weighed against what chance allows a range of the run's two rounds: 1 − 2·0.5² = 50 %
    assert result["settings"]["rounds"] == 2
    assert (f"of 4 rows: {sum(r['closed_loop_tok_s'] > r['measured_tok_s'] for r in got['rows'])} above the "
            "measured median") in md and f"= 50%, so predictions with no error would lie inside about 2.0 of 4 times (here: {inside})" in md
    assert "took a turn in each round of a closed load (2 at 1 in flight, 2 at 2 in flight)" in md
    assert "- `off` at 2 in flight: prefill " in md
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


def test_report_only_prices_a_finished_run_again_from_its_records(quick_run, prompts_file):
    """``--report-only`` times nothing: the run's measured rows stay as they were, its predictions
    come again from its journal, its step costs and its prompts, and the report says so; a folder
    with no finished run, or prompts that changed since, is refused and nothing is written."""
    run, out = quick_run
    assert run() == 0
    before = json.loads((out / "load.json").read_text())
    assert bench("--report-only", "--out", str(out)) == 0
    after = json.loads((out / "load.json").read_text())
    assert after["rows"] == before["rows"] and after["date"] == before["date"] and after["probes"] == before["probes"]
    assert after["predicted"] == before["predicted"]  # this code prices them as the run's did
    assert set(after["rendered"]) == {"date", "commit"}
    assert "**Report written again** " in (out / "load.md").read_text()
    assert bench("--report-only", "--out", str(out / "nothing")) == 2
    text, written = prompts_file.read_text(), (out / "load.json").read_text()
    try:  # the module's prompts, changed for this check only
        prompts_file.write_text(text + json.dumps({"prompt": "one more"}) + "\n")
        assert bench("--report-only", "--out", str(out)) == 2
    finally:
        prompts_file.write_text(text)
    assert (out / "load.json").read_text() == written  # refused: nothing rewritten


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
    assert result["machine"]["step_costs"]["auto"]["verify_ms"] == [[1, 10.0], [256, 11.0]]
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
    # the prefill and the head's catch-up over the prompt, at every length timed, measured with the rest
    assert got.prefill and [n for n, _ in got.prefill] == [n for n, _ in got.catch_up] == list(sc.PREFILL_LENGTHS)
    cached = sc.step_cost_for(wb, head, cache_dir=quiet, log=lambda m: None)
    assert cached.source == f"cached in {sc.CACHE_FILE}"
    assert cached.overhead == got.overhead and cached.measured == got.measured  # the engine steps' overhead kept
    assert cached.prefill == got.prefill and cached.catch_up == got.catch_up
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


def test_a_step_cost_cached_before_the_prefill_or_at_other_overhead_batches_is_measured_again(wb, tmp_path,
                                                                                              monkeypatch):
    import workbench.measure.step_cost as sc
    from workbench.cache_file import add_entry

    head = read_policy("auto").draft
    good = ([(n, 10.0 + n) for n in sc.VERIFY_SIZES], [(r, 1.0) for r in sc.DRAFT_ROWS])
    today = {"verify": good[0], "draft": good[1], "overhead": {"spec_levels": 3}, "overhead_timing": sc.OVERHEAD_TIMING,
             "overhead_batches": list(sc.OVERHEAD_BATCHES), "prefill": [[32, 5.0], [128, 9.0]], "catch_up": [],
             "kv": [[1, 0.005], [8, 0.009]], "batched_tokens": [[4, 1, 1.1], [4, 2, 1.2]]}
    before = {k: v for k, v in today.items() if k not in ("prefill", "catch_up")}
    assert sc._current(today) and not sc._current(before)
    pooled_pace = {k: v for k, v in today.items() if k != "batched_tokens"}  # one batch pace for every count of tokens
    assert not sc._current(pooled_pace) and sc._readable(pooled_pace)
    assert not sc._current({**today, "overhead_batches": [1, 4]})
    assert not sc._current({k: v for k, v in today.items() if k != "overhead_batches"})
    assert not sc._current({**today, "overhead": {}}) and sc._readable({**today, "overhead": {}})  # no per-level overhead
    unpaced = {k: v for k, v in today.items() if k != "overhead_timing"}  # its overhead against the curves' pace
    assert not sc._current(unpaced) and not sc._readable(unpaced)
    batch_inside = {**today, "overhead_timing": "paced, verified tokens, pooled"}  # a batch's slower forward in its line
    assert not sc._current(batch_inside) and not sc._readable(batch_inside)  # priced twice today: measured again
    no_context = {k: v for k, v in today.items() if k != "kv"}  # before the context term was timed
    assert not sc._current(no_context) and sc._readable(no_context)
    decode_only = {**no_context, "kv_ms": 0.005}  # timed at a decode step alone: read, but timed again
    assert not sc._current(decode_only) and sc._readable(decode_only)
    assert StepCost.from_dict(decode_only).kv_ms(8) == 0.005  # read as one point: every size alike
    add_entry(tmp_path / sc.CACHE_FILE, sc._cache_key(wb, head), value=before, tag="[cost]", what="the step cost")
    monkeypatch.setattr(sc, "_measure", lambda wb, source: good)
    got = sc.step_cost_for(wb, head, cache_dir=tmp_path, log=lambda m: None)
    assert got.source == "measured on this machine" and got.prefill
    assert sc.step_cost_for(wb, head, cache_dir=tmp_path, log=lambda m: None).source == f"cached in {sc.CACHE_FILE}"


def test_the_overhead_is_the_least_squares_line_through_every_batch_timed(wb, monkeypatch):
    import numpy as np

    import workbench.measure.step_cost as sc

    assert max(sc.OVERHEAD_BATCHES) >= 8  # a load of 8 in flight is priced from a measured step of 8
    timed = {False: {1: 3.0, 4: 5.0, 8: 12.0}, True: {1: 6.0, 4: 9.0, 8: 30.0}}  # made up: nothing is timed
    monkeypatch.setattr(sc, "OVERHEAD_BATCHES", (1, 4, 8))
    monkeypatch.setattr(sc, "_step_overheads", lambda wb, spec, *, batch, forwards, prefix_len, probe:
                        [(timed[spec.speculative][batch], None, 1.0)] * 2)
    got = sc.overhead_fields([sc.time_overhead_steps(wb, read_policy("auto").draft, FLAT_COST)])
    for kind, speculative in (("plain", False), ("spec", True)):
        slope, intercept = np.polyfit((1, 4, 8), [timed[speculative][b] for b in (1, 4, 8)], 1)
        assert (got[f"{kind}_per_step"], got[f"{kind}_per_request"]) == (pytest.approx(intercept, abs=1e-3),
                                                                         pytest.approx(slope, abs=1e-3))
    assert got["spec_per_request"] > (9.0 - 6.0) / 3  # the step of 8 lifts the line the first two drew


def test_a_steps_overhead_is_its_time_less_its_target_clock_and_its_draft_forwards_at_the_probes_pace(wb, monkeypatch):
    """Every engine step made to take 10 ms and its target forward 4 ms by the engine's clock (both
    faked): the overhead is the 6 ms left less the draft's forwards on the curves at the pace the
    probe reports right after the step, whatever the target's own pace (it is the clock's); the
    step's forward pace is the 4 ms over the bare forward's price at that pace; the probe is asked
    for a forward over the tokens the step verified."""
    import itertools

    import workbench.engine.timings as timings
    import workbench.measure.step_cost as sc
    from workbench.engine.config import SpecConfig

    class Probe:
        def __init__(self, pace):
            self.value, self.asked = pace, []

        def pace(self, tokens):
            self.asked.append(tokens)
            return self.value

    monkeypatch.setattr(timings, "target_ms", lambda timing_ms: 4.0)
    tree = SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=4, draft=read_policy("auto").draft)
    got = {}
    for kind, spec in (("plain", SpecConfig("vanilla")), ("tree", tree)):
        for pace in (0.5, 1.5):
            ticks = itertools.count()
            monkeypatch.setattr(sc, "_synced", lambda device: next(ticks) * 0.010)
            probe = Probe(pace)
            got[kind, pace] = sc._step_overheads(wb, spec, batch=2, forwards=FLAT_COST, prefix_len=16, probe=probe)
            assert probe.asked == [2 * (4 if spec.speculative else 1)] * sc.OVERHEAD_STEPS
            assert len(got[kind, pace]) == sc.OVERHEAD_STEPS  # every timed step kept, pooled later over rounds
            tokens = 4 if spec.speculative else 1
            assert [f for _, f, _ in got[kind, pace]] == pytest.approx([4.0 / (FLAT_COST.forward_ms(2, tokens) * pace)]
                                                                       * sc.OVERHEAD_STEPS)
            assert [n for _, _, n in got[kind, pace]] == [tokens] * sc.OVERHEAD_STEPS  # the tokens a request brought
    drafts = [FLAT_COST.parts(tree, 2, tau).draft_ms for tau in (1.0, 4.0)]  # the extend at 1 to 4 tokens a request
    for (slow, _, _), (fast, _, _) in zip(got["tree", 0.5], got["tree", 1.5]):
        assert min(drafts) - 1e-6 <= slow - fast <= max(drafts) + 1e-6
        assert 6.0 - 1.5 * max(drafts) - 1e-6 <= fast < 6.0
    assert [o for o, _, _ in got["plain", 0.5]] == [o for o, _, _ in got["plain", 1.5]] == pytest.approx([6.0] * sc.OVERHEAD_STEPS)
    one = sc._step_overheads(wb, SpecConfig("vanilla"), batch=1, forwards=FLAT_COST, prefix_len=16, probe=Probe(1.0))
    assert {f for _, f, _ in one} == {None}  # one request: no batch to set against one sequence


def test_the_forward_pace_is_the_median_per_batch_over_every_kind_and_round_and_the_overhead_leaves_it_out():
    """``forward_paces`` pools every timed step's pace per batch over the kinds and rounds (JSON's
    lists as well as tuples), none at one request; ``overhead_points`` reads the overheads alone."""
    import workbench.measure.step_cost as sc

    rounds = [{"plain": {1: [(1.0, None)], 4: [(2.0, 1.1), (2.2, 1.3)]}, "tree": {4: [(5.0, 1.2)], 8: [(9.0, 1.4)]}},
              {"plain": [[4, [[2.4, 1.5]]]], "tree": [[8, [[9.5, 1.6], [9.9, None]]]]}]
    assert sc.forward_paces(rounds) == [[4, 1.25], [8, 1.5]]
    assert sc.overhead_points(rounds) == {"plain": [[1, 1.0], [4, 2.2]], "tree": [[4, 5.0], [8, 9.5]]}
    assert sc.overhead_points([{"plain": [[1, [3.0, 4.0]]]}]) == {"plain": [[1, 3.5]]}  # an older entry's bare numbers


def test_the_forward_pace_by_tokens_is_the_median_per_batch_and_count_of_new_tokens():
    """``forward_paces_by_tokens`` keeps a pace per batch and per new tokens a request (each
    step's verified tokens over its requests, rounded), pooled over the kinds and rounds; steps
    kept with two figures (before the tokens were) and one-request steps count in none."""
    import workbench.measure.step_cost as sc

    rounds = [{"plain": {1: [(1.0, None, 1.0)], 8: [(2.0, 1.3, 1.0), (2.2, 1.1, 1.0)]},
               "chain": {8: [(3.0, 1.5, 2.0), (3.1, 1.7, 2.0)]}, "tree": {8: [(5.0, 1.2, 4.0), (5.5, 9.9)]}},
              {"tree": [[8, [[9.5, 1.0, 3.75], [9.9, None, 4.0]]]], "chain": [[4, [[2.0, 1.25, 2.0]]]]}]
    assert sc.forward_paces_by_tokens(rounds) == [[4, 2, 1.25], [8, 1, 1.2], [8, 2, 1.6], [8, 4, 1.1]]


def test_the_overhead_prices_each_steps_verify_at_the_tokens_its_trees_held(wb, monkeypatch):
    """An n-gram tree the lookup filled in part verifies fewer than ``num_draft_tokens``: the bare
    forward beside each step is asked for the tokens the step's trees held, and its forwards are
    priced at the same count a request (before, at B x num_draft_tokens, what the step never ran:
    the overhead came out low by the difference)."""
    import workbench.measure.step_cost as sc
    from workbench.engine.config import SpecConfig
    from workbench.engine.drafts.registry import parse_draft

    class Probe:
        def __init__(self):
            self.asked = []

        def pace(self, tokens):
            self.asked.append(tokens)
            return 1.0

    priced = []

    class Recording(StepCost):
        def parts(self, spec, batch=1, tau=None, nodes=None):
            priced.append(nodes)
            return super().parts(spec, batch, tau, nodes)

    cost = Recording(**{f: getattr(FLAT_COST, f) for f in ("verify", "draft")})
    tree = SpecConfig.from_knobs("eagle2", **sc.OVERHEAD_SETTING, draft=parse_draft("ngram"))
    probe = Probe()
    got = sc._step_overheads(wb, tree, batch=2, forwards=cost, prefix_len=32, probe=probe)
    assert len(got) == len(probe.asked) == len(priced) == sc.OVERHEAD_STEPS
    assert [2 * n for n in priced] == pytest.approx(probe.asked)  # the pace and the price at one count
    assert all(2 <= t <= 2 * sc.OVERHEAD_SETTING["num_draft_tokens"] for t in probe.asked)


def test_the_context_term_is_timed_per_committed_token_at_each_count_of_new_tokens(wb, monkeypatch):
    """Both contexts are read as a lone request's cache is in the engine, one ascending run of slots
    (a view of the pool), so the difference holds no gather that only one of them paid."""
    import workbench.measure.cost as cost
    import workbench.measure.step_cost as sc

    built, requests_batch = [], cost.requests_batch

    def recording(n, prefixes, new_slots, device):
        built.extend(list(p) + list(s) for p, s in zip(prefixes, new_slots))
        return requests_batch(n, prefixes, new_slots, device)

    monkeypatch.setattr(cost, "requests_batch", recording)
    got = sc.measure_kv(wb)
    assert built and all(slots == list(range(slots[0], slots[0] + len(slots))) for slots in built)
    assert {len(slots) for slots in built} > {sc.PREFIX + n for n in sc.KV_TOKENS}  # the long context too
    assert [n for n, _ in got] == list(sc.KV_TOKENS)
    ms = [v for _, v in got]
    assert all(0.0 <= v < 1.0 for v in ms)  # ms a token: well under a ms on any machine
    assert ms == sorted(ms)  # more new tokens read the same keys no fewer times
    monkeypatch.setattr(sc, "KV_LONG", sc.PREFIX)  # no longer context to set against the curves': nothing to tell
    assert sc.measure_kv(wb) == []


def test_the_overheads_prompts_repeat_a_block_a_lookup_can_continue():
    import workbench.measure.step_cost as sc

    prompts = sc.overhead_prompts(vocab=1000, batch=3, prefix_len=40)
    assert [len(p) for p in prompts] == [40] * 3 and len({tuple(p) for p in prompts}) == 3
    for p in prompts:
        assert p[sc.PATTERN : 2 * sc.PATTERN] == p[: sc.PATTERN] and p[2 * sc.PATTERN :] == p[: 40 - 2 * sc.PATTERN]
    assert sc.overhead_prompts(1000, 3, 40) == prompts  # seeded: every round times the same requests


def test_the_pace_probe_times_a_bare_forward_after_one_prefix_filled_once(wb):
    import workbench.measure.step_cost as sc

    probe = sc.PaceProbe(wb, FLAT_COST, prefix_len=16, tokens=8)
    first = probe.pace(8)
    pool = probe.pool
    assert first > 0 and probe.pace(1) > 0 and probe.pool is pool  # the prefix is not filled again
    assert pool.alloc.num_used == 16  # each forward's slots freed after it: only the prefix is held


def test_rounds_agree_within_a_share_of_their_median_or_a_draft_forward_within_a_share_of_a_decode_step():
    import workbench.measure.step_cost as sc

    rounds = [[(1, 4.0), (64, 16.0)], [(1, 5.0), (64, 17.0)], [(1, 3.9), (64, 18.0)]]  # 1.1 ms apart: 27 % of 4 ms
    assert sc._agreed(rounds) == ([(1, 4.0), (64, 17.0)], False)
    assert sc._agreed(rounds, slack_ms=sc.DRAFT_SLACK * 70.0)[1]  # 3.5 ms of a 70 ms decode step
    assert not sc._agreed(rounds, slack_ms=sc.DRAFT_SLACK * 20.0)[1]  # 1 ms of a 20 ms one
    assert not sc._agreed([[(1, 60.0)], [(1, 80.0)], [(1, 70.0)]], slack_ms=3.5)[1]  # a verify's 29 %: a busy machine


def test_rounds_that_differ_by_the_machines_pace_alone_agree_on_the_curves_shape():
    """A round slower at every size by one factor agrees once each round's smallest size is taken
    out; one whose dear size alone moved does not, nor one whose smallest size moved too far."""
    import workbench.measure.step_cost as sc

    paced = [[(1, 32.7), (64, 181.2)], [(1, 40.3), (64, 237.5)], [(1, 34.6), (64, 217.3)]]  # the docstring's
    assert sc._agreed(paced) == ([(1, 34.6), (64, 217.3)], True)
    bent = [[(1, 33.0), (64, 181.0)], [(1, 33.5), (64, 240.0)], [(1, 33.2), (64, 200.0)]]  # 64 alone moved 33 %
    assert not sc._agreed(bent)[1]
    assert not sc._agreed([[(1, 30.0), (64, 180.0)], [(1, 40.0), (64, 240.0)], [(1, 35.0), (64, 210.0)]])[1]


def test_a_sources_cached_step_cost_takes_the_runs_target_part(wb, tmp_path, monkeypatch):
    """A second source's step cost read from the cache, in a run whose first source was measured
    now, carries the run's verify curve, plain decoding's overhead and the prefill: plain decoding
    has one price in the run; the source's own draft and speculative overhead stay its own."""
    import workbench.measure.step_cost as sc
    from workbench.cache_file import add_entry
    from workbench.engine.drafts.registry import parse_draft

    ngram = parse_draft("ngram")
    cached = {"verify": [(n, 50.0 + n) for n in sc.VERIFY_SIZES], "draft": [], "overhead_timing": sc.OVERHEAD_TIMING,
              "kv": [[1, 0.009]], "batched_tokens": [[8, 1, 1.2], [8, 2, 1.4]],
              "overhead": {"plain_per_step": 9.0, "plain_per_request": 9.0, "spec_per_step": 3.0,
                           "spec_per_request": 1.0, "spec_levels": 3, "level_per_step": 0.5, "level_per_request": 0.0},
              "overhead_batches": list(sc.OVERHEAD_BATCHES), "prefill": [[32, 99.0]], "catch_up": [],
              "measured": "an earlier day"}
    add_entry(tmp_path / sc.CACHE_FILE, sc._cache_key(wb, ngram), value=cached, tag="[cost]", what="the step cost")
    target = StepCost(verify=((1, 10.0), (64, 20.0)), prefill=((32, 5.0),), measured="today",
                      overhead=sc.Overhead(plain_per_step=1.0, plain_per_request=0.5), kv=((1, 0.004), (8, 0.006)),
                      batched_tokens=((8, 1, 1.1), (8, 4, 1.3)))
    got = sc.step_cost_for(wb, ngram, cache_dir=tmp_path, log=lambda m: None, target=target)
    assert got.verify == target.verify and got.prefill == target.prefill and got.plain_ms(1) == target.plain_ms(1)
    assert got.kv == target.kv  # the context term is the target's too
    assert got.batched_tokens == target.batched_tokens  # and a batch's pace: a forward is the target's
    assert (got.overhead.spec_per_step, got.overhead.level_per_step) == (3.0, 0.5) and got.draft == ()
    assert got.measured == "an earlier day; its target part today"
    alone = sc.step_cost_for(wb, ngram, cache_dir=tmp_path, log=lambda m: None)  # no run's target: as cached
    assert alone.verify_ms(1) == 51.0 and alone.measured == "an earlier day" and alone.kv_ms(1) == 0.009


def test_the_prefill_is_timed_at_each_length_the_context_holds_and_the_catch_up_only_for_a_drafts_forward(
        wb, monkeypatch):
    import workbench.measure.step_cost as sc
    from workbench.engine.drafts.registry import parse_draft

    prefill, catch_up = sc.measure_prefill(wb, read_policy("auto").draft)  # the head: its extend over the prompt
    assert [n for n, _ in prefill] == [n for n, _ in catch_up] == list(sc.PREFILL_LENGTHS)
    assert all(ms > 0 for _, ms in prefill + catch_up)
    for source in (None, parse_draft("exit:1"), parse_draft("ngram")):  # no draft forward over the prompt
        prefill, catch_up = sc.measure_prefill(wb, source)
        assert [n for n, _ in prefill] == list(sc.PREFILL_LENGTHS) and catch_up == []
    context = wb.target.config.max_position_embeddings
    monkeypatch.setattr(sc, "PREFILL_LENGTHS", (32, context))  # a prompt the whole context long leaves no room
    prefill, _ = sc.measure_prefill(wb, None)
    assert [n for n, _ in prefill] == [32]


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


def test_the_prediction_beside_a_run_adds_each_prefill_and_splits_the_gap_into_measured_parts():
    from workbench.bench.load_prediction import predicted
    from workbench.engine.policy import OFF

    cost = StepCost(verify=((1, 10.0), (8, 20.0)), prefill=((32, 100.0), (128, 250.0)), source="given")
    prompts = [[7] * 32, [7] * 128]
    requests = [{"prompt_index": 0, "output_ids": [5] * 11}, {"prompt_index": 1, "output_ids": [5] * 21},
                {"prompt_index": 1, "output_ids": []}]  # the third was refused: no prefill, no tokens
    recs = [{"seconds": s, "requests": requests, "profile": {"prefill": {"steps": 2, "requests": 2, "wall_ms": p,
                                                                          "phases_ms": {}}}}
            for s, p in ((1.0, 300.0), (1.2, 340.0), (1.1, 320.0))]  # three rounds: wall and prefill measured
    row = {"policy": "off", "mode": "closed", "load": 2, "mean_batch": 2.0, "tau": None, "throughput_tok_s": 32 / 1.1,
           "spreads": {"throughput_tok_s": {"median": 32 / 1.1, "low": 32 / 1.2, "high": 32 / 1.0, "runs": 3}}}
    [got] = predicted([row], parse_policies("off"), {"off": cost}, runs={("closed", 2, "off"): recs}, prompts=prompts)
    decode = (10 + 20) * cost.plain_ms(2) / 2  # 30 tokens after the prefills' first, one a step, a step per 2
    assert got["model_ms"] == {"prefill": 350.0, "catch_up": 0.0, "decode": round(decode, 2)}
    assert got["closed_loop_tok_s"] == round(32 / (350 + decode) * 1e3, 2) and got["prefill_priced"]
    assert got["predicted_tok_s"] == round(cost.predict(OFF, None, 2.0).tokens_per_s, 2)  # decode steps alone
    assert got["measured_ms"] == {"prefill": 320.0, "decode": 780.0}  # the medians of the rounds
    swapped = 32 / (320 + decode) * 1e3
    assert got["with_measured_prefill_tok_s"] == round(swapped, 2)
    md = "\n".join(load_report.predicted_md({"priced_by": {"no draft": "given"}, "rows": [got]}))
    columns = f"{cost.plain_ms(2):.1f} | {got['predicted_tok_s']:.1f} | {got['closed_loop_tok_s']:.1f}"
    assert f"| 2 | `off` | 2.00 | – | – | {columns} |" in md
    assert (f"- `off` at 2 in flight: prefill 0.35 s by the model (2 requests in 2 prefill steps, as the run admitted "
            f"them), 0.32 s measured; decode {decode / 1e3:.2f} s by the "
            f"model, 0.78 s measured ({decode / 780:.2f}x). With the measured prefill in its place the model gives "
            f"{swapped:.1f} tok/s, {swapped / (32 / 1.1):.2f}x the measured 29.1 (outside the range 26.7–32.0)") in md
    assert "holds no prefill measurement" not in md
    # admitted together in one step: the second prompt saves what the probes measured of a shared step
    together = [{**r, "profile": {"prefill": {**r["profile"]["prefill"], "steps": 1}}} for r in recs]
    [one] = predicted([row], parse_policies("off"), {"off": replace(cost, prefill_joined=40.0)},
                      runs={("closed", 2, "off"): together}, prompts=prompts)
    assert one["model_ms"]["prefill"] == 310.0 and one["prefill_steps"] == 1 and one["prefill_saved_ms"] == 40.0
    assert ("prefill 0.31 s by the model (2 requests in 1 prefill step, as the run admitted them, 0.04 s saved by "
            "prompts sharing a step), 0.32 s measured") in load_report.predicted_md({"priced_by": {}, "rows": [one]})[-1]
    recs_before = [{k: v for k, v in r.items() if k != "profile"} for r in recs]  # records kept before the profile
    [old] = predicted([row], parse_policies("off"), {"off": cost}, runs={("closed", 2, "off"): recs_before},
                      prompts=prompts)
    assert old["measured_ms"] == {"prefill": None, "decode": None} and old["with_measured_prefill_tok_s"] is None
    assert "kept no engine profile" in load_report.predicted_md({"priced_by": {}, "rows": [old]})[-1]


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


def test_a_notebook_reads_a_cached_step_cost_of_an_older_format_as_it_is(wb, tmp_path, monkeypatch):
    """The lessons' ``step_cost`` reads a cached entry whose curves are at today's sizes even where
    the measuring code would time it again (no per-level overhead): the notebooks of one refresh
    read one measurement. With no readable entry it measures, as ``step_cost_for`` does."""
    import workbench.measure.step_cost as sc
    import workbench.store as store
    from workbench.cache_file import add_entry
    from workbench.lessons.predictions import step_cost

    head = read_policy("auto").draft
    good = ([(n, 10.0 + n) for n in sc.VERIFY_SIZES], [(r, 1.0) for r in sc.DRAFT_ROWS])
    older = {"verify": good[0], "draft": good[1], "overhead": {"spec_per_step": 2.0}, "measured": "an older day",
             "overhead_batches": list(sc.OVERHEAD_BATCHES), "prefill": [[32, 5.0]], "catch_up": [],
             "overhead_timing": sc.OVERHEAD_TIMING}
    assert sc._readable(older) and not sc._current(older)
    monkeypatch.setattr(store, "default_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(sc, "step_cost_for", lambda *a, **k: pytest.fail("measured again"))
    add_entry(tmp_path / sc.CACHE_FILE, sc._cache_key(wb, head), value=older, tag="[cost]", what="the step cost")
    got = step_cost(wb, head)
    assert got.measured == "an older day" and got.overhead.spec_per_step == 2.0 and got.overhead.spec_levels == 0
    (tmp_path / sc.CACHE_FILE).unlink()
    monkeypatch.setattr(sc, "step_cost_for", lambda wb, source, **k: "measured now")
    assert step_cost(wb, head) == "measured now"


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


def test_each_method_is_priced_by_its_own_draft_source_measured_once_per_source(wb, monkeypatch):
    """``step_costs`` asks ``step_cost_for`` once per distinct source of a run: methods drafting
    from the head share the head's measurement, an n-gram method is priced with no draft forward,
    ``exit:N`` with N / L of a verify; plain decoding takes a measurement the run already has."""
    import workbench.measure.step_cost as sc
    from helpers import MadeUpStepCosts

    from workbench.engine.drafts.registry import parse_draft
    from workbench.measure.methods import parse_methods

    made_up = MadeUpStepCosts()
    monkeypatch.setattr(sc, "step_cost_for", made_up)
    methods = {m.name: m.spec for m in parse_methods(
        "vanilla,linear:3,eagle2:4/3/2,eagle2:4/3/2@ngram,linear:3@exit:1,linear:2@exit:1")}
    got = sc.step_costs(wb, {name: sc.draft_of(spec) for name, spec in methods.items()})
    assert made_up.calls == [parse_draft("head"), parse_draft("ngram"), parse_draft("exit:1")]  # once each
    head, ngram = got["eagle2:4/3/2"], got["eagle2:4/3/2@ngram"]
    assert made_up.targets == [None, head, head]  # the later sources timed against the first's target part
    assert got["linear:3"] is head and got["vanilla"] is head and got["linear:2@exit:1"] is got["linear:3@exit:1"]
    tree = methods["eagle2:4/3/2"]
    assert ngram.draft == () and ngram.parts(tree, tau=2.0).draft_ms == 0.0  # the lookup runs no forward
    # the head: an extend of τ = 2 rows and 2 later levels of topk = 2 rows, 2.2 ms each on its curve
    assert head.parts(tree, tau=2.0).draft_ms == pytest.approx(3 * 2.2)
    assert head.parts(tree, tau=2.0).verify_ms == ngram.parts(tree, tau=2.0).verify_ms  # one target, one verify
    layers = wb.target.config.num_layers
    assert got["linear:3@exit:1"].draft == tuple((n, ms / layers) for n, ms in MadeUpStepCosts.VERIFY)
    assert ngram.predict(tree, 2.0).speedup > head.predict(tree, 2.0).speedup  # no draft to pay for

    known = {}
    sc.step_costs(wb, {"eagle2:4/3/2": sc.draft_of(tree)}, known=known)
    again = sc.step_costs(wb, {"linear:3": sc.draft_of(methods["linear:3"]), "vanilla": None}, known=known)
    assert made_up.calls[3:] == [parse_draft("head")] and again["vanilla"] is again["linear:3"]  # not measured twice
    made_up.calls.clear()
    assert sc.step_costs(wb, {"vanilla": None})["vanilla"].draft == () and made_up.calls == [None]  # plain alone


def test_a_source_that_cannot_be_priced_leaves_only_its_methods_out(wb, monkeypatch):
    import workbench.measure.step_cost as sc
    from helpers import MadeUpStepCosts

    from workbench.engine.config import parse_spec

    made_up = MadeUpStepCosts()

    def failing(wb, source, **kw):
        if source is not None and source.kind == "exit":
            raise RuntimeError("no engine step could be timed")
        return made_up(wb, source, **kw)

    monkeypatch.setattr(sc, "step_cost_for", failing)
    drafts = {name: sc.draft_of(parse_spec(name)) for name in ("linear:3", "linear:3@exit:1", "eagle2:4/3/2@exit:1")}
    unpriced = {}
    got = sc.step_costs(wb, drafts, unpriced=unpriced)
    assert list(got) == ["linear:3"] and set(unpriced) == {"linear:3@exit:1", "eagle2:4/3/2@exit:1"}
    assert "no engine step could be timed" in unpriced["linear:3@exit:1"]
    with pytest.raises(RuntimeError, match="no engine step"):  # without ``unpriced``, the error is the caller's
        sc.step_costs(wb, drafts)


def test_a_step_cost_measures_its_own_sources_overhead_and_draft(wb, tmp_path, monkeypatch):
    """Through ``step_cost_for`` itself (its forwards and engine steps faked, nothing timed): each
    source's overhead is measured with that source, and its draft points are its own."""
    import workbench.measure.step_cost as sc
    from workbench.engine.drafts.registry import parse_draft

    verify = [{"tokens": n, "ms": 10.0 + n} for n in sc.VERIFY_SIZES]
    monkeypatch.setattr(sc, "measure_verify_cost", lambda *a, **k: verify)
    monkeypatch.setattr(sc, "measure_draft_cost", lambda *a, rows, **k: [{"rows": r, "ms": 1.0 + r} for r in rows])
    seen = []

    timed_verify = []
    monkeypatch.setattr(sc, "measure_verify_cost", lambda *a, **k: timed_verify.append(1) or verify)
    plain_given = []

    def overhead(wb, source, forwards, prefix_len=sc.PREFIX, plain_known=False):
        seen.append(source)
        plain_given.append(plain_known)
        spec = {"head": 2.0, "ngram": 0.5, "exit": 1.0}[source.kind]
        first = {"head": 0.3, "ngram": 0.9, "exit": 0.9}[source.kind]  # what each would time on its own
        pace = {"head": 1.25, "ngram": 1.5, "exit": 1.5}[source.kind]  # a batch's forward over one sequence's
        flat = lambda ms, tokens: {b: [(ms, pace * tokens if b > 1 else None, tokens)]  # noqa: E731
                                   for b in sc.OVERHEAD_BATCHES}
        return {**({} if plain_known else {"plain": flat(first, 1)}), "tree": flat(spec, 4), "chain": flat(spec, 2)}

    monkeypatch.setattr(sc, "time_overhead_steps", overhead)
    drafts = {"eagle2:4/3/2": parse_draft("head"), "eagle2:4/3/2@ngram": parse_draft("ngram"),
              "linear:3@exit:1": parse_draft("exit:1")}
    got = sc.step_costs(wb, drafts, cache_dir=tmp_path, log=lambda m: None)
    assert seen == [s for s in drafts.values() for _ in range(sc.ROUNDS)]  # each source's own engine steps
    # the verify curve and plain decoding timed once, with the first source; the others reuse them
    assert len(timed_verify) == sc.ROUNDS and plain_given[: sc.ROUNDS] == [False] * sc.ROUNDS
    assert all(plain_given[sc.ROUNDS:])
    assert {got[name].overhead.plain_per_step for name in drafts} == {0.3}
    assert {got[name].verify for name in drafts} == {got["eagle2:4/3/2"].verify}
    # the batches' forward pace is the target's too, timed with the first source's steps
    assert {got[name].batched for name in drafts} == {tuple((b, 2.5) for b in sc.OVERHEAD_BATCHES if b > 1)}
    assert {got[name].batched_tokens for name in drafts} == {tuple((b, t, 1.25 * t) for b in sc.OVERHEAD_BATCHES
                                                                   if b > 1 for t in (1, 2, 4))}
    assert got["eagle2:4/3/2"].draft == tuple((r, 1.0 + r) for r in sc.DRAFT_ROWS)
    assert got["eagle2:4/3/2"].overhead.spec_per_step == 2.0
    assert got["eagle2:4/3/2@ngram"].draft == () and got["eagle2:4/3/2@ngram"].overhead.spec_per_step == 0.5
    layers = wb.target.config.num_layers
    assert got["linear:3@exit:1"].draft == tuple((n, (10.0 + n) / layers) for n in sc.VERIFY_SIZES)
    labels = sc.priced_by(drafts, got)
    assert list(labels) == ["head", "ngram:1-12", "exit:1"]
    assert all(label.endswith("(measured on this machine)") for label in labels.values())


def test_the_load_report_prices_each_policy_by_its_own_draft_source(monkeypatch):
    """``report_costs`` measures the head and the n-gram lookup once each; the n-gram setting's
    predicted tokens/s comes from a step with no draft forward, and the table says which source
    priced each row."""
    import workbench.measure.step_cost as sc
    from helpers import MadeUpStepCosts
    from workbench.bench.load_prediction import predicted

    made_up = MadeUpStepCosts()
    monkeypatch.setattr(sc, "step_cost_for", made_up)
    wb = SimpleNamespace(target=SimpleNamespace(config=SimpleNamespace(num_layers=4)))
    policies = parse_policies("off,eagle2:4/3/2,eagle2:4/3/2@ngram,linear:2,adaptive")
    models, priced = load_run.report_costs(wb, policies, {}, log=lambda m: None)
    assert [s.kind for s in made_up.calls] == ["head", "ngram"] and "adaptive" not in models  # several settings
    assert priced == {"no draft": "made up for head (made up)", "head": "made up for head (made up)",
                      "ngram:1-12": "made up for ngram:1-12 (made up)"}
    rows = [{**_row(p, 2, (30, 28, 32), (60, 55, 65)), "mean_batch": 2.0, "throughput_tok_s": 30.0,
             "tau": None if p == "off" else 2.0} for p in ("off", "eagle2:4/3/2", "eagle2:4/3/2@ngram")]
    recs = [{"seconds": 1.0, "requests": [{"prompt_index": 0, "output_ids": [5] * 11}]}] * 3
    runs = {("closed", 2, r["policy"]): recs for r in rows}
    got = {r["policy"]: r for r in predicted(rows, policies, models, runs=runs, prompts=[[1] * 10])}
    tree = policies[1].settings()[0]
    assert got["eagle2:4/3/2@ngram"]["step_ms"] == round(models["eagle2:4/3/2@ngram"].parts(tree, 2, 2.0).total_ms, 2)
    assert got["eagle2:4/3/2@ngram"]["step_ms"] < got["eagle2:4/3/2"]["step_ms"]  # no draft forward to pay
    assert got["eagle2:4/3/2@ngram"]["draft"] == "ngram:1-12" and got["off"]["draft"] == "no draft"
    md = "\n".join(load_report.predicted_md({"priced_by": priced, "rows": list(got.values())}))
    assert "| with prefill / measured | priced by |" in md and "| `ngram:1-12` |" in md
    assert "`head`: made up for head (made up); `ngram:1-12`: made up for ngram:1-12 (made up)" in md
    alone = predicted(rows[:2], policies, models, runs=runs, prompts=[[1] * 10])  # one source: no column
    assert "priced by |" not in "\n".join(load_report.predicted_md({"priced_by": priced, "rows": alone}))


def test_the_load_report_lists_each_step_costs_overhead_context_term_and_batch_pace():
    """One line per distinct measurement behind the predictions: its overhead lines, its context
    term and what a batch's forward took over one sequence's; a record kept before the batch
    pace was measured says nothing of it."""
    from dataclasses import replace

    from workbench.bench.load_report import step_cost_md
    from workbench.cost_model import Overhead

    cost = replace(FLAT_COST, measured="today", overhead=Overhead(plain_per_step=0.2, plain_per_request=0.03),
                   kv=((1, 0.0075),), batched=((4, 1.19), (8, 1.32)))
    lines = step_cost_md({"off": cost.as_dict(), "eagle2:4/3/2": cost.as_dict()})
    (line,) = [x for x in lines if x.startswith("- ")]
    assert line.startswith("- `off`, `eagle2:4/3/2`: today") and "plain 0.2 + 0.0·B" in line
    assert "µs a step by the new tokens it brings: 1: 7.5" in line
    assert "1.19x at B = 4, 1.32x at B = 8" in line
    older = {k: v for k, v in cost.as_dict().items() if k != "batched"}
    assert "at B = 8" not in "".join(step_cost_md({"off": older}))


def test_an_engine_says_its_last_steps_phase_times(wb):
    """``Engine.last_phases_ms``: empty before a step, the last step's phases after one (a plain
    step: its forward and logits among them), a copy the caller may keep."""
    from workbench.engine.config import SpecConfig
    from workbench.engine.timings import target_ms

    engine = wb.engine(SpecConfig("vanilla"))
    assert engine.last_phases_ms == {}
    engine.stop_ids = set()  # a random model may sample a stop token at once: keep the request running
    engine.add_requests([[5, 6, 7]], 8)
    engine.step()  # the prefill
    assert set(engine.last_phases_ms) == {"prefill_ms"}
    engine.step()
    got = engine.last_phases_ms
    assert {"decode_ms", "logits_ms"} <= set(got) and target_ms(got) > 0
    got.clear()
    assert engine.last_phases_ms  # the engine's own record is untouched


def test_a_rows_decode_step_is_set_beside_the_engines_clock_part_by_part():
    """``step_parts``: the model's forward, draft and rest of a step beside each round's engine
    profile per step (the median over the rounds); none where a policy ran several settings or a
    record kept no profile; the report's gap line says both."""
    from workbench.bench.load_prediction import step_parts
    from workbench.bench.load_report import _parts_said
    from workbench.cost_model import StepParts

    def rec(wall, verify, extend):
        return {"profile": {"prefill": {"steps": 2, "requests": 2, "wall_ms": 500.0, "phases_ms": {"prefill_ms": 500.0}},
                            "linear:1": {"steps": 10, "requests": 80, "wall_ms": wall,
                                         "phases_ms": {"draft_extend_ms": extend, "draft_tree_ms": 10.0,
                                                       "verify_ms": verify, "logits_ms": 50.0}}}}

    parts = StepParts(verify_ms=77.0, draft_extend_ms=2.0, draft_levels_ms=0.5, overhead_ms=3.0)
    got = step_parts(parts, [rec(1000.0, 850.0, 60.0), rec(1200.0, 1000.0, 80.0), rec(1100.0, 900.0, 70.0)])
    assert got["model"] == {"forward": 77.0, "draft": 2.5, "rest": 3.0}
    # per step: forward (verify + logits) 90, 105, 95; draft 7, 9, 8; rest 3, 6, 7 -> medians
    assert got["measured"] == {"forward": 95.0, "draft": 8.0, "rest": 6.0}
    assert "target forward and logits 77.0 against 95.0 ms, draft (its catch-up over the prompts included, a " \
        "step's share) 2.5 against 8.0 ms" in _parts_said(got)
    # the model's catch-up over the prompts, a step's share, joins its draft: the engine's draft clock holds it
    assert step_parts(parts, [rec(1000.0, 850.0, 60.0)], catch_up_ms=1.5)["model"]["draft"] == 4.0
    two = rec(1000.0, 850.0, 60.0)
    two["profile"]["off"] = {"steps": 5, "requests": 40, "wall_ms": 300.0, "phases_ms": {"decode_ms": 280.0}}
    assert step_parts(parts, [two]) is None and step_parts(parts, [{"seconds": 1.0}]) is None
    assert _parts_said(None) == ""


def test_a_rows_model_draft_holds_its_catch_up_a_steps_share():
    """``row_prediction``: the model's catch-up over the prompts, spread over its decode steps,
    joins the draft its gap line sets beside the engine's draft clock (which holds it)."""
    from workbench.bench.load_prediction import row_prediction
    from workbench.cost_model import StepCost
    from workbench.engine.config import SpecConfig

    cost = StepCost(((1, 10.0), (2, 12.0), (4, 16.0)), ((1, 1.0), (2, 1.5), (4, 2.0)),
                    prefill=((4, 20.0), (8, 30.0)), catch_up=((4, 3.0), (8, 5.0)))
    spec = SpecConfig.linear(1)
    profile = {"prefill": {"steps": 2, "requests": 2, "wall_ms": 50.0, "phases_ms": {"prefill_ms": 50.0}},
               "linear:1": {"steps": 8, "requests": 8, "wall_ms": 120.0,
                            "phases_ms": {"draft_extend_ms": 16.0, "verify_ms": 90.0, "logits_ms": 4.0}}}
    requests = [{"prompt_index": i, "output_ids": [7] * 9} for i in range(2)]
    recs = [{"seconds": 0.17, "requests": requests, "profile": profile}]
    row = {"policy": "linear:1", "load": 1, "mean_batch": 1.0, "tau": 2.0, "mode": "closed",
           "throughput_tok_s": 100.0, "spreads": {"throughput_tok_s": {"low": 90.0, "high": 110.0}}}
    got = row_prediction(row, spec, cost, recs=recs, prompts=[[1] * 4, [1] * 8])
    step = cost.parts(spec, 1.0, 2.0)
    catch_up = cost.catch_up_ms(4, 2.0) + cost.catch_up_ms(8, 2.0)  # 1.5 and 3.5 beyond a step's extend
    steps = 2 * 8 / 2.0  # each request's 8 decode tokens at τ = 2, one request a step
    assert got["model_ms"]["catch_up"] == pytest.approx(catch_up)
    assert got["step_parts"]["model"]["draft"] == pytest.approx(step.draft_ms + catch_up / steps, abs=0.01)
    assert got["step_parts"]["measured"]["draft"] == 2.0  # 16 ms over 8 steps
