"""The draft sources' one list, ``drafts.registry.SOURCES``: a source registered there (here a
tiny "repeat the last token" drafter, one class and its line) parses, names itself, shows in the
``--draft`` grammar, the app's selector and the frameworks table, and decodes through the engine
and the app with greedy output equal to plain decoding; and every registered source is in every
list a user reads."""

from pathlib import Path

import pytest

from helpers import random_prompts, tiny_pair
from workbench.engine.config import SpecConfig, parse_spec
from workbench.engine.draft import DraftPhase
from workbench.engine.draft_source import GRAMMAR, DraftSource, parse_draft
from workbench.engine.drafts import registry
from workbench.engine.drafts.base import FRAMEWORKS, Needs, nothing
from workbench.engine.engine import Engine
from workbench.engine.frameworks import framework_flags
from workbench.engine.tree import Candidates

ROOT = Path(__file__).resolve().parent.parent


class RepeatSource:
    """``repeat``: no model; each request's draft is a chain of its last token, repeated."""

    kind = "repeat"
    grammar = "repeat"
    choice = "repeat the last token"
    model_free = True
    needs = Needs()

    def parse(self, arg):
        if arg:
            raise ValueError(f"draft source 'repeat:{arg}': write it as repeat")
        return {}

    def check(self, source):
        pass

    def check_target(self, source, num_layers):
        pass

    def name(self, source):
        return "repeat"

    def label(self, source, num_layers=None):
        return "repeat (the last token again)"

    def frameworks(self, spec):
        return {name: "no repeat draft" for name in FRAMEWORKS}

    def build(self, source, target, draft):
        return RepeatDraft()


class RepeatDraft:
    """The drafter: no forward, no KV; the tree is a chain of ``num_steps`` copies of the last token."""

    level_offset, taps, reads_pending, kv, graphed, name = 0, (), False, None, None, "repeat"

    def scratch_slots(self, spec):
        return 0

    def start(self, num_slots, target_kv, cuda_graphs, draft_scratch):
        pass

    def extend(self, reqs, table):
        return nothing(reqs)

    def grow(self, reqs, table, extended, spec, chain, generator):
        trees = []
        for r in reqs:
            tree, last = Candidates(), (r.prompt_ids + r.output_ids)[-1]
            for depth in range(1, spec.num_steps + 1):
                tree.add(last, 1.0, 1.0, depth - 2, depth, 0)  # parent: the node before (-1: the root)
            trees.append(tree)
        return DraftPhase(trees, [[] for _ in reqs], [[] for _ in reqs])


@pytest.fixture
def repeat(monkeypatch):
    """The repeat source registered for one test."""
    monkeypatch.setitem(registry.SOURCES, "repeat", RepeatSource())
    return DraftSource("repeat")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny-registry"))


def test_a_registered_source_is_everywhere_a_source_is(repeat):
    from workbench.app.handlers import draft_words
    from workbench.app.state import draft_choices

    assert parse_draft("repeat") == repeat and repeat.name == "repeat" and repeat.model_free
    assert repeat.label(2) == "repeat (the last token again)"
    with pytest.raises(ValueError, match="write it as repeat"):
        parse_draft("repeat:3")
    assert registry.grammar().endswith("exit:N, model:DIR or repeat")  # what --draft's help lists
    assert ("repeat the last token", "repeat") in draft_choices()  # the app's selector
    assert draft_words({"draft": "repeat"}) == "repeat the last token"  # the settings' label
    spec = parse_spec("eagle2:6/5/1@repeat")  # the bench's method names carry it
    assert spec.draft == repeat and spec.name == "eagle2:6/5/1@repeat"
    assert framework_flags(spec) == {name: "no repeat draft" for name in FRAMEWORKS}


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


def test_the_app_steps_with_a_registered_source(tmp_path, repeat):
    from workbench.app.state import Session, Settings
    from workbench.app.tiny import make_tiny_app_model
    from workbench.pipeline import Workbench

    wb = Workbench.load(target=str(make_tiny_app_model(tmp_path / "tiny", seed=1)), draft="ngram", dtype="fp32")
    texts = {}
    for draft in ("ngram", "repeat"):
        session = Session.start(wb, Settings(prompt="the cat sat on the mat", draft=draft, max_new_tokens=8))
        while session.step():
            pass
        assert session.engine.spec.draft.kind == draft
        texts[draft] = session.engine.requests[0].output_ids
    assert texts["repeat"] == texts["ngram"]  # greedy: the same tokens, whatever drafted them


# ---- every registered source in every list a user reads ------------------------------------------
EXAMPLES = {"head": DraftSource(), "ngram": DraftSource("ngram"), "exit": DraftSource("exit", num_layers=1),
            "model": DraftSource("model", path="/m/small")}  # one of each kind, for what needs one


def test_every_registered_source_is_in_every_user_facing_list():
    from helpers import listed_paths
    from workbench.app.state import draft_choices

    assert set(EXAMPLES) == set(registry.SOURCES), "give the new source an example here"
    choices = dict((kind, label) for label, kind in draft_choices())
    app_help = " ".join(_app_help().split())
    cli_help = " ".join(_cli_help().split())
    listed = listed_paths()
    for kind, source in registry.SOURCES.items():
        assert choices.get(kind) == source.choice, f"the app's draft selector lacks {kind}"
        assert source.grammar in GRAMMAR and source.grammar in app_help, f"--draft's help lacks {source.grammar}"
        assert source.grammar in cli_help, f"the CLI's --draft help lacks {source.grammar}"
        module = type(source).__module__.replace(".", "/") + ".py"
        assert module in listed, f"docs/code.md's file map lacks {module}"
        spec = SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=4, draft=EXAMPLES[kind])
        flags = framework_flags(spec)
        assert list(flags) == list(FRAMEWORKS) and all(flags.values()), f"frameworks lacks {kind}"
        assert parse_spec(spec.name) == spec, f"the bench's method names lose {kind}"
    assert len(set(choices.values())) == len(choices), "two sources share a label in the app"


def _cli_help() -> str:
    """The CLI's model flags (``generate``, ``bench``, ...), ``--draft`` among them."""
    import argparse

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


# ---- Workbench.engine: every setting's draft checked against what is loaded ----------------------
def test_the_workbench_engine_checks_every_setting_of_a_policy(tmp_path):
    from workbench.app.tiny import make_tiny_app_model
    from workbench.engine.policy import Off
    from workbench.errors import UserError
    from workbench.pipeline import Workbench

    wb = Workbench.load(target=str(make_tiny_app_model(tmp_path / "tiny", seed=1)), draft="ngram", dtype="fp32")
    assert wb.loaded_draft == DraftSource("ngram") and wb.draft is None  # nothing loaded beside the target
    with pytest.raises(UserError, match="drafts with an EAGLE head, but none is loaded"):
        wb.engine(policy="adaptive:linear:1,linear:3")
    with pytest.raises(UserError, match="exit:2: the target has 2 layers"):
        wb.engine(policy="schedule:1-2=linear:2@exit:2,3+=off")
    with pytest.raises(UserError, match="not the one loaded .* load it with --draft model:/m/small"):
        wb.engine(SpecConfig.from_knobs("linear", num_steps=2, draft="model:/m/small"))
    eng = wb.engine(SpecConfig.from_knobs("linear", num_steps=2, draft="ngram"), policy="fixed", kv_slots=64)
    assert eng.policy.name == "fixed" and eng.settings[0].draft == DraftSource("ngram")
    assert wb.engine(policy=Off()).drafter is None
    with pytest.raises(ValueError, match="policy fixed runs the method given with it"):
        wb.engine(policy="fixed")


def test_the_apps_draft_boxes_fill_real_fields_of_registered_sources():
    """The app's number boxes per source (``app.state.DRAFT_INPUTS``) name a registered kind, a
    field of ``DraftSource`` and a field of ``Settings``: a source renamed, or a field dropped,
    fails here, not on a page."""
    from dataclasses import fields

    from workbench.app.state import DRAFT_INPUTS, Settings

    source_fields = {f.name for f in fields(DraftSource)}
    setting_fields = {f.name for f in fields(Settings)}
    assert DRAFT_INPUTS and set(DRAFT_INPUTS) <= set(registry.SOURCES)
    for kind, boxes in DRAFT_INPUTS.items():
        assert set(boxes) <= source_fields, kind
        assert {name for name, _ in boxes.values()} <= setting_fields, kind
