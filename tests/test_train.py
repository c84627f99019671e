"""Draft-head training: the training forward is the engine's inference forward; the chunked
loss is the plain loss; the training prompts are ours, not Spec-Bench's."""

import json

import pytest
import torch

from workbench.bench.specbench import DATA_FILE
from workbench.attention.batch import extend_batch
from workbench.models.draft import random_head
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint
from workbench.train.forward import eagle_loss_backward, feature_loss, soft_ce, train_forward
from workbench.train.prompts import build_prompts

SPEC_BENCH = DATA_FILE


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    target = load_target(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), num_kv_heads=2), torch.float32)
    return target, random_head(target, seed=3, std=0.2)


def engine_forward(head, features: list[torch.Tensor], ids: list[list[int]]) -> list[torch.Tensor]:
    """DraftHead.forward through the paged KV cache: one extend batch holding every sequence."""
    sizes = [len(s) for s in ids]
    slots, start = [], 0
    for n in sizes:
        slots.append(list(range(start, start + n)))
        start += n
    kv = head.new_kv_pool(start)
    batch = extend_batch(ids, [[] for _ in ids], slots, [0] * len(ids), "cpu")
    return list(head(torch.cat(features), batch, kv).split(sizes))


@pytest.mark.parametrize("layers", [1, 2])
def test_training_forward_equals_inference_forward(tiny, layers):
    target, _ = tiny
    head = random_head(target, seed=3, std=0.2, num_layers=layers)
    gen = torch.Generator().manual_seed(0)
    lens = [11, 7]
    feats = [torch.randn(n, target.config.hidden_size, generator=gen) for n in lens]
    ids = [torch.randint(0, target.config.vocab_size, (n,), generator=gen).tolist() for n in lens]
    want = engine_forward(head, feats, ids)
    # right-padded batch of both sequences
    pad_f = torch.zeros(2, max(lens), target.config.hidden_size)
    pad_i = torch.zeros(2, max(lens), dtype=torch.long)
    for b, n in enumerate(lens):
        pad_f[b, :n], pad_i[b, :n] = feats[b], torch.tensor(ids[b])
    got = train_forward(head, target.model.embed_tokens, pad_f, pad_i)
    for b, n in enumerate(lens):
        torch.testing.assert_close(got[b, :n], want[b], rtol=1e-5, atol=1e-5)


def test_training_forward_has_gradients(tiny):
    target, head = tiny
    head = head.train()
    feats = torch.randn(1, 5, target.config.hidden_size)
    out = train_forward(head, target.model.embed_tokens, feats, torch.tensor([[1, 2, 3, 4, 5]]))
    out.sum().backward()
    assert all(p.grad is not None for p in head.parameters())
    head.zero_grad(set_to_none=True)
    head.eval()


def test_chunked_loss_matches_plain_loss():
    torch.manual_seed(0)
    lm_head = torch.randn(50, 8)
    x = torch.randn(13, 8, requires_grad=True)
    target = torch.randn(13, 8)
    pred = x * 2  # a graph in front of the loss, as the head is
    out = eagle_loss_backward(pred, target, lm_head, chunk=4)
    chunked = x.grad.clone()
    x.grad = None
    ce, _ = soft_ce(x * 2, target, lm_head)
    (feature_loss(x * 2, target) + 0.1 * ce).backward()
    torch.testing.assert_close(chunked, x.grad)
    assert out["ce"] == pytest.approx(float(ce.detach()), rel=1e-5)


def test_prompts_are_deterministic_and_distinct():
    a, b = build_prompts(0), build_prompts(0)
    assert a == b and len(set(a)) == len(a) >= 1000
    assert build_prompts(1) != a
    assert build_prompts(0, 50) == a[:50]


@pytest.mark.skipif(not SPEC_BENCH.exists(), reason="Spec-Bench questions not present")
def test_no_training_prompt_is_a_spec_bench_question():
    def key(text: str) -> str:
        return " ".join(text.lower().split())[:60]

    bench = [json.loads(line)["turns"][0] for line in SPEC_BENCH.read_text().splitlines() if line.strip()]
    bench_keys = {key(t) for t in bench}
    bench_full = {" ".join(t.lower().split()) for t in bench}
    for p in build_prompts(0):
        assert key(p) not in bench_keys and " ".join(p.lower().split()) not in bench_full, p


def test_export_round_trip(tiny, tmp_path):
    from safetensors.torch import load_file

    from workbench.models.draft import load_draft
    from workbench.train.export import export_head

    target, head = tiny
    export_head(head, tmp_path, torch.float32)
    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "embed_tokens.weight" not in keys and "fc.weight" in keys and "layers.0.mlp.up_proj.weight" in keys
    back = load_draft(tmp_path, target)
    for (name, a), (_, b) in zip(head.state_dict().items(), back.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)


def test_loss_pairs_cover_response_tokens_only():
    from workbench.train.batches import Sequence, collate

    seq = Sequence(torch.arange(10), torch.arange(10).float()[:, None].repeat(1, 4).half(), prompt_len=4)
    b = collate([seq])
    # pairs t = 3..7 (P-1 .. T-3) predict f_4..f_8
    assert b.loss_mask[0].nonzero().flatten().tolist() == [3, 4, 5, 6, 7]
    assert b.targets[:, 0].tolist() == [4, 5, 6, 7, 8]
    assert b.next_ids[0].tolist() == list(range(1, 10)) and seq.num_targets == 5


def test_recorded_features_equal_our_prefill(tmp_path):
    """The features recorded while transformers decodes (left-padded batch) are our target's
    post-norm prefill features of the finished sequence."""
    from transformers import AutoModelForCausalLM

    from workbench.train.data import FeatureRecorder, generate_batch

    path = make_tiny_checkpoint(tmp_path / "t", seed=1)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ours = load_target(path, torch.float32)
    rec = FeatureRecorder(hf.model.norm)
    rows = generate_batch(hf, [[5, 6, 7, 8, 9, 10], [11, 12, 13]], 6, eos=2, pad=0, rec=rec)
    rec.close()
    for seq, plen, feats in rows:
        assert plen in (6, 3) and len(seq) > plen
        batch = extend_batch([seq], [[]], [list(range(len(seq)))], [0], "cpu")
        want = ours(batch, ours.new_kv_pool(len(seq)))
        torch.testing.assert_close(feats[:-1].float(), want[:-1], rtol=2e-3, atol=2e-3)
        assert seq[plen:] == ours.logits(want[plen - 1 : -1]).argmax(-1).tolist()  # greedy


def test_warm_start_loads_an_exported_head(tiny, tmp_path):
    """--init: the head starts from exported weights (lr 0 keeps them), and a missing path is a
    clear error before any step runs."""
    from workbench.train.batches import Sequence
    from workbench.train.export import export_head
    from workbench.train.loop import TrainConfig, train

    target, head = tiny
    export_head(head, tmp_path / "head", torch.float32)
    h = target.config.hidden_size
    gen = torch.Generator().manual_seed(0)
    seqs = [Sequence(torch.randint(3, 60, (12,), generator=gen), torch.randn(12, h, generator=gen).half(), 4)
            for _ in range(3)]
    cfg = TrainConfig(steps=1, lr=0.0, warmup=1, ckpt_every=1, max_tokens=64, init=str(tmp_path / "head"))
    out = train(tmp_path / "work", target, seqs, seqs[:1], cfg, resume=False)
    for (name, a), (_, b) in zip(head.state_dict().items(), out.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        train(tmp_path / "work", target, seqs, seqs[:1], TrainConfig(steps=1, init=str(tmp_path / "nope")), False)
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a training checkpoint"):
        train(tmp_path / "work", target, seqs, seqs[:1], TrainConfig(steps=1, init=str(tmp_path / "junk.pt")), False)


def test_coverage_counts_the_targets_token_among_the_heads_top_k():
    from workbench.train.forward import coverage_hits

    torch.manual_seed(1)
    lm_head = torch.randn(40, 8)
    pred, target = torch.randn(300, 8), torch.randn(300, 8)
    hits, bins = coverage_hits(pred, target, lm_head, (1, 3, 40), edges=(0.0, 0.2, 1.0), chunk=64)
    want = (target @ lm_head.T).argmax(-1)
    rank = ((pred @ lm_head.T) > (pred @ lm_head.T).gather(1, want[:, None])).sum(-1)  # 0 = head's top-1
    assert hits == {1: int((rank == 0).sum()), 3: int((rank < 3).sum()), 40: 300}
    assert hits[1] == soft_ce(pred, target, lm_head)[1]
    p_max = torch.softmax(target @ lm_head.T, -1).max(-1).values
    low = p_max < 0.2
    assert bins == [[int(low.sum()), int((low & (rank == 0)).sum())], [int((~low).sum()), int((~low & (rank == 0)).sum())]]
    assert 0 < bins[0][0] < 300  # both bins hold rows, so the split itself is checked


def test_evaluate_rejects_bad_coverage_and_sampled_agreement(capsys):
    from workbench.train.evaluate import main

    for argv, says in ((["--coverage", "0"], "--coverage"), (["--agreement", "--temperature", "1"], "greedy answers"),
                       (["--by-category"], "add --agreement"), (["--held-out-answer-tokens", "0"], "must be >= 1"),
                       (["--held-out-answer-tokens", "128"], "add --held-out DATA"),
                       (["--by-source"], "add one of them"), (["--pair-counts", "."], "add --by-source"),
                       (["--agreement", "--by-source", "--pair-counts", "/nonexistent"], "no such directory"),
                       (["--ceiling", "--methods"], "name at least one"),
                       (["--early-exit", "12,x", "--ceiling"], "whole numbers of layers"),
                       (["--early-exit", "12"], "add --ceiling")):
        with pytest.raises(SystemExit):
            main(argv)
        assert says in capsys.readouterr().err


def test_evaluate_measures_several_heads_on_the_same_answers_and_says_their_hot_tokens(
        smollm2_dir, real_threads, tmp_path, capsys):
    import shutil

    from workbench.models.heads import default_draft_dir
    from workbench.train.evaluate import main

    shipped = default_draft_dir()
    bare = tmp_path / "bare"  # the same weights without hot_tokens.json: drafts from the full vocabulary
    shutil.copytree(shipped, bare, ignore=shutil.ignore_patterns("hot_tokens.json"))
    main(["--head", str(shipped), str(bare), "--dtype", "fp32", "-n", "2", "--max-new", "12", "--agreement",
          "--coverage", "--by-category", "--by-source", "--methods", "linear:1"])
    out = capsys.readouterr().out
    agree = [line for line in out.splitlines() if line.startswith("teacher-forced")]
    assert len(agree) == 2 and f"[{shipped}]: " in agree[0] and f"[{bare}]: " in agree[1]
    assert agree[0].split("]: ")[1] == agree[1].split("]: ")[1]  # same weights, same answers: same figures
    sources = [line for line in out.splitlines() if "where the target's token:" in line]
    assert len(sources) == 2 and sources[0] == sources[1] and "copies a token pair of the prompt" in sources[0]
    cats = [line for line in out.splitlines() if "by category" in line]
    assert len(cats) == 2 and cats[0].split("]: ")[1] == cats[1].split("]: ")[1]
    # questions 81 and 121 of the 80: one writing, one coding question, each its own group
    assert cats[0].split("]: ")[1].startswith("writing (1, ") and "; coding (1, " in cats[0]
    heads = [line for line in out.splitlines() if line.startswith("head ")]
    assert len(heads) == 2 and "4096 hot draft tokens" in heads[0] and "hot" not in heads[1]
    assert out.count("| linear:1 |") == 2 and out.count("| 2/2 |") == 2  # lossless with either vocabulary
    for argv, says in ((["--head", str(tmp_path / "none")], "no head there"), (["--hot", "-1"], "--hot"),
                       (["--head", str(bare), "--hot", "8"], "hot_tokens.json"),
                       (["--ceiling", "--early-exit", "29,31", "--methods", "linear:1"], "the target has 30 layers")):
        with pytest.raises(SystemExit):
            main(argv)
        assert says in capsys.readouterr().err


def test_token_source_tells_a_copy_from_a_repeat_from_a_new_token():
    from workbench.train.evaluate import token_source

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

    from workbench.train.evaluate import answer_sequences, measure_head, top1_by_source
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

    from workbench.train.evaluate import familiarity, response_pair_counts

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


def test_mt_bench_questions_and_by_category_keep_the_question_order():
    from workbench.bench import specbench
    from workbench.train.evaluate import by_category, mt_bench_first_turns

    rows = specbench.mt_bench_first_turns(80)
    assert [q.turns[0] for q in rows] == mt_bench_first_turns(specbench.DATA_FILE, 80)
    assert [q.question_id for q in rows] == list(range(81, 161))  # MT-bench's ids, chosen by category
    assert [q.question_id for q in specbench.mt_bench_first_turns(20)] == list(range(81, 161, 4))
    cats = [q.category for q in rows]
    assert len(set(cats)) == 8 and all(cats.count(c) == 10 for c in set(cats))
    groups = by_category(["b", "a", "b"], [[1], [2], [3]], [[10], [20], [30]])
    assert list(groups) == ["b", "a"] and groups["b"] == ([[1], [3]], [[10], [30]]) and groups["a"] == ([[2]], [[20]])
    with pytest.raises(ValueError):
        by_category(["a"], [[1], [2]], [[10], [20]])


def _node(i, depth, ranks, parent):
    return {"node": i, "depth": depth, "rank_path": ranks, "parent": parent}


def test_tree_use_finds_where_accepted_paths_leave_the_top1_spine():
    from workbench.train.evaluate import tree_use

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
    from workbench.train.evaluate import run, tree_use

    wb = _tiny_workbench(tiny)
    traces = []
    r = run(wb, [[5, 6, 7], [9, 10]], SpecConfig("eagle2", 3, 3, 6), 12, traces=traces)
    u = tree_use(traces)
    assert u["steps"] == sum(t["kind"] == "spec" for t in traces) > 0
    assert u["tau"] == pytest.approx(r["tau"]) and 1 <= u["tau_spine"] <= u["tau"]
    assert 1 <= u["spine_depth"] <= 3 and 0 <= u["off_spine"] <= 1 and 0 <= u["spine_end"] <= 1


def test_ceiling_of_a_real_run(tiny):
    """Greedy: the expectation is the accept length itself and a perfect head takes every level;
    sampled: both expectations are accept lengths of this budget, from the same verify steps."""
    from workbench.engine.config import SpecConfig
    from workbench.train.evaluate import ceiling, run

    wb = _tiny_workbench(tiny)
    spec, prompts = SpecConfig("eagle2", 3, 3, 6), [[5, 6, 7], [9, 10]]
    c = ceiling(wb, prompts, spec, 12)
    r = run(wb, prompts, spec, 12)
    assert c["tau"] == pytest.approx(r["tau"]) and c["head"]["tau"] == pytest.approx(c["tau"])
    assert c["perfect"]["tau"] == pytest.approx(spec.num_steps + 1) and c["perfect"]["reach"] == [1.0] * 3
    hot = ceiling(wb, prompts, spec, 12, temperature=1.0, seed=2)
    assert hot["steps"] > 0 and hot["tau"] == pytest.approx(run(wb, prompts, spec, 12, 1.0, 2)["tau"])
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
