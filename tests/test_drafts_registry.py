"""The draft sources' one list, ``drafts.registry.SOURCES``: a source written as one module
(``tests/draft_repeat.py``: one integer field) and registered with one line works through
``generate --draft`` and its ``--help``, the app's selector and number boxes, the bench's
method names, the step cost and the figures' colours, with greedy output equal to plain
decoding; every registered source is in every list a user reads; and no code outside the
drafts package asks which kind a source is."""

import argparse
import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from draft_repeat import RepeatSource
from helpers import random_prompts, tiny_pair
from workbench.engine.config import SpecConfig, parse_spec
from workbench.engine.drafts import registry
from workbench.engine.drafts.exit import ExitSource
from workbench.engine.drafts.head import HeadSource
from workbench.engine.drafts.model import ModelSource
from workbench.engine.drafts.ngram import NgramSource
from workbench.engine.engine import Engine
from workbench.engine.frameworks import FRAMEWORKS, framework_flags

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repeat(monkeypatch):
    """The repeat source registered for one test: its one registry line."""
    monkeypatch.setitem(registry.SOURCES, "repeat", RepeatSource)
    return RepeatSource(3)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny-registry"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from workbench.testing.tiny import make_tiny_app_model

    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-registry-app"), seed=1)


def test_a_registered_source_parses_names_and_is_listed(repeat):
    from workbench.app.handlers import draft_words
    from workbench.app.state import draft_choices, setting_names
    from workbench.measure.methods import parse_methods
    from workbench.viz.compare import run_colours

    assert registry.parse_draft("repeat:3") == repeat and repeat.name == "repeat:3" and repeat.model_free
    assert registry.parse_draft("repeat") == RepeatSource(2)  # its field's default
    assert repeat.label(2) == "repeat (the last token 3 times)"
    for bad, message in [("repeat:x", "write it as repeat:N"), ("repeat:0", "N must be in 1..16")]:
        with pytest.raises(ValueError, match=message):
            registry.parse_draft(bad)
    assert "repeat[:N]" in " ".join(_cli_help().split())  # generate --help
    assert ("repeat the last token", "repeat") in draft_choices()  # the app's selector
    assert "repeat_copies" in setting_names()  # and its number box
    assert draft_words({"draft": "repeat", "repeat_copies": 3}) == "repeat:3"  # the settings' label
    spec = parse_spec("eagle2:6/5/1@repeat:3")  # the method names carry it
    assert spec.draft == repeat and spec.name == "eagle2:6/5/1@repeat:3"
    (method,) = parse_methods("linear:3@repeat:3")  # the benchmark's --methods
    assert method.spec == SpecConfig.linear(3, draft=repeat)
    with pytest.raises(ValueError, match="choose one of head, ngram, exit, model, repeat"):
        parse_spec("linear:3@repaet")
    assert framework_flags(spec) == {name: "no repeat draft" for name in FRAMEWORKS}
    assert run_colours({"vanilla": {}, "repeat:3": {}})["repeat:3"] == RepeatSource.colour  # the figures' colour


def test_a_registered_source_gives_the_step_cost_its_estimate(repeat, monkeypatch):
    import workbench.measure.step_cost as sc

    verify = [{"tokens": n, "ms": float(n)} for n in sc.VERIFY_SIZES]
    monkeypatch.setattr(sc, "measure_verify_cost", lambda *a, **k: verify)
    wb = SimpleNamespace(target=SimpleNamespace(config=SimpleNamespace(num_layers=4)), cuda_graphs=False)
    assert sc._measure(wb, repeat) == ([(n, float(n)) for n in sc.VERIFY_SIZES], [(1, 0.03), (64, 0.03)])
    assert sc._measure(wb, ExitSource(1))[1] == [(n, n / 4) for n in sc.VERIFY_SIZES]  # N / L of a verify


@pytest.mark.parametrize("method", ["eagle2", "linear"])
def test_a_registered_source_decodes_like_plain_decoding(pair, repeat, method):
    target, _ = pair
    chain = {"topk": 1, "num_draft_tokens": 4} if method == "eagle2" else {}
    spec = SpecConfig.from_knobs(method, num_steps=3, **chain, draft=repeat)
    prompts = [[5, 7, 7, 7, 7]] + random_prompts(3, 16, seed=3)
    outputs, accepted = {}, 0
    for name, s in (("plain", SpecConfig("vanilla")), ("repeat", spec)):
        eng = Engine(target, None, s)
        eng.add_requests(prompts, 16)
        while not eng.done:
            eng.step()
        outputs[name] = [r.output_ids for r in eng.requests]
        accepted = sum(n - 1 for r in eng.requests for n in r.accept_lengths)
        eng.check_integrity()
    assert outputs["repeat"] == outputs["plain"]
    assert accepted > 0, "no repeated token was ever accepted: the walk and commit of its drafts never ran"


def test_generate_drafts_with_a_registered_source(tiny_dir, repeat, capsys):
    from workbench.cli import main

    outputs = {}
    for name, extra in (("plain", ["--method", "vanilla"]), ("repeat", ["--method", "eagle2", "--draft", "repeat:3"])):
        rc = main(["generate", "--target", str(tiny_dir), "--prompt", "the cat sat on the mat and the cat",
                   "--max-new-tokens", "12", "--json", *extra])
        out = capsys.readouterr()
        assert rc == 0, out.err
        outputs[name] = json.loads(out.out)["output_ids"]
    assert "draft=repeat:3" in out.err
    assert outputs["repeat"] == outputs["plain"]


def test_the_app_steps_with_a_registered_source_from_its_box(tiny_dir, repeat):
    import gradio as gr

    from workbench.app.state import Session, Settings
    from workbench.app.ui import build_app
    from workbench.pipeline import Workbench

    wb = Workbench.load(target=str(tiny_dir), draft="ngram", dtype="fp32")
    demo = build_app(wb)  # the page's inputs
    numbers = {b.elem_id: b for b in demo.blocks.values() if isinstance(b, gr.Number)}
    demo.close()
    assert numbers["repeat-copies"].label == "repeat copies" and numbers["repeat-copies"].value == 2
    texts = {}
    for draft in ("ngram", "repeat"):
        session = Session.start(wb, Settings.of(prompt="the cat sat on the mat", draft=draft, max_new_tokens=8,
                                                repeat_copies=3))
        while session.step():
            pass
        texts[draft] = session.engine.requests[0].output_ids
    assert session.engine.spec.draft == repeat
    assert texts["repeat"] == texts["ngram"]  # greedy: the same tokens, whatever drafted them
    with pytest.raises(ValueError, match="repeat copies must be a whole number"):
        Settings.of(prompt="the cat", draft="repeat", repeat_copies=2.5).build(wb)


# ---- every registered source in every list a user reads ------------------------------------------
EXAMPLES = {"head": HeadSource(), "ngram": NgramSource(), "exit": ExitSource(1),
            "model": ModelSource("/m/small")}  # one of each kind, for what needs one


def test_every_registered_source_is_in_every_user_facing_list():
    from helpers import listed_paths
    from workbench.app.state import draft_choices
    from workbench.viz.compare import run_colours

    assert set(EXAMPLES) == set(registry.SOURCES), "give the new source an example here"
    choices = dict((kind, label) for label, kind in draft_choices())
    app_help = " ".join(_app_help().split())
    cli_help = " ".join(_cli_help().split())
    listed = listed_paths()
    for kind, source in registry.SOURCES.items():
        assert choices.get(kind) == source.choice, f"the app's draft selector lacks {kind}"
        assert source.grammar in app_help, f"app.py's --draft help lacks {source.grammar}"
        assert source.grammar in cli_help, f"the CLI's --draft help lacks {source.grammar}"
        module = source.__module__.replace(".", "/") + ".py"
        assert module in listed, f"docs/code.md's file map lacks {module}"
        spec = SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=4, draft=EXAMPLES[kind])
        flags = framework_flags(spec)
        assert list(flags) == list(FRAMEWORKS) and all(flags.values()), f"frameworks lacks {kind}"
        assert parse_spec(spec.name) == spec, f"the bench's method names lose {kind}"
    assert len(set(choices.values())) == len(choices), "two sources share a label in the app"
    colours = run_colours({s.name: {} for s in EXAMPLES.values()})
    assert len(set(colours.values())) == len(colours), "two sources share a colour in the figures"


def test_the_sources_number_boxes_have_names_of_their_own():
    from dataclasses import fields

    from workbench.app.state import Settings

    names = list(registry.all_boxes())
    assert {"exit_layers", "ngram_min", "ngram_max"} <= set(names)
    assert len(names) == sum(len(registry.boxes(s)) for s in registry.SOURCES.values()), "two boxes share a name"
    assert not set(names) & {f.name for f in fields(Settings)}, "a box named like another setting"


def _cli_help() -> str:
    """The CLI's model flags (``generate``, ``bench``, ...), ``--draft`` among them."""
    from workbench.flags import add_model_args

    p = argparse.ArgumentParser(prog="python -m workbench generate")
    add_model_args(p)
    return p.format_help()


def _app_help() -> str:
    """``python app.py --help``, from its parser (the app's own ``--draft`` text)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("app_entry", ROOT / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    return app.build_parser().format_help()


# ---- which kind a source is: asked only inside the drafts package --------------------------------
def _kind_comparisons(tree: ast.AST) -> list[int]:
    """Lines that compare with a registered kind's word (``x == "exit"``, ``kind in ("head", ...)``,
    ``name.startswith("ngram")``) or a ``.kind`` with a variable (``loaded.kind != kind``); a step
    record's ``rec.kind == "spec"`` names no source."""
    kinds = set(registry.SOURCES)

    def names_kind(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in kinds
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(names_kind(e) for e in node.elts)

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            kind_attr = any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides)
            if any(names_kind(s) for s in sides) or (kind_attr and not all(isinstance(s, (ast.Attribute, ast.Constant))
                                                                           for s in sides)):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith") and any(names_kind(a) for a in node.args):
            lines.append(node.lineno)
    return lines


def test_no_code_outside_the_drafts_package_asks_which_kind_a_source_is():
    drafts = ROOT / "workbench" / "engine" / "drafts"
    found = []
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        if drafts in path.parents:
            continue
        for line in _kind_comparisons(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(ROOT)}:{line}")
    assert not found, f"ask the source (drafts/), not its kind: {found}"


def test_the_kind_check_finds_what_it_looks_for():
    code = ('a = s.draft.kind == "exit"\nb = kind in ("head", "model")\nc = name.startswith("ngram")\n'
            'd = loaded.kind != kind\ne = rec.kind == "spec"')
    assert _kind_comparisons(ast.parse(code)) == [1, 2, 3, 4]


# ---- Workbench.engine: every setting's draft checked against what is loaded ----------------------
def test_the_workbench_engine_checks_every_setting_of_a_policy(tiny_dir):
    from workbench.engine.policy import Off
    from workbench.errors import UserError
    from workbench.pipeline import Workbench

    wb = Workbench.load(target=str(tiny_dir), draft="ngram", dtype="fp32")
    assert wb.loaded_draft == NgramSource() and wb.draft is None  # nothing loaded beside the target
    with pytest.raises(UserError, match="drafts with the EAGLE head, but that is not the one loaded"):
        wb.engine(policy="adaptive:linear:1,linear:3")
    with pytest.raises(UserError, match="exit:2: the target has 2 layers"):
        wb.engine(policy="schedule:1-2=linear:2@exit:2,3+=off")
    with pytest.raises(UserError, match=r"not the one loaded .* load it \(--draft model:/m/small\)"):
        wb.engine(SpecConfig.from_knobs("linear", num_steps=2, draft="model:/m/small"))
    eng = wb.engine(SpecConfig.from_knobs("linear", num_steps=2, draft="ngram"), policy="fixed", kv_slots=64)
    assert eng.policy.name == "fixed" and eng.settings[0].draft == NgramSource()
    assert wb.engine(policy=Off()).drafter is None
    with pytest.raises(ValueError, match="policy fixed runs the method given with it"):
        wb.engine(policy="fixed")
