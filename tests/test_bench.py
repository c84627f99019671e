"""The Spec-Bench benchmark: its numbers (speedup, tau, per-depth acceptance, equality), the
question subsets, the transformers baselines counted like our engine, and the whole suite end to
end on a tiny model (random draft head, a few prompts, a few tokens)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

import torch

from workbench.measure import floor as floor_mod
from workbench.measure import metrics, specbench
from workbench.bench import report, tune
from workbench.measure.hf_baselines import hf_generate, load_hf_model
from workbench.bench.suite import parse_methods


def _rec(qid: int, tokens: int, seconds: float, outputs=None, lengths=None, task: str = "qa") -> dict:
    r = {"question_id": qid, "task": task, "new_tokens": tokens, "seconds": seconds, "output_ids": outputs or [[qid]]}
    if lengths is not None:
        r["accept_lengths"] = lengths
    return r


# ---- numbers ----------------------------------------------------------------------------------
def test_speedup_is_mean_speed_over_baseline_mean_speed():
    method = [_rec(1, 100, 10.0), _rec(2, 60, 2.0)]  # 10 and 30 tok/s
    base = [_rec(2, 60, 6.0), _rec(1, 50, 10.0)]  # 10 and 5 tok/s, other order: matched by question id
    assert metrics.speed(method) == pytest.approx(20.0)
    assert metrics.speedup(method, base) == pytest.approx(20.0 / 7.5)  # Spec-Bench: ratio of the means
    assert metrics.speedup_mean_of_ratios(method, base) == pytest.approx((10 / 5 + 30 / 10) / 2)
    with pytest.raises(ValueError):
        metrics.speedup(method, [_rec(9, 1, 1.0)])


def test_per_depth_acceptance_from_the_walk_and_tau_from_what_was_emitted():
    accepted = [0, 1, 2, 2, 3]  # drafts each step's walk accepted
    # depth 1: 4 of 5 steps; depth 2: 3 of those 4; depth 3: 1 of those 3
    assert metrics.per_depth_acceptance(accepted, 3) == pytest.approx([4 / 5, 3 / 4, 1 / 3])
    assert metrics.per_depth_acceptance([0, 0], 3) == [0.0, None, None]
    # the end of the first turn cut its last step (walk 2 + bonus, 1 token emitted): τ counts the 1,
    # per-depth acceptance the walk's 2
    recs = [_rec(1, 0, 1.0, lengths=[[1, 2], [1]]), _rec(2, 0, 1.0, lengths=[[3, 4]])]
    recs[0]["drafts_accepted"], recs[1]["drafts_accepted"] = [[0, 1], [2]], [[2, 3]]
    assert metrics.accept_lengths(recs) == [1, 2, 1, 3, 4]
    assert metrics.accept_lengths(recs, first_turn_only=True) == [1, 2, 3, 4]
    assert metrics.drafts_accepted(recs) == accepted
    assert metrics.drafts_accepted(recs, first_turn_only=True) == [0, 1, 2, 3]
    assert metrics.tau(metrics.accept_lengths(recs)) == pytest.approx(11 / 5)
    assert metrics.tau([]) is None


def test_equal_fraction_compares_every_turn():
    base = [_rec(1, 2, 1.0, [[5, 6], [7]]), _rec(2, 1, 1.0, [[8]])]
    assert metrics.equal_fraction([_rec(1, 2, 1.0, [[5, 6], [7]]), _rec(2, 1, 1.0, [[8]])], base) == 1.0
    assert metrics.equal_fraction([_rec(1, 2, 1.0, [[5, 6], [9]]), _rec(2, 1, 1.0, [[8]])], base) == 0.5


# ---- questions, methods, trees ----------------------------------------------------------------
def test_subsets():
    qs = specbench.load_questions()
    assert len(qs) == 480
    quick = specbench.select(qs, "quick")
    assert [q.task for q in quick] == ["mt_bench", *specbench.TASKS[1:]]
    assert all(len(q.turns) == 1 for q in quick)
    two = specbench.select(qs, "quick", per_category=2)
    assert len(two) == 12 and [q.category for q in two[:2]] == ["writing", "roleplay"]  # MT-bench goes round
    mt = specbench.select(qs, "mtbench")
    assert len(mt) == 80 and {q.task for q in mt} == {"mt_bench"} and all(len(q.turns) == 1 for q in mt)
    one_each = specbench.select(qs, "mtbench", per_category=1)
    assert {q.category for q in one_each} == set(specbench.MT_BENCH_CATEGORIES) and len(one_each) == 8
    every = specbench.select(qs, "all")
    assert {q.task for q in every} == set(specbench.TASKS)
    assert all(len(q.turns) == 2 for q in every if q.task == "mt_bench")


def test_method_names_and_trees():
    spec = tune.tree_from_name("60/6/10")
    assert (spec.num_draft_tokens, spec.num_steps, spec.topk) == (60, 6, 10)
    names = [m.name for m in parse_methods("vanilla,linear:3,eagle2:8/5/4,eagle2:best,static:8,hf-greedy,hf-pld")]
    assert names == ["vanilla", "linear:3", "eagle2:8/5/4", "static:8", "hf-greedy", "hf-pld"]  # best unknown: out
    assert parse_methods("static:16")[0].spec.num_draft_tokens == 16
    for bad in ("eagle2:8/5", "medusa", "vanilla,vanilla", "linear:x", "static:x", "static:1"):
        with pytest.raises(ValueError):
            parse_methods(bad)


def test_tree_prediction_uses_the_cost_curves():
    from workbench.cost_model import Overhead, StepCost

    forwards = StepCost(verify=((1, 10.0), (9, 30.0)), draft=((1, 1.0), (4, 4.0)))
    pred = tune.predict(forwards, tune.tree_from_name("5/3/2"))
    # at the bound (τ = 4): the extend over 4 rows, 2 later levels of 2 rows, a verify of 5
    assert pred["step_ms"] == pytest.approx(4.0 + 2 * 2.0 + 20.0)
    assert pred["bound"] == pytest.approx(4 * 10.0 / 28.0, abs=1e-3)
    with_overhead = tune.predict(replace(forwards, overhead=Overhead(plain_per_step=1.0, spec_per_step=3.0)),
                                 tune.tree_from_name("5/3/2"))
    assert with_overhead["overhead_ms"] == 3.0 and with_overhead["step_ms"] == pytest.approx(31.0)
    assert with_overhead["bound"] == pytest.approx(4 * 11.0 / 31.0, abs=1e-3)  # plain decoding pays its own


def test_the_report_prices_each_method_by_its_own_draft_source(made_up_step_costs):
    """``suite.price`` gives each speculative method its own source's step cost (one measurement per
    source); the report's prediction of the n-gram method has no draft forward, the head's has
    the head's and ``exit:1`` the exit's, and the table names the source of each row."""
    from workbench.bench import suite

    methods = parse_methods("vanilla,eagle2:4/3/2,linear:3,eagle2:4/3/2@ngram,linear:3@exit:1")
    wb = SimpleNamespace(target=SimpleNamespace(config=SimpleNamespace(num_layers=4)))
    priced = suite.price(wb, methods, {}, log=lambda m: None)
    assert [s.name for s in made_up_step_costs.calls] == ["head", "ngram:1-12", "exit:1"]
    assert set(priced["methods"]) == {m.name for m in methods if m.speculative}  # vanilla is not predicted
    summary = {m.name: {"tau": 1.5, "speedup_vs_vanilla": 1.1} for m in methods if m.speculative}
    rows = {r["method"]: r for r in report.predicted_rows({"summary": summary, "step_costs": priced})}
    specs = {m.name: m.spec for m in methods}
    for name, r in rows.items():  # each at its own step cost, built from the source's own draft points
        expect = made_up_step_costs(wb, specs[name].draft).predict(specs[name], 1.5)
        assert r["predicted"] == round(expect.speedup, 3) and r["step_ms"] == round(expect.parts.total_ms, 2)
    ngram, head, exit_ = rows["eagle2:4/3/2@ngram"], rows["eagle2:4/3/2"], rows["linear:3@exit:1"]
    assert ngram["draft_extend_ms"] + ngram["draft_levels_ms"] == 0.0 < head["draft_extend_ms"]
    assert ngram["verify_ms"] == head["verify_ms"] and ngram["predicted"] > head["predicted"]
    # exit:1 of 4 layers: a quarter of a verify of as many rows, at the extend's 1.5 and the two later levels' 1
    assert exit_["draft_extend_ms"] == round(10.25 / 4, 2) and exit_["draft_levels_ms"] == round(2 * 10.0 / 4, 2)
    assert rows["linear:3"]["measurement"] == head["measurement"] == "made up for head (made up)"
    table = report._predicted_table({"summary": summary, "step_costs": priced})
    assert "| gap | priced by |" in table and "| `exit:1` |" in table and "| `ngram:1-12` |" in table
    for source in ("head", "ngram:1-12", "exit:1"):
        assert f"`{source}`: made up for {source} (made up)" in table
    one = {"eagle2:4/3/2": summary["eagle2:4/3/2"]}  # one source: no column, the measurement named below
    alone = report._predicted_table({"summary": one, "step_costs": priced})
    assert "priced by |" not in alone and "`head`: made up for head (made up)" in alone
    assert report.predicted_rows({"summary": summary}) == []  # a result without step costs predicts nothing


# ---- on a tiny model --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from workbench.testing.tiny import make_tiny_app_model

    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-bench"))


def test_hf_baselines_count_tokens_like_our_engine(tiny_dir):
    import torch

    from workbench.engine.config import SpecConfig
    from workbench.engine.engine import Engine
    from workbench.engine.sampling import SamplingParams
    from workbench.pipeline import Workbench

    wb = Workbench.load(str(tiny_dir), "random", dtype="fp32")
    hf = load_hf_model(tiny_dir, torch.float32)
    prompt = wb.encode("tell me about the cat")
    free = Engine(wb.target, None, SpecConfig("vanilla"), sampling=SamplingParams(), stop_ids=())
    free.add_requests([prompt], 12)
    full = free.run()[0].output_ids
    stop = full[4]  # pretend this token ends a turn: both must stop right after it, and count it
    cut = full[: full.index(stop) + 1]
    ours = Engine(wb.target, None, SpecConfig("vanilla"), sampling=SamplingParams(), stop_ids=(stop,))
    ours.add_requests([prompt], 12)
    assert ours.run()[0].output_ids == cut
    assert hf_generate(hf, prompt, max_new_tokens=12, stop_ids=(stop,)).output_ids == cut
    assert hf_generate(hf, prompt, max_new_tokens=12, stop_ids=(stop,), prompt_lookup=3).output_ids == cut
    assert hf_generate(hf, prompt, max_new_tokens=12,
                       stop_ids=(999,)).output_ids == full  # no stop: max_new_tokens, all counted


def test_hf_baselines_read_the_clock_after_a_cuda_sync(monkeypatch):
    """CUDA is asynchronous: ``generate`` is timed between two syncs (a fake CUDA model here)."""
    import torch

    from workbench.measure import cost, hf_baselines

    events = []

    class FakeModel:
        device = torch.device("cuda", 0)

        def generate(self, ids, **kw):
            events.append("generate")
            return torch.cat([ids, torch.tensor([[7, 2]])], dim=1)

    monkeypatch.setattr(torch, "tensor", lambda data, **kw: torch.as_tensor(data))  # keep the ids on the CPU
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: events.append("sync"))
    monkeypatch.setattr(cost.time, "perf_counter", lambda: events.append("clock") or float(len(events)))
    assert hf_baselines.hf_generate(FakeModel(), [5, 6], max_new_tokens=4, stop_ids=(2,)).output_ids == [7, 2]
    assert events == ["sync", "clock", "generate", "sync", "clock"]


def test_weight_bytes_reads_a_tied_table_once_and_skips_an_untied_embedding():
    from torch import nn

    class Target(nn.Module):
        def __init__(self, tied: bool):
            super().__init__()
            self.model = nn.Module()
            self.model.embed_tokens = nn.Embedding(10, 4)
            self.lm_head = nn.Linear(4, 10, bias=False)
            self.norm = nn.Parameter(torch.ones(4))
            if tied:
                self.lm_head.weight = self.model.embed_tokens.weight

    # tied: the table is the lm_head, read whole once; untied: the lm_head read, the table not
    assert floor_mod.weight_bytes(Target(tied=True)) == (40 + 4) * 4
    assert floor_mod.weight_bytes(Target(tied=False)) == (40 + 4) * 4


def test_floor_line_is_empty_without_a_floor():
    assert report.floor_line({"decode_ms": 1.0, "verify": []}) == ""


def test_tuner_measures_and_picks_a_tree(tiny_dir):
    from workbench.cost_model import StepCost
    from workbench.pipeline import Workbench

    wb = Workbench.load(str(tiny_dir), "random", dtype="fp32")
    costs = tune.measure_costs(wb, prefix_len=16, repeats=1)
    assert [c["tokens"] for c in costs["verify"]] == list(tune.VERIFY_SIZES)
    assert all(c["lo"] <= c["ms"] <= c["hi"] for c in costs["verify"])
    floor = costs["floor"]
    assert floor["weights_mb"] == round(floor_mod.weight_bytes(wb.target) / 2**20, 1) > 0
    assert floor["floor_ms_lo"] <= floor["floor_ms"] <= floor["floor_ms_hi"]
    text = report.floor_line(costs, {"vanilla": {"tokens_per_s": 1e3 / (2 * floor["floor_ms"])}})
    assert f"{floor['floor_ms']:.1f} ms per decode step" in text and "(2.00x)" in text
    # which trees are tried depends on the step cost of their draft source (the head's, given here:
    # nothing measured); flat costs (a GPU-like verify) keep both
    flat = StepCost(verify=tuple((n, 1.0) for n in tune.VERIFY_SIZES), draft=tuple((r, 0.01) for r in tune.DRAFT_ROWS),
                    measured="made up")
    head = tune.tree_from_name("4/2/2").draft
    res = tune.search(wb, grid=("4/2/2", "6/3/2"), max_new_tokens=6, known={head: flat})
    assert res["best"] in {"4/2/2", "6/3/2"} and len(res["trees"]) == 2
    assert res["priced_by"] == {"head": "made up (given)"}
    assert all(t["bound"] == tune.predict(flat, tune.tree_from_name(t["tree"]))["bound"] for t in res["trees"])
    assert res["best"] == max(res["trees"], key=lambda t: t["tokens_per_s"])["tree"]


@pytest.fixture
def made_up_step_costs(monkeypatch):
    """The suite's step costs made up (``helpers.MadeUpStepCosts``): nothing timed, nothing cached."""
    from helpers import MadeUpStepCosts

    made_up = MadeUpStepCosts()
    monkeypatch.setattr("workbench.measure.step_cost.step_cost_for", made_up)
    return made_up


def test_suite_end_to_end_on_a_tiny_model(tiny_dir, tmp_path, made_up_step_costs):
    from workbench.cli import main

    out = tmp_path / "out"
    methods = "vanilla,linear:3,eagle2:8/3/2,eagle2:best,linear:3@ngram,hf-greedy,hf-pld"
    rc = main(["bench", "--target", str(tiny_dir), "--draft", "random", "--dtype", "fp32", "--limit", "2",
               "--max-new-tokens", "6", "--methods", methods, "--best", "6/3/2", "--tau-questions", "1",
               "--threads", "1", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert set(res) >= {"meta", "costs", "best_tree", "methods", "summary", "records", "records_t1"}
    assert res["best_tree"] == "6/3/2" and res["meta"]["questions"] == 2
    meta = res["meta"]  # the record says where it came from (docs/bench/README.md)
    assert {"command", "commit", "date", "dtype", "threads", "machine"} <= set(meta) and meta["threads"] == 1
    assert meta["machine"]["cpu"] and meta["dtype"] == "fp32" and meta["draft"].startswith("random")
    assert list(res["summary"]) == methods.split(",")
    for name, s in res["summary"].items():
        assert {"tokens_per_s", "speedup_vs_vanilla", "speedup_vs_hf_greedy", "equal_to_vanilla", "per_task"} <= set(s)
        assert s["equal_to_vanilla"] == 1.0, name  # fp32: every method reproduces greedy decoding
        assert len(res["records"][name]) == 2
    for name in ("linear:3", "eagle2:8/3/2", "eagle2:best"):
        s = res["summary"][name]
        assert s["tau"] >= 1.0 and s["tau_t1"] >= 1.0 and len(s["per_depth"]) == 3
        for rec in res["records"][name] + res["records_t1"][name]:  # τ counts what each verify step emitted
            for ids, lengths, accepted in zip(rec["output_ids"], rec["accept_lengths"], rec["drafts_accepted"],
                                              strict=True):
                assert sum(lengths) == len(ids) - 1 and len(lengths) == len(accepted)
                assert [a - 1 for a in lengths[:-1]] == accepted[:-1] and lengths[-1] <= accepted[-1] + 1
    assert res["summary"]["vanilla"]["speedup_vs_vanilla"] == 1.0
    assert [c["tokens"] for c in res["costs"]["verify"]][:2] == [1, 2]
    md = (out / "report.md").read_text()
    assert "| `eagle2:best` |" in md and "## Verify cost" in md
    predicted = {r["method"]: r for r in report.predicted_rows(res)}  # the one cost model at each method's τ
    assert "eagle2:best" in predicted and "vanilla" not in predicted
    row = predicted["eagle2:best"]
    assert row["measured"] == res["summary"]["eagle2:best"]["speedup_vs_vanilla"] and row["tau"] == res["summary"]["eagle2:best"]["tau"]
    assert row["gap"] == pytest.approx(row["measured"] - row["predicted"], abs=1e-3)
    assert "## Predicted beside measured" in md and f"| {row['predicted']:.2f}x | {row['measured']:.2f}x |" in md
    # each method priced by its own draft source's step cost, one measurement per source
    assert [source.name for source in made_up_step_costs.calls] == ["head", "ngram:1-12"]
    assert predicted["linear:3@ngram"]["draft"] == "ngram:1-12" and predicted["linear:3"]["draft"] == "head"
    assert predicted["linear:3@ngram"]["draft_extend_ms"] == predicted["linear:3@ngram"]["draft_levels_ms"] == 0.0
    assert predicted["linear:3"]["draft_extend_ms"] > 0 and predicted["linear:3"]["draft_levels_ms"] > 0
    assert res["step_costs"]["priced_by"] == {"head": "made up for head (made up)",
                                              "ngram:1-12": "made up for ngram:1-12 (made up)"}
    # each priced at the run's own forwards: a probe after each question's turn of the methods
    assert len(res["probes"]) == 2 and {p["question_id"] for p in res["probes"]} == {r["question_id"] for r in
                                                                                   res["records"]["vanilla"]}
    probed = "the run's own forwards (2 probes between its timed runs), the overhead of made up for"
    assert predicted["linear:3@ngram"]["measurement"] == f"{probed} ngram:1-12 (made up)"
    assert "| gap | priced by |" in md and f"`ngram:1-12`: {probed} ngram:1-12 (made up)" in md
    assert "| `vanilla` | 1 |" in md and "predicted tok/s | measured tok/s |" in md
    assert f"{meta['date']}, commit {meta['commit'] or 'not recorded'}, " in md and "1 torch threads" in md
    page = (out / "figures.html").read_text()
    assert page.count("plotly-graph-div") >= 5 and "Verify cost" in page


def test_rounds_interleave_the_methods_and_every_figure_is_the_rounds_median(tiny_dir, tmp_path, made_up_step_costs):
    """``--rounds 3``: every method runs every question in each round, the turn of the methods
    started one place later each round; a figure is the median of the rounds' (each speedup paired
    within its round), every round's kept, and the report shows the range and what it settles."""
    from statistics import median

    from workbench.cli import main

    out = tmp_path / "out"
    methods = ["vanilla", "linear:2", "eagle2:4/2/2"]
    rc = main(["bench", "--target", str(tiny_dir), "--draft", "random", "--dtype", "fp32", "--limit", "2",
               "--max-new-tokens", "5", "--methods", ",".join(methods), "--no-temperature-tau", "--rounds", "3",
               "--calibration", "none", "--threads", "1", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["rounds"] == 3
    lines = [json.loads(x)["result"] for x in (out / "records.jsonl").read_text().splitlines() if '"result"' in x]
    order = [(r["phase"], r["method"]) for r in lines if r["question_id"] == lines[0]["question_id"]]
    assert order == [("t0", m) for m in methods] + [("t0#2", m) for m in methods[1:] + methods[:1]] + \
        [("t0#3", m) for m in methods[2:] + methods[:2]]
    # a probe of the target's part after each question's turn of the methods, each round
    lines = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    kinds = [("probe", ln["probe"]["phase"]) if "probe" in ln else ("result", ln["result"]["phase"])
             for ln in lines if {"probe", "result"} & set(ln)]
    for phase in ("t0", "t0#2", "t0#3"):
        at = [k for k in kinds if k[1] == phase]
        assert at == ([("result", phase)] * 3 + [("probe", phase)]) * 2
    assert len(res["probes"]) == 6  # 2 questions x 3 rounds
    rounds = [res["records"]] + [  # each later round: the first round's tokens at that round's seconds
        {name: [{**rec, "seconds": t["seconds"]} for rec, t in zip(res["records"][name], res["rounds_seconds"][name][r])]
         for name in methods} for r in range(2)]
    for name in methods:
        s = res["summary"][name]
        speeds = [metrics.speed(rnd[name]) for rnd in rounds]
        ups = [metrics.speedup(rnd[name], rnd["vanilla"]) for rnd in rounds]
        assert s["rounds"]["runs"] == 3 and s["rounds"]["tokens_per_s"] == pytest.approx(speeds, abs=1e-3)
        assert s["tokens_per_s"] == pytest.approx(median(speeds), abs=0.01)
        assert s["rounds"]["speedup_vs_vanilla"] == pytest.approx(ups, abs=1e-3)
        assert s["speedup_vs_vanilla"] == pytest.approx(median(ups), abs=1e-3)
    md = (out / "report.md").read_text()
    s = res["summary"]["linear:2"]
    lo, hi = min(s["rounds"]["speedup_vs_vanilla"]), max(s["rounds"]["speedup_vs_vanilla"])
    assert f"| {s['speedup_vs_vanilla']:.2f}x ({lo:.2f}–{hi:.2f}x) |" in md and "Over 3 rounds" in md
    assert "τ at T=1 not measured in this run: `--no-temperature-tau`" in md and "on 0 questions" not in md
    assert "inside the rounds' range of the measured one for" in md
    row = next(r for r in report.predicted_rows(res) if r["method"] == "linear:2")
    assert row["measured_range"] == pytest.approx([lo, hi]) and row["inside"] == (lo <= row["predicted"] <= hi)
    # the step columns at the mean context the method's decode steps read, as the engine's steps ran
    context = report.turns_context(res["records"]["linear:2"])
    spec = parse_methods("linear:2", None)[0].spec
    model = report.pricing_model(res, "linear:2", spec)
    nodes = report.verified_mix(res["records"]["linear:2"])
    assert row["context"] == pytest.approx(context, abs=0.05) and context > 0
    assert row["verify_ms"] == pytest.approx(model.parts(spec, 1, s["tau"], nodes, context=context).verify_ms, abs=0.01)
    plain_context = report.turns_context(res["records"]["vanilla"])
    assert row["plain_step_ms"] == pytest.approx(model.plain_ms(1, plain_context), abs=0.01)
    # whole turns predicted in tokens/s too, beside the rounds' range, plain decoding's included
    speeds = s["rounds"]["tokens_per_s"]
    assert row["measured_range_tok_s"] == pytest.approx([min(speeds), max(speeds)])
    assert row["inside_tok_s"] == (min(speeds) <= row["predicted_tok_s"] <= max(speeds))
    assert "The predicted tokens/s lies inside the rounds' range of the measured for" in md
    assert "of 3 settings (plain decoding included)" in md
    # the count inside weighed against chance: three rounds hold a spread's median 75 % of the time
    ranged = [r for r in report.predicted_rows(res)] + [report.plain_row(res, report.predicted_rows(res))]
    over = sum(r["predicted_tok_s"] > r["measured_tok_s"] for r in ranged)
    under = sum(r["predicted_tok_s"] < r["measured_tok_s"] for r in ranged)
    assert (f"(plain decoding included): {over} above the measured median and {under} below; the range of 3 rounds "
            "holds the median of the spread they are drawn from with chance 1 − 2·0.5^3 = 75%, so predictions with "
            f"no error would lie inside about 2.2 of 3 times (here: {sum(r['inside_tok_s'] for r in ranged)})") in md
    # the step profile sums every round's steps (the speedups beside it are the rounds' medians)
    steps = res["summary"]["linear:2"]["step_profile"]
    first = metrics.step_profile(res["records"]["linear:2"])
    assert sum(v["steps"] for v in steps.values()) > sum(v["steps"] for v in first.values())

    # --report-only writes the report again from the run's own records, timing nothing
    before = json.loads((out / "results.json").read_text())
    assert main(["bench", "--report-only", "--out", str(out)]) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["summary"] == before["summary"] and again["probes"] == before["probes"]
    assert again["meta"]["wall_s"] == before["meta"]["wall_s"] and again["meta"]["rendered"]["date"]
    assert "**Report written again**" in (out / "report.md").read_text()
    assert main(["bench", "--report-only", "--out", str(tmp_path / "nothing")]) == 2  # no run there: one line


def _summary(**speedups) -> dict:
    """A made-up summary of three rounds: plain decoding at 10 tokens/s every round, each method
    at the given per-round speedups."""
    out = {"vanilla": {"tokens_per_s": 10.0, "speedup_vs_vanilla": 1.0,
                       "rounds": {"runs": 3, "tokens_per_s": [10.0, 10.0, 10.0], "speedup_vs_vanilla": [1.0] * 3}}}
    for name, ups in speedups.items():
        out[name.replace("_", ":")] = {"tau": 1.5, "tokens_per_s": 10 * sorted(ups)[1], "speedup_vs_vanilla": sorted(ups)[1],
                                       "rounds": {"runs": 3, "tokens_per_s": [10 * u for u in ups],
                                                  "speedup_vs_vanilla": list(ups)}}
    return out


def test_the_rounds_verdict_names_a_side_only_where_every_round_is_on_it():
    said = report.rounds_verdict(_summary(linear_1=(1.1, 1.3, 1.2), linear_3=(0.9, 1.1, 1.0), static_8=(0.7, 0.8, 0.9)))
    assert "clear above it in every round: `linear:1` (1.10–1.30x)" in said
    assert "level with it (its rounds on both sides of 1): `linear:3` (0.90–1.10x)" in said
    assert "clear below it in every round: `static:8` (0.70–0.90x)" in said
    assert "fastest by median `linear:1`, level within noise with `linear:3`" in said  # 11-13 against 9-11
    alone = report.rounds_verdict(_summary(linear_1=(1.5, 1.6, 1.7), linear_3=(0.9, 1.1, 1.0)))
    assert "fastest by median `linear:1`, clear of every other range" in alone
    assert report.with_range(_summary(linear_1=(1.5, 1.6, 1.7))["linear:1"], "speedup_vs_vanilla", ".2f", "x") == \
        "1.60x (1.50–1.70x)"
    one = {"vanilla": {"tokens_per_s": 10.0, "speedup_vs_vanilla": 1.0}, "linear:1": {"tau": 1.5, "tokens_per_s": 12.0,
                                                                                     "speedup_vs_vanilla": 1.2}}
    assert report.rounds_verdict(one) == "" and report.with_range(one["linear:1"], "tokens_per_s", ".1f") == "12.0"
    assert "highest median" not in said  # linear:1 leads both columns
    # the × column's order can differ from the tokens/s medians': said where it does
    crossed = _summary(linear_1=(1.2, 1.2, 1.2), linear_3=(1.1, 1.3, 1.25))
    crossed["linear:1"]["rounds"]["tokens_per_s"] = [12.6, 12.6, 12.6]  # its plain rounds were the faster
    crossed["linear:1"]["tokens_per_s"] = 12.6
    said = report.rounds_verdict(crossed)
    assert "fastest by median `linear:1`" in said
    assert "The × column's highest median, `linear:3`, is not the fastest by median" in said


def test_static_vs_dynamic_table_and_calibration_on_a_tiny_model(tiny_dir, tmp_path, made_up_step_costs):
    from workbench.cli import main

    out = tmp_path / "out"
    methods = "vanilla,static:8,eagle2:8/3/2,static:6,eagle2:6/3/2"
    rc = main(["bench", "--target", str(tiny_dir), "--draft", "random", "--dtype", "fp32", "--limit", "3",
               "--max-new-tokens", "8", "--methods", methods, "--no-temperature-tau", "--threads", "1",
               "--calibration-max-new-tokens", "6", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    rows = res["static_vs_dynamic"]
    assert [(r["D"], r["task"]) for r in rows if r["task"] == "all"] == [(8, "all"), (6, "all")]
    for r in rows:  # every cell recomputed from the per-question records
        recs = {k: [q for q in res["records"][r[k]] if r["task"] in ("all", q["task"])] for k in ("static", "dynamic")}
        assert r["tau_static"] == pytest.approx(metrics.tau(metrics.accept_lengths(recs["static"])))
        assert r["tau_dynamic"] == pytest.approx(metrics.tau(metrics.accept_lengths(recs["dynamic"])))
        assert r["tau_ratio"] == pytest.approx(r["tau_dynamic"] / r["tau_static"])
        assert r["speed_ratio"] == pytest.approx(metrics.speed(recs["dynamic"]) / metrics.speed(recs["static"]))
    assert len({r["task"] for r in rows}) == 4  # all + the 3 questions' tasks
    assert res["summary"]["static:8"]["equal_to_vanilla"] == 1.0
    cal = res["calibration"]
    assert cal["method"] == "static:8" and cal["questions"] == 3  # auto: the first tree method
    s = cal["table"]["summary"]
    assert s["nodes"] == 7 * s["steps"] and sum(b["count"] for b in cal["table"]["score_bins"]) == s["nodes"]
    assert sum(b["count"] for b in cal["table"]["prob_bins"]) == s["tried"] >= s["accepted"]
    md = (out / "report.md").read_text()
    assert "## Static against dynamic trees" in md and "| 8 | **all** |" in md and "Dynamic over static" in md
    assert "## Calibration" in md and "| depth | verified |" in md
    page = (out / "figures.html").read_text()
    assert "Static vs dynamic tree" in page and "perfectly calibrated" in page


def test_static_vs_dynamic_says_the_rounds_range_of_its_speed_ratio():
    from workbench.bench import static_vs_dynamic

    row = {"D": 8, "task": "all", "tau_ratio": 1.07, "speed_ratio": 0.965, "speed_ratio_range": [0.922, 0.994]}
    cell = {"D": 8, "task": "qa", "tau_ratio": 1.08, "speed_ratio": 0.95}
    said = static_vs_dynamic.verdict([row, cell])
    assert ("D=8: τ ×1.07, tokens/s ×0.96 (0.92–0.99 over the rounds, each round's pair within it, the dynamic tree "
            "slower in every round)") in said
    level = static_vs_dynamic.verdict([{**row, "speed_ratio_range": [0.95, 1.02]}, cell])
    assert "(0.95–1.02 over the rounds, each round's pair within it, on both sides of 1)" in level
    one = static_vs_dynamic.verdict([{k: v for k, v in row.items() if k != "speed_ratio_range"}, cell])
    assert "tokens/s ×0.96. Dynamic has" in one and "over the rounds" not in one


def test_calibration_command_writes_the_asset_format(tiny_dir, tmp_path):
    from workbench.bench.calibration import main

    out = tmp_path / "cal.json"
    assert main(["--target", str(tiny_dir), "--draft", "random", "--method", "eagle2:6/3/2", "--limit", "2",
                 "--max-new-tokens", "6", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["meta"]["method"].startswith("eagle2") and data["meta"]["questions"] == 2
    assert data["table"]["summary"]["nodes"] == 5 * data["table"]["summary"]["steps"]
    assert main(["--target", str(tiny_dir), "--draft", "random", "--method", "vanilla"]) == 2


@pytest.mark.parametrize("argv", [["bench", "--hot-tokens", "0"], ["tune", "--hot-tokens", "0"]])
def test_hot_tokens_option_reaches_the_model_load(argv, monkeypatch, tmp_path):
    """``--hot-tokens`` is passed to ``Workbench.load`` (0 = the draft's full vocabulary)."""
    from workbench import pipeline
    from workbench.bench import tune as tune_cmd
    from workbench.cli import main

    seen = {}

    def fake_load(*args, **kwargs):
        seen.update(kwargs)
        raise FileNotFoundError("stop here")

    monkeypatch.setattr(pipeline.Workbench, "load", fake_load)
    run = main if argv[0] == "bench" else lambda a: tune_cmd.main(a[1:])
    if argv[0] == "bench":  # not the working directory's bench_out, whose journal it would read
        argv = [*argv, "--out", str(tmp_path)]
    assert run(argv) == 2  # the stop-here error is reported as a user error
    assert seen.get("hot_tokens") == 0


def test_hot_tokens_come_from_the_loaded_heads_own_list(tmp_path):
    """A head directory with hot_tokens.json drafts among its own list (default 4,096 or --hot-tokens
    N); without a list, the default is the full vocabulary and an explicit N is a clear error."""
    import json

    from workbench.pipeline import HOT_TOKENS_DEFAULT, _apply_hot_tokens

    class Head:
        hot = None

        def set_hot_tokens(self, ids):
            self.hot = ids

    with_list, without = tmp_path / "with", tmp_path / "without"
    with_list.mkdir(), without.mkdir()
    (with_list / "hot_tokens.json").write_text(json.dumps({"token_ids": list(range(9000, 0, -1))}))
    h = Head()
    assert _apply_hot_tokens(h, None, str(with_list)) == f", {HOT_TOKENS_DEFAULT} hot draft tokens"
    assert h.hot.tolist()[:2] == [9000, 8999] and len(h.hot) == HOT_TOKENS_DEFAULT
    h = Head()
    assert _apply_hot_tokens(h, 3, str(with_list)) == ", 3 hot draft tokens" and h.hot.tolist() == [9000, 8999, 8998]
    h = Head()
    assert _apply_hot_tokens(h, 0, str(with_list)) == "" and h.hot is None
    assert _apply_hot_tokens(h, None, str(without)) == "" and h.hot is None
    with pytest.raises(ValueError, match="no hot_tokens.json"):
        _apply_hot_tokens(h, 64, str(without))
    with pytest.raises(ValueError, match="no hot_tokens.json"):
        _apply_hot_tokens(h, 64, "random:3")


def test_cost_curve_sizes_take_turns_and_leave_the_pool_as_they_found_it(tiny_dir):
    """The verify cost curve times its sizes in turns (one forward of each a round, the first
    rotating), so a disturbance of a moment cannot fall on every repeat of one size; each size
    gets its repeats, and every slot it took is free again."""
    from workbench.measure.cost import forward_samples, prefilled
    from workbench.models.loading import load_target

    target = load_target(tiny_dir)
    pool = prefilled(target, target.new_kv_pool, vocab=target.config.vocab_size, prefix_len=8, spare=9, device="cpu")
    free_before = pool.alloc.num_free
    calls = []

    def forward(batch):
        calls.append(batch.num_tokens)
        return target.logits(target(batch, pool.kv))

    samples = forward_samples(pool, (1, 4, 8), forward=forward, repeats=3, warmup=1)
    assert [len(s) for s in samples] == [3, 3, 3] and all(ms > 0 for s in samples for ms in s)
    assert calls == [1, 4, 8, 1, 4, 8, 4, 8, 1, 8, 1, 4]  # a warm-up round, then rounds rotating
    assert pool.alloc.num_free == free_before


def test_the_roofline_is_the_larger_floor_and_the_ridge_where_they_meet():
    """A forward's compute floor grows with its tokens, its memory floor does not: the roofline is
    the larger, the ridge the first size where compute reaches memory; the report's cost table
    prints both rows from the stored measurements."""
    floor = {"floor_ms": 10.0, "weights_mb": 40.0, "read_gbs": {"gbs": 4.0, "lo": 3.9, "hi": 4.1, "repeats": 5, "threads": 1}}
    compute = {"gflop_per_token": 0.3, "attention_gflop_per_key": 0.0, "prefix": 0,
               "peak": {"gflops": 100.0, "lo": 90.0, "hi": 110.0, "size": 1024, "repeats": 5, "dtype": "float32"}}
    assert floor_mod.compute_ms(compute, 1) == pytest.approx(3.0)  # 0.3 GFLOP at 100 GFLOP/s
    assert [floor_mod.roofline_ms(floor, compute, n) for n in (1, 3, 4, 10)] == pytest.approx([10.0, 10.0, 12.0, 30.0])
    assert floor_mod.ridge_tokens(floor, compute) == 4  # 3 tokens: 9 ms < 10; 4 tokens: 12 ms
    with_attention = dict(compute, attention_gflop_per_key=0.01, prefix=100)  # +1 GFLOP per token at 100 keys
    assert floor_mod.compute_ms(with_attention, 1) == pytest.approx((0.3 + 0.01 * 101) / 100 * 1e3)
    costs = {"decode_ms": 20.0, "floor": floor, "compute": compute,
             "verify": [{"tokens": 1, "ms": 20.0}, {"tokens": 10, "ms": 45.0}]}
    table = report._cost_table(costs)
    assert "| roofline ms | 10.0 | 30.0 |" in table and "| × roofline | 2.00 | 1.50 |" in table
    assert "meet at 4 tokens" in report.floor_line(costs)
    assert "roofline" not in report._cost_table({k: v for k, v in costs.items() if k != "compute"})


def test_the_compute_floor_counts_every_product_weight_once(tiny_dir):
    from workbench.models.loading import load_target

    target = load_target(tiny_dir, torch.float32)
    table = target.model.embed_tokens.weight
    lookup = table is not target.lm_head.weight  # untied: the table is only looked up
    products = sum(p.numel() for p in target.parameters() if p.dim() == 2 and not (lookup and p is table))
    assert floor_mod.product_params(target) == products
    cfg = target.config
    c = floor_mod.compute_floor(target, prefix=5, repeats=2)
    assert c["peak"]["lo"] <= c["peak"]["gflops"] <= c["peak"]["hi"] and c["peak"]["dtype"] == "float32"
    assert c["gflop_per_token"] == 2 * products / 1e9  # not rounded: a tiny model's would round to nothing
    flops = 2 * products * 3 + 4 * 3 * (5 + 3) * cfg.num_heads * cfg.head_dim * cfg.num_layers
    assert floor_mod.compute_ms(c, 3) == pytest.approx(flops / (c["peak"]["gflops"] * 1e9) * 1e3)
