"""The Step page's sentences and choices, without a server, on a tiny random model: what a step the
end of the output cut kept, the suggestion after a miss (from the stop cause, drafts ranked by
measured speed, never the prompt), the first load's measured line, the draft choices the page can
run, the output's end beside the Step button, the settings folded by a Step, the accept
thresholds' words, a static tree's title, and the glossary's words."""

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

    return tiny_app_workbench(tmp_path_factory.mktemp("tiny-step-page"))


def run(wb, **changes):
    from workbench.app.state import Session, Settings

    session = Session.start(wb, Settings(prompt=PROMPT, **changes))
    while session.step():
        pass
    return session


def test_a_step_cut_by_the_end_of_the_output_says_what_it_kept(wb):
    from workbench.app.guide import cut_words, stop_line
    from workbench.app.handlers import step_line
    from workbench.viz.tokens import show

    cut = None
    for max_new in range(12, 40):  # the tiny model's runs: find a last step whose walk gave more than was kept
        session = run(wb, method="static", max_new_tokens=max_new)
        last = session.traces[-1]
        if last["kind"] == "spec" and last["accept_length"] < len(last["accept"]["path"]):
            cut = session
            break
    assert cut is not None, "no run whose last step was cut"
    tr = cut.current
    n, kept = len(tr["accept"]["accepted"]), tr["accept_length"]
    kept_texts = " ".join(f"`{show(tr['tree']['nodes'][i]['text'])}`" for i in tr["accept"]["path"][1:kept + 1])
    words = cut_words(tr)
    assert words == (f"Step {tr['step']} accepted {n} draft{'s' * (n != 1)}, but only the first {kept} "
                     f"{'was' if kept == 1 else 'were'} kept: max_new_tokens was reached ({kept_texts}), so no bonus")
    assert len(tr["emitted"]) == kept  # the words count what was emitted
    assert stop_line(tr).startswith(words + "; its walk stopped because ")
    assert step_line(cut).startswith(words) and "then the bonus" not in step_line(cut)
    whole = cut.traces[-2]  # a step before the end kept its walk's n + 1
    assert whole["kind"] != "spec" or cut_words(whole) == ""


def spec_of(method="eagle2", draft="head", **knobs):
    from workbench.engine.config import SpecConfig
    from workbench.engine.drafts.registry import parse_draft

    return SpecConfig.from_knobs(method, **knobs, draft=parse_draft(draft))


def stopped(cause, catch=None):
    return {"kind": "spec", "stop": {"cause": cause, "catch": catch or {}}}


@pytest.mark.parametrize("cause, catch, change", [
    ("budget", {"num_draft_tokens": 10}, {"num_draft_tokens": 10}),
    ("width", {"topk": 6}, {"topk": 6}),
    ("frontier", {"topk": 5}, {"topk": 5}),
    ("depth", {"num_steps": 6}, {"num_steps": 6}),
])
def test_a_knob_cause_suggests_its_knob_and_never_the_prompt(cause, catch, change):
    from workbench.app.guide import suggest

    offer = suggest(stopped(cause, catch), spec_of(num_steps=5, topk=4, num_draft_tokens=8), None, lambda s: True)
    assert offer.changes == change and "prompt" not in offer.changes
    knob, value = next(iter(change.items()))
    assert offer.button() == f"Try: {knob} {value}" and f"{knob} = {value} would have caught it" in offer.reason
    assert offer.settings({"prompt": "mine", knob: 1, "method": "eagle2"}) == {"prompt": "mine", "method": "eagle2",
                                                                              **change}


def test_a_suggestion_is_left_out_where_its_knob_or_cause_does_not_apply():
    from workbench.app.guide import suggest

    linear = spec_of("linear", num_steps=3)
    assert suggest(stopped("width", {"topk": 3}), linear, None, lambda s: True) is None  # a chain has no topk
    assert suggest(stopped("depth", {"num_steps": 4}), linear, None, lambda s: True).changes == {"num_steps": 4}
    assert suggest(stopped("budget", {"num_draft_tokens": 500}), spec_of(), None, lambda s: True) is None  # invalid
    for cause in ("coin", "shape"):
        assert suggest(stopped(cause), spec_of(), None, lambda s: True) is None


def test_a_draft_that_disagreed_suggests_only_a_draft_measured_faster():
    """tests/data/draft-sources.json at 8/5/4: head 1.0x, ngram:1-12 1.3x, exit:1 0.7x (mean speedups)."""
    from workbench.app.draft_bench import load_draft_bench
    from workbench.app.guide import suggest

    bench, anything = load_draft_bench(BENCH), (lambda s: True)
    page = dict(num_steps=5, topk=4, num_draft_tokens=8)
    offer = suggest(stopped("draft"), spec_of(**page), bench, anything)
    assert offer.changes == {"draft": "ngram", "ngram_min": 1, "ngram_max": 12} and offer.button() == "Try: draft ngram:1-12"
    assert "1.30x plain decoding" in offer.reason and "1.00x" in offer.reason
    assert suggest(stopped("vocabulary"), spec_of("static", num_draft_tokens=8), bench, anything).changes["method"] == \
        "eagle2"  # the n-gram lookup takes no static tree
    assert suggest(stopped("continuation"), spec_of(draft="ngram:1-12", **page), bench, anything) is None  # the fastest
    assert suggest(stopped("draft"), spec_of(**page), bench, lambda s: s.kind != "ngram") is None  # exit:1: slower
    assert suggest(stopped("draft"), spec_of(draft="exit:1", **page), bench, lambda s: s.kind == "head").changes == \
        {"draft": "head"}  # 1.0x beats exit:1's 0.7x


def test_the_shipped_records_never_suggest_a_draft_slower_than_the_one_on_screen():
    """With the shipped file, the early exit (τ 3.00 on math, but 0.40-0.96x plain decoding) is never offered."""
    from workbench.app.draft_bench import load_draft_bench
    from workbench.app.guide import suggest

    bench = load_draft_bench()
    for draft in ("head", "ngram:1-12", "exit:28"):
        for page in (dict(num_steps=5, topk=4, num_draft_tokens=8), dict(num_steps=6, topk=10, num_draft_tokens=60)):
            offer = suggest(stopped("draft"), spec_of(draft=draft, **page), bench, lambda s: True)
            assert offer is None or offer.changes["draft"] != "exit", (draft, page, offer)
    assert suggest(stopped("draft"), spec_of(num_steps=5, topk=4, num_draft_tokens=8), bench, lambda s: True) is None


def test_taking_a_suggestion_keeps_the_prompt(wb):
    import gradio as gr

    from workbench.app.handlers import StepEvents
    from workbench.app.state import Session, Settings, setting_names

    session = Session.start(wb, Settings(prompt=PROMPT))
    session.step(), session.step()
    tr = session.current
    session.traces[session.cursor] = {**tr, "accept": {**tr["accept"], "accepted": []},
                                      "stop": {**tr["stop"], "cause": "budget", "catch": {"num_draft_tokens": 9}}}
    events = StepEvents(wb)
    values = [v if n != "prompt" else "my own prompt" for n, v in Settings(prompt=PROMPT).values().items()]
    out = events.take_suggestion(session, *values)
    by_name = dict(zip(setting_names(), out))
    assert by_name["num_draft_tokens"] == 9
    assert all(by_name[n] == gr.skip() for n in setting_names() if n != "num_draft_tokens")  # the prompt untouched
    assert "the prompt is yours, unchanged" in out[len(setting_names())]


def test_the_first_load_names_what_the_setting_on_screen_measured_here():
    from workbench.app.guide import measured_line
    from workbench.default_tree import Pick

    pick = Pick(setting="eagle2:4/3/2", speedup=1.208, record="docs/bench/head-cpu-fp32-avx2.md", date="2026-12-06",
                cpu="2-core AMD EPYC with AVX2 only", here=True,
                speedups={"eagle2:4/3/2": 1.208, "eagle2:6/4/4": 1.211, "eagle2:8/5/4": 1.142})
    assert measured_line((8, 5, 4), pick) == (
        "8/5/4 measured 1.14x plain decoding on a 2-core AMD EPYC with AVX2 only (docs/bench/head-cpu-fp32-avx2.md, "
        "2026-12-06); the default without tree flags there: 4/3/2, 1.21x; 6/4/4, 1.21x, is level with it within one "
        "pass's noise (10%)")
    assert measured_line((4, 3, 2), pick).endswith("; the smallest of the trees measured fastest there (the default "
                                                   "without tree flags); 6/4/4, 1.21x, is level with it within one "
                                                   "pass's noise (10%)")
    from dataclasses import replace
    assert measured_line((4, 3, 2), replace(pick, rounds=True)).endswith(
        "6/4/4, 1.21x, is level with it within the rounds' noise (their ranges overlap)")
    assert measured_line((6, 4, 4), pick).endswith("the default without tree flags there: 4/3/2, 1.21x")
    assert measured_line((10, 6, 4), pick).startswith("10/6/4 was not measured on a 2-core AMD EPYC")
    assert measured_line((8, 5, 4), None) == ""
    assert measured_line((8, 5, 4), replace(pick, here=False)) == ""  # another kind of CPU's record


def test_the_measured_line_is_shown_only_for_the_shipped_head_on_a_cpu(wb):
    from workbench.app.guide import page_measured_line

    assert wb.draft_source.startswith("random")
    assert page_measured_line(wb, "eagle2", (8, 5, 4)) == ""  # a random head is not the records' draft


def test_the_draft_selector_offers_a_draft_model_only_when_one_is_loaded():
    from workbench.app.state import offered_choices
    from workbench.engine.drafts.head import HeadSource
    from workbench.engine.drafts.registry import parse_draft

    kinds = [kind for _, kind in offered_choices(HeadSource())]
    assert "model" not in kinds and {"head", "ngram", "exit"} <= set(kinds)
    assert "model" in [kind for _, kind in offered_choices(parse_draft("model:/m/small"))]
    assert "head" not in [kind for _, kind in offered_choices(parse_draft("model:/m/small"))]


def test_the_output_tail_shows_the_last_tokens_with_the_last_step_outlined(wb):
    from workbench.viz.output import output_tail_html, output_tokens

    session = run(wb, max_new_tokens=48)
    toks = output_tokens(session.traces, wb.token_text)
    tail = output_tail_html(PROMPT, session.traces, wb.token_text, limit=10)
    assert tail.count("data-prov=") == 10 and f"({len(toks)} tokens;" in tail and "… " in tail
    last = session.traces[-1]["step"]
    assert tail.count(f"data-step='{last}'") == len(session.traces[-1]["emitted"]) and "outline" in tail
    first = output_tail_html(PROMPT, session.traces[:1], wb.token_text)
    assert PROMPT in first and first.count("data-prov='bonus'") == 1  # the prefill's token after the prompt
    assert output_tail_html(PROMPT, [], wb.token_text) == ""


def test_a_step_folds_the_settings_and_bad_input_opens_them(wb):
    from workbench.app.handlers import PAGE, StepEvents
    from workbench.app.state import Settings
    from workbench.app.views import VIEWS

    events = StepEvents(wb)
    values = list(Settings(prompt=PROMPT).values().values())
    out = events.step(None, *values)
    settings = out[1 + len(VIEWS) + PAGE.index("settings")]
    assert settings.open is False
    bad = list(Settings(prompt=PROMPT, num_draft_tokens=800).values().values())
    out = events.step(out[0], *bad)
    assert out[1 + len(VIEWS) + PAGE.index("settings")].open is True


def test_the_thresholds_say_that_below_1_the_output_leaves_the_targets_distribution():
    from workbench.app.state import acceptance_note

    for single, acc in ((1.0, 1.0), (0.5, 1.0)):
        assert "below 1" in acceptance_note(single, acc) or "**lossy**" in acceptance_note(single, acc)
        assert "no longer follows the target's distribution" in acceptance_note(single, acc)


def test_a_static_tree_and_a_chain_speak_of_no_rerank(wb):
    from workbench.viz.tree import rerank_line, tree_figure

    for method, words in (("static", "a fixed shape: its 7 rank paths verified, no rerank"),
                          ("linear", "a chain: each of the 5 drafts is the top-1 below the last, no rerank")):
        session = run(wb, method=method, num_steps=5, num_draft_tokens=8, max_new_tokens=8)
        tr = next(t for t in session.traces if t["kind"] == "spec" and t["draft"]["candidates"])
        assert rerank_line(tr) == words and "dropped" not in rerank_line(tr)
        assert words in tree_figure(tr).layout.title.text.replace("<br>", " ")
    tr = next(t for t in run(wb, max_new_tokens=8).traces if t["kind"] == "spec")
    assert rerank_line(tr).startswith("rerank: the best D − 1 = 7 of ")


def test_the_glossary_defines_the_words_the_lessons_and_tabs_use():
    from helpers import glossary_terms

    missing = {"L", "tree mask", "shift by one", "residual", "rollback", "TPOT", "TTFT", "ECE"} - glossary_terms()
    assert not missing, missing


def test_the_tree_replays_its_growth_the_rerank_and_the_walk_on_its_own_layout(wb):
    import re

    from workbench.viz.replay import replay_figure, replay_stages
    from workbench.viz.tree import tree_figure
    from workbench.viz.walk import walk_moves

    session = run(wb, max_new_tokens=12)
    tr = next(t for t in session.traces if t["kind"] == "spec" and len(t["draft"]["candidates"]) > 8)
    stages, moves = replay_stages(tr), walk_moves(tr)
    depths = sorted({c["level"] for c in tr["draft"]["candidates"]})
    assert stages == [("grow", d) for d in depths] + [("rerank", 0)] + [("walk", m) for m in range(len(moves) + 1)]
    assert replay_figure(tr, len(stages) - 1).to_dict() == tree_figure(tr).to_dict()  # the last stage: the tree
    final = {k: (x, y) for t in tree_figure(tr).data if t.meta and t.customdata is not None
             for k, x, y in zip(t.customdata, t.x, t.y)}

    def drawn(fig):
        return {k: (x, y) for t in fig.data if t.meta not in (None, "ring") and t.customdata is not None
                for k, x, y in zip(t.customdata, t.x, t.y)}

    for i, (kind, n) in enumerate(stages[:-1]):
        fig = replay_figure(tr, i)
        points = drawn(fig)
        assert all(final[k] == xy for k, xy in points.items() if k in final)  # no node moves between stages
        if kind == "grow":  # every candidate proposed so far is drawn: a kept node, or counted in a fold
            folds = sum(int(m) for a in fig.layout.annotations for m in re.findall(r"\+(\d+) dropped", a.text))
            kept = sum(1 for k in points if k not in ("0",) and not k.startswith("+"))
            assert kept + folds == sum(1 for c in tr["draft"]["candidates"] if c["level"] <= n), (kind, n)
            rings = [t for t in fig.data if t.meta == "ring"]
            frontier = next((lv for lv in tr["draft"]["levels"] if lv["level"] == n), None)
            assert bool(rings) == bool(frontier) and f"level {n}" in fig.layout.title.text
        elif kind == "rerank":
            assert "bonus" not in points and any(k.startswith("+") for k in points)
            assert "the rerank" in fig.layout.title.text
        else:  # the walk after n moves: what it accepted and missed so far
            tried = {str(m["child"]): m["match"] for m in moves[:n]}
            status = {k: t.meta for t in fig.data if t.customdata is not None for k in t.customdata}
            assert all(status[k] == ("accepted" if ok else "missed") for k, ok in tried.items())
            assert "bonus" not in points and not any(k.startswith("+") for k in points)


def test_the_replay_slider_draws_the_stage_on_the_tree(wb):
    import gradio as gr

    from workbench.app.state import Session, Settings
    from workbench.app.views import VIEWS, render, replay_view
    from workbench.viz.replay import replay_stages

    session = Session.start(wb, Settings(prompt=PROMPT))
    session.step()
    assert replay_view(session, 0) == replay_view(None, 0) == gr.skip()  # the prefill: nothing to replay
    session.step()
    slider = dict(zip(VIEWS, render(session, wb)))["replay"]
    n = len(replay_stages(session.current))
    assert (slider.maximum, slider.value, slider.interactive) == (n - 1, n - 1, True)
    assert "growth: level 1" in replay_view(session, 0).layout.title.text
    assert replay_view(session, 10 ** 6).to_dict() == replay_view(session, n - 1).to_dict()  # clamped to the last


def test_a_tick_under_way_when_reset_comes_shows_nothing_and_no_tick_steps_after(wb, monkeypatch):
    """Reset while an autoplay step runs: that step's views are dropped (the page stays reset), the
    flag is off, and the next tick steps nothing, even with no run left to step."""
    import gradio as gr

    from workbench.app.handlers import Autoplay, StepEvents
    from workbench.app.state import Settings

    events = StepEvents(wb)
    values = list(Settings(prompt=PROMPT).values().values())
    auto = Autoplay()
    events.play(True, auto)
    out = events.tick(None, auto, *values)
    session = out[0]
    assert session is not None and len(session.traces) == 1 and auto.on

    advance = events._advance

    def reset_meanwhile(*args):  # the Reset button pressed while this step runs
        events.reset(session, auto)
        return advance(*args)

    monkeypatch.setattr(events, "_advance", reset_meanwhile)
    out = events.tick(session, auto, *values)
    assert all(v == gr.skip() for v in out) and not auto.on and auto.resets == 1
    monkeypatch.undo()
    out = events.tick(None, auto, *values)  # a tick sent before the timer stopped
    assert out[0] is None and out[-1].value is False
