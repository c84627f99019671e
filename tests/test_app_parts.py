"""The app's parts without a server, on a tiny random model: Compare's figures (each plot labelled
by the run it draws, one colour per run on every chart), the line and the suggestion after a step
that accepted nothing, the settings wired by name, and the glossary against the words the page
uses."""

import re
from pathlib import Path

import pytest

pytest.importorskip("gradio")
pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "tests" / "data" / "draft-sources.json"
PROMPT = "Why do cats purr?"


@pytest.fixture(scope="module")
def wb(tmp_path_factory):
    from helpers import tiny_app_workbench

    return tiny_app_workbench(tmp_path_factory.mktemp("tiny-app"))


def last_update(wb, mode: str, **changes) -> dict:
    from workbench.app.compare import run_compare
    from workbench.app.state import Settings

    values = Settings.of(prompt=PROMPT, exit_layers=1, **changes).values()
    *_, final = run_compare(wb, values, max_new=4, measure=False, mode=mode)
    assert final["status"].startswith("Done"), final["status"]
    return final


def colours(fig, suffix: str = "") -> dict[str, str]:
    """Trace name -> its colour (line or marker), for the traces named ``<run><suffix>``."""
    out = {}
    for t in fig.data:
        name = t.meta if isinstance(t.meta, str) else t.name  # a line whose legend says more names its run in meta
        if name.endswith(suffix):
            out[name.removesuffix(suffix)] = t.line.color if t.mode and "lines" in t.mode else t.marker.color
    return out


@pytest.mark.parametrize("mode", [0, 1], ids=["methods", "draft sources"])
def test_compare_labels_each_plot_by_its_run_and_keeps_one_colour_per_run(wb, mode):
    from workbench.app.compare import MODES, SLOTS

    update = last_update(wb, MODES[mode])
    runs = update["result"].runs
    expected = ({"tree-1": "eagle2", "tree-2": "static", "tree-3": "linear"} if mode == 0 else
                {"tree-1": "head", "tree-2": "ngram:1-12", "tree-3": "exit:1"})
    words = {"eagle2": "the dynamic tree", "static": "a fixed shape", "linear": "the chain",
             "head": "drafted by EAGLE head", "ngram:1-12": "drafted by n-gram", "exit:1": "drafted by early exit"}
    for slot in SLOTS:
        plot, run = update[slot.name], expected[slot.name]
        assert plot.label.startswith(run) and words[run] in plot.label, plot.label  # the label names the run drawn
        assert plot.figure.layout.title.text.startswith(f"{run} · L = ")  # and so does the figure's title
        other = set(expected.values()) - {run} | ({"n-gram", "early exit", "EAGLE head", "draft sources"} if mode == 0
                                                   else {"static", "linear"})
        assert not any(re.search(rf"(?<![\w:-]){re.escape(o)}(?![\w:-])", plot.label) for o in other), plot.label
    tau, tokens = colours(update["tau"]), colours(update["tokens"])
    cost = colours(update["cost"], " (its steps)")
    assert set(tau) == set(tokens) == set(runs) and set(cost) == set(runs)
    assert tau == tokens == cost  # the same run, the same colour on every chart
    assert len(set(tau.values())) == len(runs) and None not in tau.values()  # and no two runs share one


@pytest.mark.parametrize("mode", [0, 1], ids=["methods", "draft sources"])
def test_compare_counts_stop_causes_per_run_and_sets_each_runs_speed_beside_its_tokens(wb, mode):
    from workbench.app.compare import MODES
    from workbench.metrics import traces_stop_causes
    from workbench.viz.compare import cost_figure, run_colours, run_summary

    update = last_update(wb, MODES[mode])
    runs = update["result"].runs
    stops = update["stops"]
    speculative = {n: sum(1 for t in r["traces"] if "stop" in t) for n, r in runs.items()}
    for name, steps in speculative.items():  # each run's bar: its segments add up to its speculative steps
        drawn = sum(x for t in stops.data for y, x in zip(t.y, t.x) if y == name)
        assert drawn == steps, (name, drawn, steps)
        for t in stops.data:
            assert dict(zip(t.y, t.x)).get(name, 0) == traces_stop_causes(runs[name]["traces"]).get(t.meta, 0)
    assert stops.layout.barmode == "stack" and len({t.marker.color for t in stops.data}) == len(stops.data)
    for t in update["tokens"].data:  # each line's legend names its measured speed
        s = run_summary(runs[t.meta]["traces"])
        assert t.name.startswith(t.meta) and (not s["steps"] or f"{s['tokens_per_s']:.0f} tokens/s" in t.name)
        assert t.meta == "vanilla" or not s["steps"] or "× plain" in t.name
    curves = [{"tokens": n, "ms": 1.0 + n, "roofline_ms": 0.5 + n, "plain_ms": 2.0 + n} for n in (1, 2, 4)]
    fig = cost_figure(runs, curves)
    used = [t.line.color if "lines" in t.mode else t.marker.color for t in fig.data]
    assert len(set(used)) == len(used), used  # no run's colour serves a curve, nor two curves one colour
    assert set(run_colours(runs).values()) <= set(used)


def first_miss(wb, **changes):
    from workbench.app.state import Session, Settings

    session = Session.start(wb, Settings(prompt=PROMPT, max_new_tokens=64, **changes))
    while session.step():
        tr = session.current
        if tr["kind"] == "spec" and not tr["accept"]["accepted"] and len(tr["tree"]["nodes"]) > 1:
            return session
    pytest.fail(f"no step without an accepted draft in {len(session.traces)} steps")


def test_a_greedy_miss_names_the_target_token_and_the_guesses(wb):
    from workbench.app.guide import miss_line
    from workbench.viz.tokens import show

    tr = first_miss(wb).current
    line = miss_line(tr)
    want = show(tr["verify"]["top"][0][0]["text"])
    assert line.startswith(f"Nothing accepted at step {tr['step']}: the target's next token after "
                           f"`{show(tr['tree']['nodes'][0]['text'])}` was `{want}`")
    guessed = [show(n["text"]) for n in tr["tree"]["nodes"][1:] if n["parent"] == 0]
    if "dropped" not in line:
        assert f"(it guessed `{guessed[0]}`" in line and want not in guessed
    assert miss_line({**tr, "accept": {**tr["accept"], "accepted": [1]}}) == ""  # a step that accepted one: no line


def test_a_sampled_miss_says_the_coins_rejected_the_drafts(wb):
    from workbench.app.guide import miss_line

    tr = first_miss(wb, temperature=1.0, seed=3).current
    tried = sum(1 for m in tr["accept"]["moves"] if m.get("child") is not None)
    assert miss_line(tr).startswith(f"Nothing accepted at step {tr['step']}: the coins rejected all {tried} draft(s)")


def test_every_stored_figure_the_app_shows_names_its_record_and_date():
    """The Step page's per-task τ and the Calibration tab's shipped table were measured by a bench
    run, not on the page: each line that shows them names that run's record and date, and the
    record exists."""
    import json

    from workbench.app.calibration import ASSET, shipped_calibration, shipped_source
    from workbench.app.draft_bench import load_draft_bench
    from workbench.app.guide import suggest
    from workbench.engine.config import SpecConfig
    from workbench.engine.drafts.registry import parse_draft

    bench = load_draft_bench()  # the shipped asset
    record, date = bench.meta["record"], bench.meta["date"][:10]
    assert (ROOT / record).exists() and record.startswith("docs/bench/"), record
    name = record.removeprefix("docs/bench/")
    assert f"| [{name}]({name})" in (ROOT / "docs" / "bench" / "README.md").read_text()  # a row of the index
    line = bench.note_html(SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=4))
    assert f"Quoted from the bench run of {date} ({record}), not measured on this page" in line
    exit_page = SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=4, draft=parse_draft("exit:28"))
    best = suggest({"kind": "spec", "stop": {"cause": "draft", "catch": {}}}, exit_page, bench, lambda source: True)
    assert f"The bench run of {date} ({record}) measured" in best.reason
    calibration = shipped_calibration()
    assert (ROOT / ASSET).exists() and json.loads((ROOT / ASSET).read_text()) == calibration
    assert shipped_source(calibration["meta"]) == f"The calibration run of {calibration['meta']['date']} ({ASSET})"


def test_the_page_wires_every_setting_by_name(wb):
    from workbench.app.handlers import StepEvents
    from workbench.app.state import Settings, setting_names

    events = StepEvents(wb)
    values = {name: f"<{name}>" for name in setting_names()}
    assert events.settings([values[n] for n in setting_names()]).values() == values
    with pytest.raises(ValueError):  # one value too few is an error, not a silently shifted field
        events.settings([values[n] for n in setting_names()][:-1])
    assert tuple(Settings().values()) == setting_names()


def test_bounds_read_as_sentences(wb):
    from workbench.app.state import Settings

    for changes, message in [(dict(top_k=-1), "top_k must be >= 0, got -1."),
                             (dict(seed=-2), "seed must be >= 0, got -2."),
                             (dict(max_new_tokens=600), "max_new_tokens must be in 1..512, got 600.")]:
        with pytest.raises(ValueError) as err:
            Settings(prompt=PROMPT, **changes).build(wb)
        assert str(err.value) == message


# Words the page uses (its explanations, the step views, the loaded head's line): each must be defined.
PAGE_TERMS = ("target", "draft source", "draft head", "root", "bonus", "accept walk", "prefill", "frontier", "rerank",
              "hot draft tokens", "path score", "num_steps", "topk", "num_draft_tokens", "static tree", "tried",
              "accepted", "calibration", "accept length τ")


def words_of(value) -> str:
    """The text a view shows: an HTML or Markdown string, or a figure's title and legend."""
    if isinstance(value, str):
        return value
    layout = getattr(value, "layout", None)
    if layout is None:
        return ""
    return " ".join([layout.title.text or ""] + [t.name or "" for t in value.data])


def test_every_word_the_page_uses_is_in_the_glossary(wb):
    from workbench.app import explain
    from workbench.app.state import Session, Settings
    from workbench.app.views import calibration_views, render

    session = Session.start(wb, Settings(prompt=PROMPT))
    shown = []
    for _ in range(3):
        session.step()
        shown += [words_of(v) for v in (*render(session, wb), *calibration_views(session))]
    texts = [getattr(explain, name) for name in dir(explain) if name.isupper()] + shown
    page = " ".join(re.sub(r"[*`]", "", " ".join(texts)).lower().split())
    missing = [t for t in PAGE_TERMS if t.lower() not in page]
    assert not missing, f"not on the page: {missing}"
    from helpers import glossary_terms

    undefined = [t for t in PAGE_TERMS if t not in glossary_terms()]
    assert not undefined, f"used on the page, not in the glossary: {undefined}"


def test_every_plot_on_the_page_is_labelled(wb):
    import gradio as gr

    from workbench.app.ui import build_app

    demo = build_app(wb, draft_bench=BENCH)
    plots = {b.elem_id: b.label for b in demo.blocks.values() if isinstance(b, gr.Plot)}
    demo.close()
    assert {"calibration-bench-plot", "calibration-bench-depth", "tree-plot", "compare-tree-1"} <= set(plots)
    assert all(label and label != "Plot" for label in plots.values()), plots


def test_the_best_tree_draws_its_band_and_ring_under_the_bonus_star(wb):
    from workbench.viz.best_tree import best_tree_figure

    session = first_miss(wb)  # the continuation leaves the tree at once: at the bonus itself
    fig = best_tree_figure(session.current)
    order = [t.meta for t in fig.data]
    assert order.index("continuation") < order.index("bonus") and order.index("left") < order.index("bonus")


def test_the_reliability_markers_fit_the_plot():
    from workbench.viz.calibration import AXIS_PAD, MARKER_PX, reliability_figure

    bins = [{"lo": i / 10, "hi": (i + 1) / 10, "count": c, "accepted": c // 3, "rate": 0.0 if i == 0 else 1.0,
             "mean_confidence": 0.0 if i == 0 else 1.0} for i, c in enumerate([6845, 2])]
    cal = {"summary": {"nodes": 6847, "steps": 120}, "prob_bins": bins, "score_bins": bins}
    fig = reliability_figure(cal)
    sizes = [s for t in fig.data[1:] for s in t.marker.size]
    assert max(sizes) == MARKER_PX[1] and min(sizes) >= MARKER_PX[0]  # the biggest bin no longer fills the plot
    assert all(t.cliponaxis is False for t in fig.data[1:])  # a marker at 0 or 1 is drawn whole
    assert tuple(fig.layout.yaxis.range) == (-AXIS_PAD, 1 + AXIS_PAD)


def test_compare_measures_the_roofline_once_per_target_and_under_each_prefix(wb, monkeypatch):
    """The verify cost is timed at every press; the machine's floors once per loaded target, the
    attention over each press's prefix taken into the compute floor."""
    import workbench.measure.floor as floor_mod
    from workbench.app import compare

    calls = []
    real = floor_mod.compute_peak
    monkeypatch.setattr(floor_mod, "compute_peak", lambda *a, **k: calls.append(1) or real(*a, **k))
    compare._FLOORS.pop(wb.target, None)
    short, long = compare.measure_cost(wb, 4), compare.measure_cost(wb, 40)
    assert calls == [1]
    assert all(p["roofline_ms"] > 0 for p in short + long)
    floor, compute = compare._FLOORS[wb.target]
    for p in long:
        assert p["roofline_ms"] == round(floor_mod.roofline_ms(floor, dict(compute, prefix=40), p["tokens"]), 3)


def test_compare_draws_f_linear_beside_the_cpus_measured_order(wb):
    """Where the target's few-row products run another implementation than F.linear, Compare times
    the same forwards with every product by F.linear too, in turns, and the cost chart draws both;
    where they run F.linear already there is nothing to set beside it."""
    from dataclasses import replace

    from workbench.app import compare
    from workbench.models.linear import WEIGHT_LEFT, LinearOrder, apply_linear_order
    from workbench.viz.compare import cost_figure

    forced = replace(wb, linear_order=LinearOrder.forced(WEIGHT_LEFT, "test"))
    try:
        apply_linear_order(wb.target, forced.linear_order)
        beside = compare.measure_cost(forced, 4)
        assert [p["tokens"] for p in beside] == list(compare.COST_SIZES)
        assert all(p["plain_ms"] > 0 and p["ms"] > 0 for p in beside)
        assert wb.target.lm_head.order == forced.linear_order  # put back after the F.linear turns
        fig = cost_figure({}, beside)
        assert [t.name for t in fig.data][-1] == "the same forward, every product by F.linear"
        assert list(fig.data[-1].y) == [p["plain_ms"] for p in beside]
        plain = replace(wb, linear_order=LinearOrder())
        apply_linear_order(wb.target, plain.linear_order)
        alone = compare.measure_cost(plain, 4)
        assert not any("plain_ms" in p for p in alone) and len(cost_figure({}, alone).data) == 2
    finally:
        apply_linear_order(wb.target, wb.linear_order)


def test_compare_predicts_from_the_cost_model_and_keeps_its_runs_when_one_cannot_be_priced(wb, monkeypatch):
    """With the measurement ticked, each run's predicted speedup comes from the cost model of its
    own draft source, measured once per source, and the model's step stands beside the run's own;
    a run whose source cannot be measured keeps its figures, and the status says which has no
    prediction."""
    from helpers import MadeUpStepCosts

    from workbench.app import compare
    from workbench.app.state import Settings

    made_up = MadeUpStepCosts()

    def priced(wb, source, **kw):
        if source is not None and source.kind == "exit":
            raise RuntimeError("no engine step could be timed")
        return made_up(wb, source, **kw)

    monkeypatch.setattr("workbench.measure.step_cost.step_cost_for", priced)
    monkeypatch.setattr(compare, "measure_cost", lambda wb, prefix: [{"tokens": 1, "ms": 1.0}, {"tokens": 8, "ms": 2.0}])
    values = Settings.of(prompt=PROMPT, exit_layers=1).values()
    *_, final = compare.run_compare(wb, values, max_new=4, measure=True, mode=compare.MODES[1])
    assert final["status"].startswith("Done") and "no predicted speedup" in final["status"]
    assert "exit:1: no engine step could be timed" in final["status"]
    assert sorted(s.name for s in made_up.calls) == ["head", "ngram:1-12"]  # vanilla: the head's, not measured again
    runs = final["result"].runs
    assert runs["ngram:1-12"]["model"].draft == () and runs["head"]["model"].draft == MadeUpStepCosts.HEAD
    summary = final["summary"]
    gap = summary[summary.index("data-table='gap'"):]
    rows = gap[:gap.index("</table>")]
    assert rows.count("<tr data-method=") == 3 and "data-method='exit" not in rows  # the unpriced run: none
    said = gap[gap.index("</table>"):]  # which measurement priced which runs
    assert "vanilla, head: made up for head; ngram:1-12: made up for ngram:1-12)" in said


def test_the_chain_rule_is_chosen_on_the_page(wb):
    """linear at temperature 1 with the block rule runs it, and the sampling view tables each
    rule's expectation; block on an eagle2 tree is refused with the rule that fits it named."""
    from workbench.app.state import Session, Settings
    from workbench.viz.sampling import sampling_html

    session = Session.start(wb, Settings(prompt=PROMPT, method="linear", num_steps=3, temperature=1.0,
                                         chain_rule="block", max_new_tokens=12))
    while session.step() and session.current["kind"] != "spec":
        pass
    tr = session.current
    assert tr["kind"] == "spec" and tr["accept"]["rule"] == "block"
    assert "block (ran)" in sampling_html(tr)
    with pytest.raises(ValueError, match="its one sampling rule is target-only"):
        Settings(prompt=PROMPT, method="eagle2", temperature=1.0, chain_rule="block").build(wb)
