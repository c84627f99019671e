"""The app's API through ``gradio_client``, on a tiny random model (``workbench.testing.tiny``):
Step / Back / the step slider / Run to end / Reset / Compare, each draft source, separate sessions,
bad input that gets a message naming its field instead of an error, the examples, the benchmark's
per-task τ (``tests/data/draft-sources.json``), the suggestion after a step that accepted nothing
(from its stop cause), and ``app.py`` itself started as a process."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

from workbench.app.compare import OUTPUTS as COMPARE_OUTPUTS  # noqa: E402
from workbench.app.state import setting_names  # noqa: E402
from workbench.testing.tiny import make_tiny_app_model  # noqa: E402
from workbench.app.views import VIEWS  # noqa: E402

# Gradio's queue calls pandas APIs that pandas 3 deprecates: not this project's to fix.
pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "tests" / "data" / "draft-sources.json"  # a fixture in the shipped asset's format
PROMPT = "tell me about the cat"
DEFAULTS = dict(prompt=PROMPT, method="eagle2", num_steps=5, topk=4, num_draft_tokens=8, temperature=0.0,
                top_p=1.0, top_k=0, seed=0, max_new_tokens=64, tree="", accept_threshold_single=1.0,
                accept_threshold_acc=1.0, chain_rule="target-only", draft="head", exit_layers=1, ngram_min=1, ngram_max=12)
SOURCES = {"head": "EAGLE head", "ngram": "n-gram (prompt lookup, ngram:1-12)",
           "exit": "early exit (exit:1: the first 1 of 2 layers)"}  # the tiny target has 2 layers
OUTPUTS = VIEWS + ("bench",)  # what a Step returns through the API (the buttons and tabs it updates are not values)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def inputs(**changes) -> list:
    values = dict(DEFAULTS, **changes)
    return [values[name] for name in setting_names()]  # the page's inputs go in Settings' field order


def views(out, c: Client | None = None) -> dict:
    """The Step outputs by name; with the client ``c``, plus the trace of the step on screen,
    which the page fetches on demand (the Step itself does not send it)."""
    assert len(out) == len(OUTPUTS)
    v = dict(zip(OUTPUTS, out))
    if c is not None:
        v["trace"] = c.predict(api_name="/trace")
    return v


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-app"), seed=1)


@pytest.fixture(scope="module")
def app_url(tiny_model):
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from workbench.app.ui import build_app, launch
    from workbench.pipeline import Workbench

    wb = Workbench.load(target=str(tiny_model), draft="random:1", dtype="fp32")
    demo = build_app(wb, "tiny test model", draft_bench=BENCH)
    port = free_port()
    launch(demo, port=port, block=False)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def client(url) -> Client:
    return Client(url, verbose=False)


@pytest.fixture(scope="module")
def shared(app_url) -> Client:
    """One session for the bad-input cases (a Client costs a second to connect)."""
    return client(app_url)


def test_step_back_and_goto(app_url):
    c = client(app_url)
    for n in (1, 2, 3):
        v = views(c.predict(*inputs(), api_name="/step"), c)
        assert v["summary"].startswith(f"**Step {n}** of {n} recorded")
    tr = v["trace"]
    assert tr["kind"] == "spec" and tr["step"] == 3
    tree = json.loads(v["tree"]["plot"])  # the figure holds every verified node once
    kept = sum(len(t["x"]) for t in tree["data"] if t.get("meta") in ("root", "accepted", "missed", "unreached"))
    assert kept == len(tr["tree"]["nodes"])
    accepted = next((t["customdata"] for t in tree["data"] if t.get("meta") == "accepted"), [])
    assert sorted(int(k) for k in accepted) == sorted(tr["accept"]["path"][1:])
    assert v["logits"].count("<tr data-node=") == len(tr["tree"]["nodes"])
    assert v["moves"].count("<li data-move=") == len(tr["accept"]["moves"]) + 1
    assert v["mask"].count("<tr data-node=") == len(tr["tree"]["nodes"])
    assert v["kv_slots"].count("data-status='freed'") == len(tr["tree"]["nodes"]) - len(tr["accept"]["path"])
    back = views(c.predict(api_name="/back"), c)
    assert back["trace"]["step"] == 2 and back["summary"].startswith("**Step 2** of 3")
    first = views(c.predict(1, api_name="/goto"), c)
    assert first["trace"]["kind"] == "prefill"
    again = views(c.predict(*inputs(), api_name="/step"), c)  # Step after Back replays the recorded step
    assert again["trace"]["step"] == 2 and again["summary"].startswith("**Step 2** of 3")
    walk = c.predict(1, api_name="/walk")
    assert walk[1].count("<li data-move=") == 1
    animated = c.predict(api_name="/animate_walk")  # the last frame: every move shown
    assert animated[1].count("<li data-move=") == len(again["trace"]["accept"]["moves"]) + 1


def test_a_draft_model_is_not_offered_without_one_loaded(shared):
    """The selector lists the draft model only when the app was started with ``--draft model:DIR``:
    asking for it anyway is refused by the page's own choices, and the page still steps."""
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="not in the list of choices"):
        shared.predict(*inputs(draft="model"), api_name="/step")
    assert not views(shared.predict(*inputs(), api_name="/step"), shared)["status"].startswith("⚠️")


@pytest.mark.parametrize("changes, message", [
    (dict(prompt="   "), "prompt is empty"),
    (dict(prompt="cat " * 1600), "characters long"),
    (dict(prompt="cat " * 1000), "exceeds the model's context"),
    (dict(num_draft_tokens=800), "num_draft_tokens must be in 2..69"),
    (dict(num_steps=0), "num_steps must be in 1..16"),
    (dict(topk=None), "topk is empty"),
    (dict(temperature=-1.0), "temperature must be in [0, 100]"),
    (dict(top_k=-1), "top_k must be >= 0, got -1."),
    (dict(top_p=0.0), "top_p must be in (0, 1]"),
    (dict(max_new_tokens=0), "max_new_tokens must be in 1..512"),
    (dict(method="static", tree="[[0],[1,0]]"), "tree path [1, 0] has no parent: add [1]"),
    (dict(method="static", tree="[[0],"), "is not valid JSON"),
    (dict(method="static", tree="[[0],[1],[0,0]]"), "static tree of 4 tokens (root included), but num_draft_tokens "
                                                     "is 8: set num_draft_tokens to 4, or empty the tree box"),
    (dict(method="static", num_draft_tokens=300), "num_draft_tokens must be in 2..256"),
    (dict(accept_threshold_acc=0.0), "accept_threshold_acc must be in (0, 1]"),
    (dict(accept_threshold_single=0.5), "set a temperature above 0"),
    (dict(draft="exit", exit_layers=0), "N must be >= 1, got 0"),
    (dict(draft="exit", exit_layers=2), "exit:2: the target has 2 layers, so N must be in 1..1"),
    (dict(draft="exit", exit_layers=None), "early exit N is empty"),
    (dict(draft="ngram", ngram_min=5, ngram_max=3), "n-gram match windows must satisfy 1 <= MIN <= MAX <= 32, got 5-3"),
    (dict(draft="ngram", ngram_max=40), "got 1-40"),
    (dict(draft="ngram", method="static"), "no distribution to rank or sample from"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_bad_input_gives_a_message(shared, changes, message):
    from workbench.app.handlers import elem_id, where

    ok = views(shared.predict(*inputs(), api_name="/step"), shared)
    bad = views(shared.predict(*inputs(**changes), api_name="/step"), shared)
    assert message in bad["status"] and bad["status"].startswith("⚠️")
    assert bad["trace"] == ok["trace"]  # what was on screen stays
    named = [f for f in setting_names() if f"wb-bad-{elem_id(f)}'" in bad["status"]]  # the fields the page outlines
    assert set(named) & set(changes), (named, changes)  # among them, one this case made bad
    assert all(f"**{where(f)[0]}**" in bad["status"] for f in named)  # and names in words
    after = views(shared.predict(*inputs(), api_name="/step"), shared)  # and the app keeps working
    assert after["trace"]["step"] == ok["trace"]["step"] + 1 and not after["status"].startswith("⚠️")


def test_sessions_are_separate_and_a_long_run_blocks_no_one(app_url):
    a, b = client(app_url), client(app_url)
    job = a.submit(*inputs(max_new_tokens=400), api_name="/run_to_end")
    deadline = time.time() + 60
    while not job.outputs() and time.time() < deadline:  # a's run is under way
        time.sleep(0.1)
    t0 = time.time()
    v = views(b.predict(*inputs(), api_name="/step"))
    assert v["summary"].startswith("**Step 1** of 1") and time.time() - t0 < 20
    assert not job.done(), "b's Step had to wait for a's whole run"
    job.cancel()
    a.predict(api_name="/reset")


def test_run_to_end_and_reset(app_url):
    c = client(app_url)
    v = views(c.predict(*inputs(max_new_tokens=6), api_name="/run_to_end"), c)
    assert v["status"].startswith("Finished") and v["trace"]["finished"] in ("length", "stop")
    v = views(c.predict(*inputs(max_new_tokens=6), api_name="/step"))
    assert "finished" in v["status"]
    reset = views(c.predict(api_name="/reset")[:-2], c)
    assert reset["trace"] is None and reset["summary"] == "No step yet."
    sampled = views(c.predict(*inputs(temperature=0.8, seed=2), api_name="/step"))
    sampled = views(c.predict(*inputs(temperature=0.8, seed=2), api_name="/step"), c)
    assert sampled["trace"]["accept"]["rule"] == "target-only" and "coin u" in sampled["sampling"]


def test_compare(app_url):
    c = client(app_url)
    out = compared(c.predict(*inputs(max_new_tokens=6), 6, False, api_name="/compare"))
    status, summary = out["status"], out["summary"]
    assert status.startswith("Done: 5 runs")
    for name in ("vanilla", "linear", "linear (same verify budget)", "eagle2", "static"):
        assert f"data-method='{name}'" in summary
    assert "same tokens" in summary
    # the settings on screen as SGLang / vLLM / EAGLE flags (default knobs 8/5/4)
    assert "data-table='elsewhere'" in summary and "--speculative-num-draft-tokens 8" in summary
    assert "depth=4, top_k=4, total_token=8" in summary and "data-method='vanilla'" not in summary.split("elsewhere")[1]
    for name in ("eagle2:8/5/4", "linear:5", "linear:7", "static:8"):  # each row's name for bench --methods
        assert f"<code>{name}</code>" in summary.split("elsewhere")[1]
    assert out["tree-2"]["label"] == "static: a fixed shape (EAGLE-1)"  # each tree plot is labelled by its run
    static_tree = figure(out["tree-2"])  # the static tree at step 2: EAGLE-1's 7 drafts + the root
    kept = sum(len(t["x"]) for t in static_tree["data"] if t.get("meta") in ("root", "accepted", "missed", "unreached"))
    assert kept == 8 and static_tree["layout"]["title"]["text"].startswith("static")
    tau = figure(out["tau"])
    assert {t["name"] for t in tau["data"]} >= {"eagle2", "static"}
    custom = c.predict(*inputs(max_new_tokens=4, tree="[[0],[1],[0,0]]"), 4, False, api_name="/compare")
    assert custom[0].startswith("⚠️") and "set num_draft_tokens to 4" in custom[0]
    custom = c.predict(*inputs(max_new_tokens=4, num_draft_tokens=4, tree="[[0],[1],[0,0]]"), 4, False,
                       api_name="/compare")
    assert custom[0].startswith("Done: 5 runs") and "custom tree" in custom[1]
    bad = c.predict(*inputs(num_draft_tokens=1), 6, False, api_name="/compare")
    assert bad[0].startswith("⚠️") and "num_draft_tokens" in bad[0]


def figure(value) -> dict:
    """A plot's figure as the client receives it: the plot, or an update of its label and value."""
    return json.loads(value.get("value", value)["plot"])


def compared(out) -> dict:
    """The Compare outputs by name (the API leaves out the state)."""
    assert len(out) == len(COMPARE_OUTPUTS) - 1
    return dict(zip(COMPARE_OUTPUTS[1:], out))


def tree_nodes(figure: dict) -> int:
    """Verified nodes drawn in a tree figure (the client's JSON of the plot)."""
    data = json.loads(figure["plot"])["data"]
    return sum(len(t["x"]) for t in data if t.get("meta") in ("root", "accepted", "missed", "unreached"))


@pytest.mark.parametrize("draft", list(SOURCES))
def test_each_draft_source_fills_every_view(app_url, draft):
    c = client(app_url)
    for _ in range(4):
        v = views(c.predict(*inputs(draft=draft), api_name="/step"), c)
    tr = v["trace"]
    assert tr["kind"] == "spec"
    assert tr["draft_source"] == {"head": "head", "ngram": "ngram:1-12", "exit": "exit:1"}[draft]
    assert f"draft: **{SOURCES[draft]}**" in v["summary"]  # the step header names the source
    n = len(tr["tree"]["nodes"])
    assert tree_nodes(v["tree"]) == n and v["mask"].count("<tr data-node=") == n
    assert v["logits"].count("<tr data-node=") == n and v["pointers"].count("<tr data-node=") == n
    assert v["moves"].count("<li data-move=") == len(tr["accept"]["moves"]) + 1
    assert v["kv_slots"].count("data-status='freed'") == n - len(tr["accept"]["path"])
    assert ("no KV pool of its own" in v["kv_table"]) == (draft == "exit")
    assert ("writes no K/V" in v["kv_table"]) == (draft == "ngram")
    assert (len(tr["draft"]["levels"]) == 0) == (draft == "ngram")  # exit levels sit at L + level
    best_plot, budget, table = c.predict(api_name="/best_tree")
    assert json.loads(best_plot["plot"])["layout"]["title"]["text"].startswith(f"Step {tr['step']}:")
    assert "data-table='continuation'" in table
    _, _, cal = c.predict(api_name="/calibration")
    assert "data-prob-count" in cal
    # beside τ: what the bench measured for this draft (the fixture's route at 8/5/4)
    measured = {"head": "math reasoning 3.30 (1.20×), MT-bench 1.60 (0.80×)",
                "ngram": "summarization 2.40 (1.70×), QA 1.20 (0.90×)", "exit": "math reasoning 2.90 (0.70×)"}
    assert f"for this draft ({tr['draft_source']} at 8/5/4; the speedup" in v["bench"]
    assert measured[draft] in v["bench"] and "is the task, not a bug" in v["bench"]
    assert "Bench τ" not in v["summary"]  # shown once beside the steps, not in every step's summary


def test_an_ngram_step_without_a_match_decodes_one_token(app_url):
    """A step whose last tokens never occurred before drafts nothing: the root alone is verified,
    and every view says so instead of failing."""
    c = client(app_url)
    for _ in range(40):
        v = views(c.predict(*inputs(draft="ngram", ngram_min=3, ngram_max=12), api_name="/step"), c)
        tr = v["trace"]
        if tr["kind"] == "spec" and len(tr["tree"]["nodes"]) == 1:
            break
    else:
        pytest.fail("no n-gram step without a match in 40 steps")
    note = "no earlier occurrence of the last tokens: nothing drafted, this step decodes one token"
    assert note in v["summary"] and "τ = 1" in v["summary"]
    figure = json.loads(v["tree"]["plot"])
    assert note in figure["layout"]["title"]["text"].replace("<br>", " ") and tree_nodes(v["tree"]) == 1
    assert v["mask"].count("<tr data-node=") == 1 and v["logits"].count("<tr data-node=") == 1
    assert v["moves"].count("<li data-move=") == 1 and "Bonus" in v["moves"]
    best_plot, budget, table = c.predict(api_name="/best_tree")
    assert note in json.loads(budget["plot"])["layout"]["annotations"][0]["text"]  # nothing to plot: it says why
    assert "This step had no draft tree" in table


def test_compare_draft_sources_at_one_tree(app_url):
    from workbench.app.compare import MODES

    c = client(app_url)
    out = compared(c.predict(*inputs(max_new_tokens=6, draft="exit"), 6, False, MODES[1], api_name="/compare"))
    status, summary = out["status"], out["summary"]
    assert status.startswith("Done: 4 runs")
    for name in ("vanilla", "head", "ngram:1-12", "exit:1"):
        assert f"data-method='{name}'" in summary
    assert "data-method='linear'" not in summary and "same tokens" in summary
    assert "eagle2(num_steps=5, topk=4, num_draft_tokens=8, draft=ngram:1-12)" in summary
    elsewhere = summary.split("data-table='elsewhere'")[1]  # the n-gram and exit rows in SGLang / vLLM / EAGLE words
    assert "--speculative-algorithm NGRAM" in elsewhere and "no early-exit draft (exit:1)" in elsewhere
    assert {t["name"] for t in figure(out["tau"])["data"]} == {"vanilla", "head", "ngram:1-12", "exit:1"}
    trees = [out[name] for name in ("tree-1", "tree-2", "tree-3")]
    assert [figure(t)["layout"]["title"]["text"].split(" · ")[0] for t in trees] == ["head", "ngram:1-12", "exit:1"]
    assert [t["label"].split(":")[0] for t in trees] == ["head", "ngram", "exit"]  # labelled by the run drawn
    later = c.predict(3, api_name="/compare_step")  # the step slider redraws the same three runs
    assert [figure(f)["layout"]["title"]["text"].split(" · ")[0] for f in later] == ["head", "ngram:1-12", "exit:1"]
    bad = c.predict(*inputs(exit_layers=5), 6, False, MODES[1], api_name="/compare")
    assert bad[0].startswith("⚠️") and "exit:5: the target has 2 layers" in bad[0]
    methods = c.predict(*inputs(max_new_tokens=4, draft="ngram"), 4, False, MODES[0], api_name="/compare")
    assert methods[0].startswith("Done: 5 runs")  # the methods all draft with the head


def test_examples_name_their_route_and_fill_the_prompt(app_url):
    from workbench.app.ui import example_label, load_examples

    examples = load_examples()
    routes = {e.get("route") for e in examples}
    assert {"the EAGLE head", "n-gram (prompt lookup)"} <= routes
    spec_bench = {json.loads(line)["turns"][0] for line in
                  (ROOT / "workbench" / "data" / "spec_bench_questions.jsonl").read_text().splitlines()}
    tasks = {json.loads(line)["category"] for line in
             (ROOT / "workbench" / "data" / "spec_bench_questions.jsonl").read_text().splitlines()}
    for e in examples:  # the prompts written for the app are not Spec-Bench's (evaluation only)
        assert (e["prompt"] in spec_bench) == ("question_id" in e), e["category"]
        assert e["task"] in tasks | {"mt_bench"}, e  # the task whose bench τ stands for it
    c = client(app_url)
    for e in examples:
        label = example_label(e)
        assert ("suits" in label) == ("route" in e) and e.get("route", "") in label
        assert c.predict(label, api_name="/example") == e["prompt"]


@pytest.mark.parametrize("draft, expected", [
    ("random:1", dict(draft="head", exit_layers=1)),  # N at most the layers - 1 (the tiny target has 2)
    ("exit:1", dict(draft="exit", exit_layers=1)),
    ("ngram:2-5", dict(draft="ngram", ngram_min=2, ngram_max=5)),
    ("model", dict(draft="model")),  # a draft model beside the target (directory made by the test)
])
def test_the_page_starts_with_the_draft_the_app_loaded(tiny_model, tmp_path, draft, expected):
    from workbench.app.ui import default_settings, warm_up
    from workbench.pipeline import Workbench

    if draft == "model":
        draft = f"model:{make_tiny_app_model(tmp_path / 'draft', seed=2)}"
    wb = Workbench.load(target=str(tiny_model), draft=draft, dtype="fp32")
    settings = default_settings(wb)
    assert {k: settings.values()[k] for k in expected} == expected
    assert warm_up(wb) > 0  # the warm-up steps with that draft (no head needed)


@pytest.fixture(scope="module")
def model_app(tiny_model, tmp_path_factory):
    """The app started with ``--draft model:DIR``: a tiny draft model with the target's words and
    other weights (no head is loaded). (url, the draft model's directory)."""
    from workbench.app.ui import build_app, launch
    from workbench.pipeline import Workbench

    draft_dir = make_tiny_app_model(tmp_path_factory.mktemp("tiny-draft-model"), seed=2)
    wb = Workbench.load(target=str(tiny_model), draft=f"model:{draft_dir}", dtype="fp32")
    demo = build_app(wb, "tiny test model and draft model")
    port = free_port()
    launch(demo, port=port, block=False)
    yield f"http://127.0.0.1:{port}/", draft_dir
    demo.close()


def test_an_app_started_with_a_draft_model_offers_it_and_steps_and_compares_with_it(model_app):
    from workbench.app.compare import MODES

    url, draft_dir = model_app
    c = client(url)
    name = f"model:{draft_dir}"
    for _ in range(3):
        v = views(c.predict(*inputs(draft="model"), api_name="/step"), c)
    tr = v["trace"]
    assert tr["kind"] == "spec" and tr["draft_source"] == name
    assert f"draft: **draft model ({draft_dir})**" in v["summary"]
    assert "no KV pool of its own" not in v["kv_table"] and "writes no K/V" not in v["kv_table"]  # its own pool
    done = views(c.predict(*inputs(draft="model", max_new_tokens=12), api_name="/run_to_end"), c)
    assert done["status"].startswith("Finished")
    with pytest.raises(Exception, match="head"):  # no head loaded: the selector does not offer it
        c.predict(*inputs(draft="head"), api_name="/step")
    out = compared(c.predict(*inputs(max_new_tokens=6, draft="model"), 6, False, MODES[1], api_name="/compare"))
    assert out["status"].startswith("Done: 4 runs") and "same tokens" in out["summary"]
    for run in ("vanilla", "ngram:1-12", "exit:1", name):
        assert f"data-method='{run}'" in out["summary"]
    assert "data-method='head'" not in out["summary"]
    trees = [figure(out[slot])["layout"]["title"]["text"].split(" · ")[0] for slot in ("tree-1", "tree-2", "tree-3")]
    assert trees == ["ngram:1-12", "exit:1", name]
    assert "--speculative-algorithm STANDALONE" in out["summary"].split("data-table='elsewhere'")[1]
    methods = compared(c.predict(*inputs(max_new_tokens=4, draft="model"), 4, False, MODES[0], api_name="/compare"))
    assert methods["status"].startswith("Done: 5 runs") and "same tokens" in methods["summary"]  # drafted by it


def test_the_bench_asset_loader(tmp_path):
    from workbench.app.draft_bench import load_draft_bench
    from workbench.engine.config import SpecConfig

    assert load_draft_bench(tmp_path / "absent.json") is None  # nothing shipped yet: nothing shown
    bench = load_draft_bench(BENCH)
    head = SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=4)
    assert bench.route_for(head).label == "head 4/3/2"
    near = SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=5)
    assert bench.route_for(near).label == "head 4/3/2"  # the nearest tree
    assert bench.route_for(SpecConfig.from_knobs("eagle2", num_steps=6, topk=4, num_draft_tokens=10)).label == \
        "head 8/5/4"
    assert bench.route_for(SpecConfig.from_knobs("eagle2", draft="ngram:2-5")) is None
    assert bench.note_html(SpecConfig.from_knobs("eagle2", draft="exit:28")) == ""  # not measured: no line
    line = bench.note_html(SpecConfig.from_knobs("eagle2", num_steps=4, topk=2, num_draft_tokens=5))
    assert "at 4/3/2, the measured tree nearest yours" in line and "math reasoning 3.10 (1.50×), QA 2.00" in line
    assert "<details><summary>how it was measured</summary>fixture CPU, fp32" in line  # the command folded away
    assert "Quoted from the bench run of 2026-01-02 (docs/bench/fixture.md), not measured on this page" in line
    good = json.loads(BENCH.read_text())
    for change, message in [
        (lambda d: d["meta"].pop("cpu"), "meta.cpu must be a str, got None"),
        (lambda d: d["meta"].update(max_new_tokens="64"), "meta.max_new_tokens must be a int"),
        (lambda d: d.update(routes={}), "routes must be a non-empty object"),
        (lambda d: d["routes"]["head 4/3/2"].update(draft="exit:x"), "write the early exit as exit:N"),
        (lambda d: d["routes"]["head 4/3/2"].update(tree="4/3"), "routes['head 4/3/2'].tree must be D/S/K"),
        (lambda d: d["routes"]["head 4/3/2"]["per_task"]["qa"].update(tau="2"),
         "routes['head 4/3/2'].per_task['qa'].tau must be a number >= 1"),
        (lambda d: d["routes"]["head 4/3/2"]["per_task"]["qa"].update(speedup=0),
         "per_task['qa'].speedup must be a number > 0"),
    ]:
        data = json.loads(json.dumps(good))
        change(data)
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match="bad.json: ") as err:
            load_draft_bench(path)
        assert message in str(err.value)


def test_a_malformed_bench_asset_costs_only_its_line(tiny_model, tmp_path, capsys):
    from workbench.app.ui import build_app
    from workbench.pipeline import Workbench

    path = tmp_path / "draft-sources.json"
    path.write_text(json.dumps({"meta": {}, "routes": {}}))
    wb = Workbench.load(target=str(tiny_model), draft="random:1", dtype="fp32")
    build_app(wb, draft_bench=path).close()  # the page is built all the same
    err = capsys.readouterr().err
    assert f"warning: {path}: meta.record must be a str, got None: the page shows no per-task τ" in err


def test_static_steps_and_calibration_fill_from_the_traces(app_url):
    from workbench.analysis.calibration import calibration_table

    c = client(app_url)
    tree = "[[0],[1],[0,0],[0,0,0]]"
    traces = [views(c.predict(*inputs(method="static", tree=tree, num_draft_tokens=5), api_name="/step"), c)["trace"]
              for _ in range(5)]
    tr = traces[-1]
    assert tr["method"] == "static" and tr["tree"]["shape"] == "static"
    assert sorted(n["rank_path"] for n in tr["tree"]["nodes"][1:]) == [[0], [0, 0], [0, 0, 0], [1]]
    cal = calibration_table(traces)
    assert cal["summary"]["nodes"] == 4 * 4  # 4 speculative steps x 4 drafts
    plot, _, table = c.predict(api_name="/calibration")  # what the Calibration tab draws when opened
    for b in cal["prob_bins"]:  # the session's table lists every bin with the traces' counts
        assert f"data-prob-count='{b['count']}'" in table
    series = {t["name"]: t for t in json.loads(plot["plot"])["data"]}
    assert sum(1 for b in cal["prob_bins"] if b["count"]) == len(series["draft probability → P(accept | tried)"]["x"])
    assert "perfectly calibrated" in series
    best_plot, best_budget, best_table = c.predict(api_name="/best_tree")  # the Best tree tab, when opened
    assert any(t.get("meta") == "left" for t in json.loads(best_plot["plot"])["data"])
    budget = json.loads(best_budget["plot"])
    assert budget["data"][0]["x"] == [2, 3, 4, 5]
    assert budget["data"][0]["y"][-1] == len(tr["accept"]["path"])  # greedy: the full tree's τ is the walk's
    assert "data-status='unknown'" in best_table  # past the first token the tree missed, nothing is known


def test_app_py_serves_a_tiny_model(tiny_model):
    port = free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", GRADIO_SERVER_PORT=str(port))  # Gradio's variable
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--target", str(tiny_model), "--draft", "random:1",
                             "--dtype", "fp32"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.5)
        c = client(f"http://127.0.0.1:{port}/")
        v = views(c.predict(*inputs(), api_name="/step"), c)
        assert v["trace"]["kind"] == "prefill"
    finally:
        proc.terminate()
        log = proc.communicate(timeout=30)[0]
    assert "warmed up" in log and f"serving on http://127.0.0.1:{port}" in log


def test_server_address_flags_win_over_gradio_variables():
    from workbench.app.address import server_address

    assert server_address(environ={}) == ("127.0.0.1", 7860)
    env = {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "8001"}
    assert server_address(environ=env) == ("0.0.0.0", 8001)
    assert server_address("127.0.0.1", 9000, env) == ("127.0.0.1", 9000)
    with pytest.raises(ValueError, match="GRADIO_SERVER_PORT must be a port number, got 'http'"):
        server_address(environ={"GRADIO_SERVER_PORT": "http"})
    with pytest.raises(ValueError, match="port must be in 1..65535, got 70000"):
        server_address(port=70000, environ={})


def test_app_py_refuses_a_bad_port_before_loading_anything():
    for argv, env, message in [(["--port", "99999"], {}, "argument --port: the port must be in 1..65535, got 99999"),
                               (["--port", "http"], {}, "argument --port: a port is a number, got 'http'"),
                               ([], {"GRADIO_SERVER_PORT": "0"}, "error: the port must be in 1..65535, got 0")]:
        done = subprocess.run([sys.executable, str(ROOT / "app.py"), *argv], cwd=ROOT, capture_output=True, text=True,
                              env=dict(os.environ, **env), timeout=60)
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "[app" not in done.stderr  # refused before the first loading stage
    helped = subprocess.run([sys.executable, str(ROOT / "app.py"), "--help"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert "random[:SEED], ngram[:MIN-MAX], exit:N or model:DIR" in " ".join(helped.stdout.split())


def test_a_step_that_accepts_nothing_says_why_and_offers_what_its_stop_cause_points_at(app_url):
    """The tiny random head misses often: such a step's status line says why, and where its stop
    cause names a knob (budget, width, frontier, depth), the page offers that knob's change;
    taking it sets that field only, never the prompt."""
    from workbench.app.guide import KNOB_OF

    c = client(app_url)
    prompt = "Why do cats purr?"
    for _ in range(40):
        v = views(c.predict(*inputs(prompt=prompt, max_new_tokens=128), api_name="/step"), c)
        tr = v["trace"]
        if tr["kind"] == "spec" and not tr["accept"]["accepted"] and KNOB_OF.get(tr["stop"]["cause"]) in tr["stop"]["catch"]:
            break
    else:
        pytest.fail("no step without an accepted draft whose cause names a knob in 40 steps")
    assert f"Nothing accepted at step {tr['step']}: " in v["status"]
    knob = KNOB_OF[tr["stop"]["cause"]]
    value = tr["stop"]["catch"][knob]
    assert f"{knob} = {value} would have caught it on this step" in v["status"]
    *filled, status = c.predict(*inputs(prompt=prompt, max_new_tokens=128), api_name="/take_suggestion")
    got = dict(zip(setting_names(), filled))
    assert got[knob] == value and got["prompt"] == {"__type__": "update"}  # the prompt: left as it is
    assert status.startswith(f"Set {knob} = {value} (the prompt is yours, unchanged)")
