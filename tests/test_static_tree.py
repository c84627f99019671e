"""The static (EAGLE-1) tree: its default shape, validation of a given shape, and that every step
drafts exactly that shape from the same head the dynamic tree uses."""

import pytest

from helpers import random_prompts, tiny_pair
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.engine.static_tree import EAGLE1_TREE, default_static_tree, read_tree, validate_tree


def parse_tree(text: str, max_rank: int, max_depth: int, max_nodes: int):
    """The tree box's text as the engine reads it: the one reader, then the one check."""
    return validate_tree(read_tree(text), max_rank, max_depth, max_nodes)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny_static"))


def test_default_is_eagle1_cut_then_extended_breadth_first():
    assert len(EAGLE1_TREE) == 25 and default_static_tree(26) == EAGLE1_TREE
    assert default_static_tree(8) == ((0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2))
    for d in (2, 5, 8, 16, 26, 27, 32, 60, 256):
        paths = default_static_tree(d)
        assert len(paths) == d - 1 and len(set(paths)) == d - 1
        assert all(len(p) == 1 or p[:-1] in paths for p in paths)  # closed under ancestors
        assert set(EAGLE1_TREE[: d - 1]) <= set(paths)
    assert set(default_static_tree(32)) - set(EAGLE1_TREE) == {(0, 3), (1, 2), (1, 3), (2, 2), (2, 3), (3, 1)}


@pytest.mark.parametrize("text, message", [
    ("[[0], [0, 1", "not valid JSON"),
    ("{}", "non-empty list of rank paths"),
    ("[]", "non-empty list of rank paths"),
    ("[[0], []]", "not a non-empty list of integer ranks"),
    ("[[0], [true]]", "not a non-empty list of integer ranks"),
    ("[[0], [0, -1]]", "ranks must be in 0..15"),
    ("[[0], [0, 0], [0, 0]]", "listed twice"),
    ("[[0], [1, 0]]", "has no parent: add [1]"),
    ("[[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]", "at most 3 levels"),
])
def test_bad_tree_gets_a_clear_error(text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        parse_tree(text, 16, 3, 255)


def test_too_many_nodes_and_sorting():
    with pytest.raises(ValueError, match="at most 2"):
        parse_tree("[[0],[1],[2]]", 16, 16, 2)
    assert parse_tree("[[0,0],[1],[0]]", 16, 16, 255) == ((0,), (1,), (0, 0))
    assert read_tree("  ") is None
    # the config reads the tree box's text with the same reader
    assert SpecConfig.from_knobs("static", tree="[[0,0],[1],[0]]").tree == ((0,), (1,), (0, 0))
    with pytest.raises(ValueError, match=r"tree is not valid JSON \(.*\); write it like"):
        SpecConfig.from_knobs("static", tree="[[0], [0, 1")
    spec = SpecConfig.static(tree=[[0, 0], [1], [0]])
    assert (spec.num_steps, spec.topk, spec.num_draft_tokens) == (2, 2, 4)


@pytest.mark.parametrize("spec", [SpecConfig.static(16), SpecConfig.static(tree=[[1], [1, 3], [0], [1, 3, 2]])],
                         ids=lambda s: s.describe())
def test_every_step_drafts_the_shape_from_the_same_head(pair, spec):
    target, head = pair
    prompts = random_prompts(2, 16, seed=4)
    static = Engine(target, head, spec, trace=True)
    dynamic = Engine(target, head, SpecConfig("eagle2", num_steps=spec.num_steps, topk=spec.topk, num_draft_tokens=spec.num_draft_tokens), trace=True)
    for eng in (static, dynamic):
        eng.add_requests(prompts, 12)
    static.step(), dynamic.step()  # prefill
    s_traces, d_traces = static.step(), dynamic.step()  # the same context: same first step
    for s, d in zip(s_traces, d_traces):
        paths = [tuple(n["rank_path"]) for n in s["tree"]["nodes"][1:]]
        assert sorted(paths) == sorted(spec.tree) and s["tree"]["shape"] == "static"
        assert s["method"] == "static" and not s["draft"]["dropped"]
        # the root's children: same head, same context -> the same tokens at the same ranks
        d_first = {tuple(c["rank_path"]): c["token"] for c in d["tree"]["nodes"][1:] if len(c["rank_path"]) == 1}
        d_all = {c["index"]: c for c in d["draft"]["candidates"]}
        level1 = [d_all[i]["token"] for i in range(spec.topk)]
        for n in s["tree"]["nodes"][1:]:
            if n["depth"] == 1:
                assert n["token"] == level1[n["rank_path"][0]]
                if tuple(n["rank_path"]) in d_first:
                    assert d_first[tuple(n["rank_path"])] == n["token"]


def test_cli_static_trace_records_method_and_paths(tmp_path, capsys):
    import json

    from workbench.testing.tiny import make_tiny_app_model
    from workbench.cli import main

    tiny = make_tiny_app_model(tmp_path / "tiny")
    trace = tmp_path / "trace.jsonl"
    tree = [[0], [1], [0, 0], [0, 1], [0, 0, 0]]
    rc = main(["generate", "--target", str(tiny), "--draft", "random", "--method", "static", "--tree", json.dumps(tree),
               "--prompt", "tell me about the cat", "--max-new-tokens", "8", "--trace", str(trace), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    spec = [s for s in steps if s["kind"] == "spec"]
    assert spec and all(s["method"] == "static" for s in steps)
    for s in spec:
        assert sorted(n["rank_path"] for n in s["tree"]["nodes"][1:]) == sorted(tree)
    assert out["accept_lengths"] == [s["accept_length"] for s in spec]
    assert main(["generate", "--target", str(tiny), "--method", "static", "--tree", "[[1,0]]", "--prompt", "x"]) == 2
    assert "tree path [1, 0] has no parent" in capsys.readouterr().err
