"""The head studies of experiments/: where the head's top-1 is right by token source, category
and confidence; where a tree's accepted paths go; the perfect-head ceiling and early exits."""

import pytest
import torch

from workbench.models.draft import random_head
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    target = load_target(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), num_kv_heads=2), torch.float32)
    return target, random_head(target, seed=3, std=0.2)


def test_studies_refuse_each_mistake_before_loading(capsys):
    from experiments.head_studies import main

    for argv, says in ((["agreement", "--mt-bench", "--coverage", "0"], "--coverage"),
                       (["agreement", "--mt-bench", "--temperature", "1"], "greedy answers"),
                       (["agreement"], "--held-out DATA or --mt-bench"),
                       (["agreement", "--held-out", ".", "--by-category"], "add --mt-bench"),
                       (["agreement", "--mt-bench", "--answer-tokens", "128"], "cuts the --held-out answers"),
                       (["agreement", "--held-out", ".", "--answer-tokens", "0"], "count >= 1"),
                       (["agreement", "--mt-bench", "--pair-counts", "."], "add --by-source"),
                       (["agreement", "--mt-bench", "--by-source", "--pair-counts", "/nonexistent"], "generate directory"),
                       (["trees", "--methods", "linear:1"], "--tree-use or --ceiling"),
                       (["trees", "--ceiling", "--methods", "vanilla"], "speculative method"),
                       (["trees", "--early-exit", "12,x", "--ceiling"], "whole numbers of layers"),
                       (["trees", "--early-exit", "12", "--tree-use"], "add --ceiling")):
        assert main(argv) == 2, argv
        assert says in capsys.readouterr().err, argv


def test_agreement_breaks_several_heads_down_on_the_same_answers(smollm2_dir, real_threads, tmp_path, capsys):
    import shutil

    from experiments.head_studies import main
    from workbench.models.heads import default_draft_dir

    shipped = default_draft_dir()
    bare = tmp_path / "bare"
    shutil.copytree(shipped, bare, ignore=shutil.ignore_patterns("hot_tokens.json"))
    assert main(["agreement", "--head", str(shipped), str(bare), "--dtype", "fp32", "-n", "2", "--max-new", "12",
                 "--mt-bench", "--by-category", "--by-source"]) == 0
    out = capsys.readouterr().out
    agree = [line for line in out.splitlines() if line.startswith("teacher-forced")]
    assert len(agree) == 2 and agree[0].split("]: ")[1] == agree[1].split("]: ")[1]
    tops = [line for line in out.splitlines() if "k most likely: k=2 " in line]
    assert len(tops) == 2 and tops[0] == tops[1]  # --coverage's default 2 4 10
    sources = [line for line in out.splitlines() if "where the target's token:" in line]
    assert len(sources) == 2 and sources[0] == sources[1] and "copies a token pair of the prompt" in sources[0]
    cats = [line for line in out.splitlines() if "by category" in line]
    assert len(cats) == 2 and cats[0].split("]: ")[1] == cats[1].split("]: ")[1]
    # questions 81 and 121 of the 80: one writing, one coding question, each its own group
    assert cats[0].split("]: ")[1].startswith("writing (1, ") and "; coding (1, " in cats[0]
    assert main(["trees", "--ceiling", "--early-exit", "29,31", "--methods", "linear:1"]) == 2
    assert "the target has 30 layers" in capsys.readouterr().err


def test_token_source_tells_a_copy_from_a_repeat_from_a_new_token():
    from experiments.token_sources import token_source

    toks = [1, 7, 8, 9, 2, 5, 6, 5, 6, 7, 8, 4]  # prompt: 1 7 8 9 2; answer from index 5
    assert token_source(toks, 5, 6) == "new"  # (5, 6) first seen here
    assert token_source(toks, 5, 8) == "answer"  # (5, 6) again
    assert token_source(toks, 5, 10) == "prompt"  # (7, 8) is in the prompt
    assert token_source(toks, 5, 9) == "new"  # (6, 7) nowhere before
    assert token_source(toks, 5, 11) == "new"  # (8, 4): 8 is in the prompt, the pair is not
    for bad in (5, 4, 12):  # the first answer token has no answer token before it; 12 is past the end
        with pytest.raises(ValueError, match="not an answer token"):
            token_source(toks, 5, bad)


def test_top1_by_source_splits_the_step1_top1_of_measure_head(tiny, tmp_path):
    from collections import Counter

    from experiments.token_sources import top1_by_source
    from workbench.train.evaluate import answer_sequences, measure_head
    from workbench.train.export import export_head

    target, head = tiny
    export_head(head, tmp_path / "head", torch.float32)
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, 20, (6,), generator=gen).tolist() for _ in range(4)]
    outputs = [(p[1:4] + torch.randint(3, 20, (5,), generator=gen).tolist()) * 2 for p in prompts]  # copies, repeats
    val = answer_sequences(target, prompts, outputs)
    w = target.lm_head.weight.data.clone()
    try:  # a two-token output layer, so that a random head's top-1 often is the target's: hits to split
        target.lm_head.weight.data.zero_()
        target.lm_head.weight.data[5] = 4 * w[5]  # scaled so that some positions are sure (p >= 0.9)
        target.lm_head.weight.data[6] = -4 * w[5]
        whole = measure_head(tmp_path / "head", target, val, coverage=(1,))
        split = top1_by_source(tmp_path / "head", target, val)
        pair_counts = Counter({pair: 25 for o in outputs[:2] for pair in zip(o, o[1:])})
        pair_counts.update({pair: 1 for o in outputs[2:3] for pair in zip(o, o[1:]) if pair not in pair_counts})
        by_pair = top1_by_source(tmp_path / "head", target, val, pair_counts)
    finally:
        target.lm_head.weight.data.copy_(w)
    assert sum(c["positions"] for c in split.values()) == whole["positions"]
    assert all(c["positions"] > 0 for c in split.values())  # every source occurs, so the split is checked
    hits = sum(c["top1"] * c["positions"] for c in split.values())
    assert hits > 0 and hits == pytest.approx(whole["top1"] * whole["positions"])
    assert sum(c["share"] for c in split.values()) == pytest.approx(1.0)
    sure = whole["confidence"][-1]  # measure_head's bin [0.9, 1]: the same positions, split by source
    assert sure["lo"] == 0.9 and sum(c["sure_share"] for c in split.values()) == pytest.approx(sure["share"])
    assert 0 < sure["share"] < 1
    sure_hits = sum(c["sure_top1"] * c["sure_positions"] for c in split.values() if c["sure_positions"])
    assert sure_hits == pytest.approx(sure["top1"] * sure["share"] * whole["positions"])
    # with pair counts each source splits by familiarity, and the parts add up to the source
    seen = Counter()
    for s, c in by_pair.items():
        parts = c.pop("by_familiarity")
        seen.update({name: f["positions"] for name, f in parts.items()})
        assert c == split[s]
        assert sum(f["positions"] for f in parts.values()) == c["positions"]
        assert sum(f["sure_positions"] for f in parts.values()) == c["sure_positions"]
        assert sum((f["top1"] or 0) * f["positions"] for f in parts.values()) == pytest.approx(c["top1"] * c["positions"])
    assert len(+seen) == 3  # unseen, 1-19 and 20+ pairs all occur, so each bucket is checked


def test_response_pair_counts_count_answer_pairs_only(tmp_path):
    from safetensors.torch import save_file

    from experiments.token_sources import familiarity, response_pair_counts

    # two sequences: prompt [1, 2] + answer [3, 4, 3, 4], prompt [3, 4] + answer [5]
    save_file({"tokens": torch.tensor([1, 2, 3, 4, 3, 4, 3, 4, 5], dtype=torch.int32),
               "starts": torch.tensor([0, 6, 9]), "prompt_lens": torch.tensor([2, 2])},
              str(tmp_path / "shard_00000.safetensors"))
    counts = response_pair_counts(tmp_path)
    assert counts == {(3, 4): 2, (4, 3): 1}  # the prompts' pairs and (4, 5) across the boundary are not answer pairs
    assert [familiarity(k) for k in (0, 1, 19, 20, 500)] == ["pair unseen", "seen 1-19 times", "seen 1-19 times",
                                                             "seen 20+ times", "seen 20+ times"]
    with pytest.raises(FileNotFoundError, match="no shard"):
        response_pair_counts(tmp_path / "empty")


def test_by_category_keeps_the_question_order():
    from experiments.head_studies import by_category

    groups = by_category(["b", "a", "b"], [[1], [2], [3]], [[10], [20], [30]])
    assert list(groups) == ["b", "a"] and groups["b"] == ([[1], [3]], [[10], [30]]) and groups["a"] == ([[2]], [[20]])
    with pytest.raises(ValueError):
        by_category(["a"], [[1], [2]], [[10], [20]])


def _node(i, depth, ranks, parent):
    return {"node": i, "depth": depth, "rank_path": ranks, "parent": parent}


def test_tree_use_finds_where_accepted_paths_leave_the_top1_spine():
    from experiments.tree_studies import tree_use

    # root; spine a (rank 0) -> a0 (rank 0); side b (rank 1) -> b0 (rank 0)
    nodes = [_node(0, 0, [], -1), _node(1, 1, [0], 0), _node(2, 1, [1], 0), _node(3, 2, [0, 0], 1),
             _node(4, 2, [1, 0], 2)]

    def step(path):
        return {"kind": "spec", "tree": {"nodes": nodes}, "accept": {"path": path}, "accept_length": len(path)}

    traces = [{"kind": "prefill"}, step([0, 1, 3]), step([0, 2, 4]), step([0]), step([0, 1])]
    u = tree_use(traces)
    assert u["steps"] == 4 and u["spine_depth"] == 2
    assert u["off_spine"] == 0.25 and u["spine_end"] == 0.25  # [0,2,4] left it; [0,1,3] took all of it
    assert u["tau"] == (3 + 3 + 1 + 2) / 4 and u["tau_spine"] == (3 + 1 + 1 + 2) / 4
    assert tree_use([{"kind": "prefill"}]) == {"steps": 0}


def _tiny_workbench(tiny):
    """A Workbench over the tiny target and head, with a tokenizer that only decodes."""
    from pathlib import Path

    from workbench.pipeline import Workbench

    class Tok:
        eos_token_id = None

        def decode(self, ids):
            return str(ids)

    target, head = tiny
    return Workbench(target, Tok(), head, "random", Path("/nonexistent"), "fp32")


def test_tree_use_of_a_real_run_counts_its_verify_steps(tiny):
    from workbench.engine.config import SpecConfig
    from experiments.tree_studies import tree_use
    from workbench.train.evaluate import run

    wb = _tiny_workbench(tiny)
    traces = []
    r = run(wb, [[5, 6, 7], [9, 10]], SpecConfig("eagle2", num_steps=3, topk=3, num_draft_tokens=6), 12, traces=traces)
    u = tree_use(traces)
    assert u["steps"] == sum(t["kind"] == "spec" for t in traces) > 0
    assert u["tau"] == pytest.approx(r["tau"]) and 1 <= u["tau_spine"] <= u["tau"]
    assert 1 <= u["spine_depth"] <= 3 and 0 <= u["off_spine"] <= 1 and 0 <= u["spine_end"] <= 1


def test_ceiling_of_a_real_run(tiny):
    """Greedy: the expectation is the accept length itself and a perfect head takes every level;
    sampled: both expectations are accept lengths of this budget, from the same verify steps."""
    from workbench.engine.config import SpecConfig
    from experiments.tree_studies import ceiling
    from workbench.train.evaluate import run

    wb = _tiny_workbench(tiny)
    spec, prompts = SpecConfig("eagle2", num_steps=3, topk=3, num_draft_tokens=6), [[5, 6, 7], [9, 10]]
    c = ceiling(wb, prompts, spec, 12)
    r = run(wb, prompts, spec, 12)
    assert c["tau"] == pytest.approx(r["tau"]) and c["head"]["tau"] == pytest.approx(c["tau"])
    assert c["perfect"]["tau"] == pytest.approx(spec.num_steps + 1) and c["perfect"]["reach"] == [1.0] * 3
    hot = ceiling(wb, prompts, spec, 12, temperature=1.0, seed=2)
    assert hot["steps"] > 0 and hot["tau"] == pytest.approx(run(wb, prompts, spec, 12, temperature=1.0, seed=2)["tau"])
    for side in ("head", "perfect"):
        assert 1.0 <= hot[side]["tau"] <= spec.num_steps + 1
        assert hot[side]["reach"] == sorted(hot[side]["reach"], reverse=True)
    # drafts of known quality at the same contexts: greedy, the whole target drafting at
    # temperature 1 agrees everywhere but its budget need not hold the whole spine; sampled at
    # temperature 1 it is the perfect head itself
    every = wb.target.config.num_layers
    short, whole = ceiling(wb, prompts, spec, 12, exits=(1, every))["early_exits"]
    assert (short["layers"], whole["layers"]) == (1, every)
    assert whole["agreement"] == 1.0 and 1.0 <= whole["tau"] <= spec.num_steps + 1
    assert whole["positions"] == short["positions"] == r["tokens"]  # every answer token, greedy as in run
    assert 0.0 <= short["agreement"] <= 1.0 and 1.0 <= short["tau"] <= spec.num_steps + 1
    sampled = ceiling(wb, prompts, spec, 12, temperature=1.0, seed=2, exits=(every,))
    assert sampled["early_exits"][0]["tau"] == pytest.approx(sampled["perfect"]["tau"], rel=1e-4)
