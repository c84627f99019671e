"""eagle2 without tree flags runs the tree the head benchmark measured fastest on this kind of CPU:
the pick follows the records (a test reads them), level speedups go to the smaller tree, another
kind of CPU gets the best measured pick with a line that says so, and SGLang's and EAGLE-2's own
trees are one flag away."""

import argparse
import json

import pytest

from tools import default_trees
from workbench import default_tree
from workbench.cpu_choices import cpu_kind
from workbench.errors import UserError
from workbench.flags import add_spec_args, default_tree_pick, tree_knobs


def test_the_asset_is_what_the_current_records_say():
    assert default_trees.main(["--check"]) == 0, "python -m tools.default_trees"
    for e in json.loads(default_tree.ASSET.read_text()):
        record = json.loads((default_trees.ROOT / e["record"].replace(".md", ".json")).read_text())
        assert e["speedups"]["eagle2:4/3/2"] == record["summary"]["eagle2:4/3/2"]["speedup_vs_vanilla"]


def test_level_speedups_go_to_the_tree_that_verifies_fewest_tokens():
    assert default_tree.pick({"speedups": {"eagle2:4/3/2": 1.20, "eagle2:6/4/4": 1.26, "eagle2:8/5/4": 1.0}}) \
        == "eagle2:4/3/2"  # within 10 %: level in one pass, the smaller step
    assert default_tree.pick({"speedups": {"eagle2:4/3/2": 1.10, "eagle2:6/4/4": 1.30}}) == "eagle2:6/4/4"
    # a record of several rounds: level where the rounds' ranges overlap the fastest's, not within 10 %
    rounds = {"speedups": {"eagle2:4/3/2": 1.33, "eagle2:6/4/4": 1.37, "eagle2:8/5/4": 1.25},
              "ranges": {"eagle2:4/3/2": [1.31, 1.41], "eagle2:6/4/4": [1.34, 1.38], "eagle2:8/5/4": [1.19, 1.24]}}
    assert default_tree.level_with_best(rounds) == ["eagle2:4/3/2", "eagle2:6/4/4"]  # 8/5/4 within 10 %, not level
    assert default_tree.pick(rounds) == "eagle2:4/3/2"
    apart = {**rounds, "ranges": {**rounds["ranges"], "eagle2:4/3/2": [1.25, 1.33]}}
    assert default_tree.pick(apart) == "eagle2:6/4/4"  # its range clear below 6/4/4's: not level


def test_the_asset_keeps_each_records_rounds_range():
    for e in json.loads(default_tree.ASSET.read_text()):
        record = json.loads((default_trees.ROOT / e["record"].replace(".md", ".json")).read_text())
        runs = record["meta"].get("rounds") or 1
        assert ("ranges" in e) == (runs > 1)
        for name, (lo, hi) in e.get("ranges", {}).items():
            ups = record["summary"][name]["rounds"]["speedup_vs_vanilla"]
            assert (lo, hi) == (min(ups), max(ups)) and lo <= e["speedups"][name] <= hi


def test_a_kind_without_a_record_gets_the_best_pick_and_is_told(tmp_path):
    path = tmp_path / "trees.json"
    path.write_text(json.dumps([
        {"record": "a.md", "date": "2026-12-01", "kind": "AVX2 only", "cpu": "2-core X with AVX2 only", "dtype": "fp32",
         "speedups": {"eagle2:4/3/2": 1.2, "eagle2:8/5/4": 0.9}, "pick": "eagle2:4/3/2"},
        {"record": "b.md", "date": "2026-12-02", "kind": "AMX", "cpu": "2-core Y with AMX", "dtype": "fp32",
         "speedups": {"eagle2:6/4/4": 1.5}, "pick": "eagle2:6/4/4"}]))
    here = default_tree.measured_pick("AVX2 only", "fp32", path)
    assert here.here and here.tree == (4, 3, 2) and "on this kind of CPU" in here.line()
    assert "is level with it" not in here.line()  # it is the fastest too
    assert "--tree-preset sglang (0.90x there)" in here.line()
    away = default_tree.measured_pick("AVX-512", "fp32", path)
    assert not away.here and away.setting == "eagle2:6/4/4" and "none measured on this one" in away.line()
    assert default_tree.measured_pick("AVX2 only", "fp32", tmp_path / "none.json") is None


def args_of(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_spec_args(p)
    p.add_argument("--draft")
    p.add_argument("--device")
    p.add_argument("--dtype", default="fp32")
    return p.parse_args(list(argv))


def test_the_flags_choose_the_tree(monkeypatch):
    monkeypatch.setattr("workbench.cpu_choices.cpu_flags", lambda: {"avx2"})
    measured = default_tree.measured_pick("AVX2 only", "fp32")
    assert tree_knobs(args_of("--method", "eagle2")) == dict(zip(("num_draft_tokens", "num_steps", "topk"),
                                                                  measured.tree))
    assert tree_knobs(args_of("--method", "eagle2", "--tree-preset", "sglang")) == \
        {"num_draft_tokens": 8, "num_steps": 5, "topk": 4}
    assert tree_knobs(args_of("--method", "eagle2", "--topk", "3"))["topk"] == 3  # a flag given: the flags rule
    assert default_tree_pick(args_of("--method", "eagle2", "--draft", "ngram")) is None  # the records are the head's
    assert default_tree_pick(args_of("--method", "linear")) is None
    with pytest.raises(UserError, match="give it or --num-steps"):
        tree_knobs(args_of("--method", "eagle2", "--tree-preset", "sglang", "--topk", "2"))
    with pytest.raises(UserError, match="a preset is an eagle2 tree"):
        tree_knobs(args_of("--method", "linear", "--tree-preset", "eagle2-paper"))


def test_the_kind_of_a_cpu_is_its_widest_extension():
    assert [cpu_kind(f) for f in ({"avx2"}, {"avx2", "avx512f"}, {"avx512f", "avx512_bf16"}, {"amx_bf16"}, set())] == \
        ["AVX2 only", "AVX-512", "AVX-512 BF16", "AMX", "no AVX2"]
