"""Draft-head training: the training forward is the engine's inference forward; the chunked
loss is the plain loss; an exported head loads back and warm-starts training; evaluate measures
several heads on the same answers."""

import json
import math

import pytest
import torch

from helpers import engine_forward
from workbench.models.draft import random_head
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint
from workbench.train.forward import eagle_loss_backward, feature_loss, soft_ce, train_forward


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    target = load_target(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), num_kv_heads=2), torch.float32)
    return target, random_head(target, seed=3, std=0.2)


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
    got = train_forward(head, target.model.embed_tokens, features=pad_f, next_ids=pad_i)
    for b, n in enumerate(lens):
        torch.testing.assert_close(got[b, :n], want[b], rtol=1e-5, atol=1e-5)


def test_training_forward_has_gradients(tiny):
    target, head = tiny
    head = head.train()
    feats = torch.randn(1, 5, target.config.hidden_size)
    out = train_forward(head, target.model.embed_tokens, features=feats, next_ids=torch.tensor([[1, 2, 3, 4, 5]]))
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
    ce, _ = soft_ce(x * 2, target, lm_head=lm_head)
    (feature_loss(x * 2, target) + 0.1 * ce).backward()
    torch.testing.assert_close(chunked, x.grad)
    assert out["ce"] == pytest.approx(float(ce.detach()), rel=1e-5)


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
    out = train(tmp_path / "work", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=False)
    for (name, a), (_, b) in zip(head.state_dict().items(), out.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        train(tmp_path / "work", target, train_seqs=seqs, val_seqs=seqs[:1],
              cfg=TrainConfig(steps=1, init=str(tmp_path / "nope")), resume=False)
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a training checkpoint"):
        train(tmp_path / "work", target, train_seqs=seqs, val_seqs=seqs[:1],
              cfg=TrainConfig(steps=1, init=str(tmp_path / "junk.pt")), resume=False)


def test_coverage_counts_the_targets_token_among_the_heads_top_k():
    from workbench.train.forward import coverage_hits

    torch.manual_seed(1)
    lm_head = torch.randn(40, 8)
    pred, target = torch.randn(300, 8), torch.randn(300, 8)
    hits, bins = coverage_hits(pred, target, lm_head, (1, 3, 40), edges=(0.0, 0.2, 1.0), chunk=64)
    want = (target @ lm_head.T).argmax(-1)
    rank = ((pred @ lm_head.T) > (pred @ lm_head.T).gather(1, want[:, None])).sum(-1)  # 0 = head's top-1
    assert hits == {1: int((rank == 0).sum()), 3: int((rank < 3).sum()), 40: 300}
    assert hits[1] == soft_ce(pred, target, lm_head=lm_head)[1]
    p_max = torch.softmax(target @ lm_head.T, -1).max(-1).values
    low = p_max < 0.2
    assert bins == [[int(low.sum()), int((low & (rank == 0)).sum())], [int((~low).sum()), int((~low & (rank == 0)).sum())]]
    assert 0 < bins[0][0] < 300  # both bins hold rows, so the split itself is checked


def test_evaluate_refuses_each_mistake_before_loading(capsys):
    from workbench.train.__main__ import main

    for argv, says in ((["--agreement", "--temperature", "1"], "greedy answers"), (["--val-every", "0"], "--val-every"),
                       (["--methods", "vanilla"], "speculative method"), (["--held-out", "/nonexistent"], "no such")):
        assert main(["evaluate", *argv]) == 2
        assert says in capsys.readouterr().err


def test_evaluate_measures_several_heads_on_the_same_answers_and_says_their_hot_tokens(
        smollm2_dir, real_threads, tmp_path, capsys):
    import shutil

    from workbench.models.heads import default_draft_dir
    from workbench.train.__main__ import main

    shipped = default_draft_dir()
    bare = tmp_path / "bare"  # the same weights without hot_tokens.json: drafts from the full vocabulary
    shutil.copytree(shipped, bare, ignore=shutil.ignore_patterns("hot_tokens.json"))
    assert main(["evaluate", "--head", str(shipped), str(bare), "--dtype", "fp32", "-n", "2", "--max-new", "12",
                 "--agreement", "--methods", "linear:1"]) == 0
    out = capsys.readouterr().out
    agree = [line for line in out.splitlines() if line.startswith("teacher-forced")]
    assert len(agree) == 2 and f"[{shipped}]: " in agree[0] and f"[{bare}]: " in agree[1]
    assert agree[0].split("]: ")[1] == agree[1].split("]: ")[1]  # same weights, same answers: same figures
    heads = [line for line in out.splitlines() if line.startswith("head ")]
    assert len(heads) == 2 and "4096 hot draft tokens" in heads[0] and "hot" not in heads[1]
    assert out.count("| linear:1 |") == 2 and out.count("| 2/2 |") == 2  # lossless with either vocabulary
    for argv, says in ((["--head", str(tmp_path / "none")], "no head there"), (["--hot", "-1"], "--hot"),
                       (["--head", str(bare), "--hot", "8"], "hot_tokens.json")):
        assert main(["evaluate", *argv]) == 2
        assert says in capsys.readouterr().err


def test_mt_bench_first_turns_keep_the_question_order():
    from workbench.measure import specbench
    from workbench.train.evaluate import mt_bench_first_turns

    rows = specbench.mt_bench_first_turns(80)
    assert [q.turns[0] for q in rows] == mt_bench_first_turns(specbench.DATA_FILE, 80)
    assert [q.question_id for q in rows] == list(range(81, 161))  # MT-bench's ids, chosen by category
    assert [q.question_id for q in specbench.mt_bench_first_turns(20)] == list(range(81, 161, 4))
    cats = [q.category for q in rows]
    assert len(set(cats)) == 8 and all(cats.count(c) == 10 for c in set(cats))


def test_a_run_stopped_twice_and_resumed_ends_with_the_weights_of_one_uninterrupted_run(tiny, tmp_path):
    """Training resumes where its checkpoint left it: the head, the optimiser, the RNG (feature
    noise, the CE positions) and the batch order, so stopping costs nothing but the restart."""
    from workbench.train.batches import Sequence
    from workbench.train.loop import TrainConfig, train

    target, _ = tiny
    h, gen = target.config.hidden_size, torch.Generator().manual_seed(1)
    seqs = [Sequence(torch.randint(3, 60, (12,), generator=gen), torch.randn(12, h, generator=gen).half(), 4)
            for _ in range(6)]
    cfg = TrainConfig(steps=5, warmup=2, ckpt_every=100, max_tokens=48, ce_frac=0.5)
    whole = train(tmp_path / "whole", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=False)
    train(tmp_path / "cut", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=False, minutes=1e-9)  # stops after step 1
    train(tmp_path / "cut", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=True, minutes=1e-9)  # after step 2
    resumed = train(tmp_path / "cut", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=True)
    assert torch.load(tmp_path / "cut" / "ckpt.pt", weights_only=False)["step"] == 5
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    four = train(tmp_path / "four", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=TrainConfig(**{**cfg.__dict__, "steps": 4}), resume=False)
    assert any(not torch.equal(a, b) for a, b in zip(whole.state_dict().values(), four.state_dict().values())), \
        "a step must move the weights, or equal weights prove nothing"


def test_the_acceptance_loss_is_minus_log_sum_min_p_q_and_training_on_it_raises_acceptance():
    """token_loss "accept": -log α, α = Σ min(p, q), the chance a draft sampled from q is accepted;
    a few gradient steps on the head's output raise α; "ce+accept" is the sum of the two."""
    gen = torch.Generator().manual_seed(0)
    lm_head, target = torch.randn(40, 8, generator=gen), torch.randn(5, 8, generator=gen)
    pred = torch.randn(5, 8, generator=gen)
    p, q = torch.softmax(target @ lm_head.T, -1), torch.softmax(pred @ lm_head.T, -1)
    alpha = torch.minimum(p, q).sum(-1)
    got, _ = soft_ce(pred, target, lm_head=lm_head, loss="accept")
    torch.testing.assert_close(got, -alpha.log().mean())
    ce, _ = soft_ce(pred, target, lm_head=lm_head)
    both, _ = soft_ce(pred, target, lm_head=lm_head, loss="ce+accept")
    torch.testing.assert_close(both, ce + got)
    assert float(soft_ce(target, target, lm_head=lm_head, loss="accept")[0]) == pytest.approx(0.0, abs=1e-5)  # q = p
    leaf = pred.clone().requires_grad_(True)
    opt = torch.optim.SGD([leaf], lr=0.5)
    for _ in range(20):
        opt.zero_grad()
        soft_ce(leaf, target, lm_head=lm_head, loss="accept")[0].backward()
        opt.step()
    after = torch.minimum(p, torch.softmax(leaf.detach() @ lm_head.T, -1)).sum(-1)
    assert float(after.mean()) > float(alpha.mean()) + 0.1
    with pytest.raises(ValueError, match="token loss must be one of ce, accept, ce\\+accept"):
        soft_ce(pred, target, lm_head=lm_head, loss="kl")


def test_a_head_trains_on_the_acceptance_loss(tiny, tmp_path):
    from workbench.train.batches import Sequence
    from workbench.train.loop import TrainConfig, train

    target, _ = tiny
    h, gen = target.config.hidden_size, torch.Generator().manual_seed(2)
    seqs = [Sequence(torch.randint(3, 60, (12,), generator=gen), torch.randn(12, h, generator=gen).half(), 4)
            for _ in range(3)]
    train(tmp_path / "work", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=TrainConfig(steps=2, warmup=1, max_tokens=48,
                                                                  token_loss="accept"), resume=False)
    log = [json.loads(line) for line in (tmp_path / "work" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and all(math.isfinite(r["ce"]) and r["ce"] > 0 for r in log)
    with pytest.raises(ValueError, match="token_loss must be one of"):
        TrainConfig(token_loss="tv")
