"""Training options: the unrolled draft steps (training-time test) equal drafting step by step;
with every option off the loss is the plain EAGLE loss; each option trains a tiny head."""

import json

import pytest
import torch

from workbench.models.draft import random_head
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint
from workbench.train.batches import Sequence
from workbench.train.forward import eagle_loss_backward, train_forward
from workbench.train.loop import TrainConfig, train
from workbench.train.ttt import step_masks, ttt_mask, unrolled_forward


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    target = load_target(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), num_kv_heads=2), torch.float32)
    return target, random_head(target, seed=3, std=0.2)


def test_ttt_mask():
    assert torch.equal(ttt_mask(4, 1), torch.ones(4, 4).tril().bool())
    m = ttt_mask(5, 3).int()  # query t: real keys <= t-2, step-2 key at t-1, step-3 key at t
    assert m[4].tolist() == [1, 1, 1, 0, 0] + [0, 0, 0, 1, 0] + [0, 0, 0, 0, 1]
    assert m[1].tolist() == [0] * 5 + [1, 0, 0, 0, 0] + [0, 1, 0, 0, 0]
    assert (m.sum(1) > 0).all()  # every row sees at least itself: no all-masked softmax


@pytest.mark.parametrize("layers,fuse", [(1, ()), (2, ()), (1, (0,))], ids=["1 layer", "2 layers", "fused"])
def test_unrolled_steps_equal_drafting_one_step_at_a_time(tiny, layers, fuse):
    """Step k at position t = run the head k times on the real prefix ending at r = t-k+1,
    appending its own output (with the data's next token) each time; for every layer's keys.
    A fused head folds the real prefix's features once (``fuse``); its own outputs skip it."""
    import copy

    target, _ = tiny
    head = random_head(target, seed=5, std=0.2, num_layers=layers, fuse_layers=fuse).double()  # fp64: outputs grow ~10x per step
    embed = copy.deepcopy(target.model.embed_tokens).double()
    gen = torch.Generator().manual_seed(1)
    T, H = 9, target.config.hidden_size
    feats = torch.randn(1, T, H, generator=gen, dtype=torch.float64)
    aux = torch.randn(1, T, H * len(fuse), generator=gen, dtype=torch.float64) * 5 if fuse else None
    ids = torch.randint(0, target.config.vocab_size, (1, T), generator=gen)
    outs = unrolled_forward(head, embed, features=feats, next_ids=ids, steps=3, aux=aux)
    torch.testing.assert_close(outs[0], train_forward(head, embed, features=feats, next_ids=ids, aux=aux))
    inner = head  # a fused head = the same head without fuse, on the folded features
    if fuse:
        feats = head.feature_in(torch.cat([aux, feats], dim=-1)).detach()
        inner = copy.deepcopy(head)
        inner.fuse, inner.fuse_layers = None, ()
        inner.attach(target)
    for r in (2, 4, 5):
        f, x = feats[:, : r + 1], ids[:, : r + 1]
        for k in range(1, 4):
            guess = train_forward(inner, embed, features=f, next_ids=x)[:, -1]  # the head's guess of f_{r+k}
            torch.testing.assert_close(outs[k - 1][:, r + k - 1], guess, rtol=1e-10, atol=1e-10)
            f = torch.cat([f, guess[:, None]], dim=1)
            x = torch.cat([x, ids[:, r + k : r + k + 1]], dim=1)


def test_step_masks_start_later_and_end_together():
    m = torch.zeros(1, 10, dtype=torch.bool)
    m[0, 3:8] = True
    got = [x[0].nonzero().flatten().tolist() for x in step_masks(m, 3)]
    assert got == [[3, 4, 5, 6, 7], [4, 5, 6, 7], [5, 6, 7]]


def test_options_off_give_the_plain_loss():
    torch.manual_seed(0)
    lm_head, target = torch.randn(50, 8), torch.randn(13, 8)
    x = torch.randn(13, 8, requires_grad=True)
    plain = eagle_loss_backward(x * 2, target, lm_head, chunk=4)
    g_plain, x.grad = x.grad.clone(), None
    same = eagle_loss_backward(x * 2, target, lm_head, chunk=4, row_weights=torch.full((13,), 1 / 13), topk=50)
    assert same == pytest.approx(plain, rel=1e-5)
    torch.testing.assert_close(x.grad, g_plain)
    d = TrainConfig()
    assert (d.ttt_steps, d.hot_vocab, d.distill_topk, d.w_feat) == (1, 0, 0, 1.0)


def test_topk_distillation_and_weights_change_the_loss():
    torch.manual_seed(0)
    lm_head, target = torch.randn(50, 8), torch.randn(6, 8)
    x = torch.randn(6, 8)
    full = eagle_loss_backward(x.clone().requires_grad_(), target, lm_head)
    top2 = eagle_loss_backward(x.clone().requires_grad_(), target, lm_head, topk=2)
    assert top2["ce"] != pytest.approx(full["ce"]) and top2["feat"] == pytest.approx(full["feat"])
    w = torch.tensor([1.0, 0, 0, 0, 0, 0])
    one = eagle_loss_backward(x.clone().requires_grad_(), target, lm_head, row_weights=w)
    first = eagle_loss_backward(x[:1].clone().requires_grad_(), target[:1], lm_head)
    assert one == pytest.approx(first, rel=1e-5)


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="ttt_steps"):
        TrainConfig(ttt_steps=0)
    with pytest.raises(ValueError, match="ttt_decay"):
        TrainConfig(ttt_decay=0.0)
    with pytest.raises(ValueError, match="ce_frac"):
        TrainConfig(ce_frac=0.0)


def toy_sequences(target, n: int, seed: int, taps: tuple[int, ...] = ()) -> list[Sequence]:
    """Token sequences with a repeating pattern (learnable), their features from our prefill
    (``taps``: with the residual streams a fused head reads)."""
    from workbench.train.features import target_features

    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for _ in range(n):
        start = int(torch.randint(3, 20, (1,), generator=gen))
        seqs.append([start + (i % 5) * 7 for i in range(24)])
    h = target.config.hidden_size
    feats = target_features(target, seqs, taps=taps)
    return [Sequence(torch.tensor(s), f[:, -h:].half(), 4, f[:, :-h].half() if taps else None)
            for s, f in zip(seqs, feats)]


@pytest.mark.parametrize("options", [
    dict(),
    dict(ttt_steps=3),
    dict(ttt_steps=3, hot_vocab=40, distill_topk=5, ce_frac=1.0, w_ce=0.5, w_feat=0.5),
    dict(ttt_steps=3, head_layers=2),
    dict(ttt_steps=3, fuse_layers="0"),
])
def test_each_option_trains_a_tiny_head(tiny, tmp_path, options):
    target, _ = tiny
    seqs = toy_sequences(target, 12, 0, TrainConfig(**options).taps)
    cfg = TrainConfig(steps=80, lr=3e-3, warmup=2, ckpt_every=80, max_tokens=96, **options)
    train(tmp_path, target, train_seqs=seqs, val_seqs=seqs[:4], cfg=cfg, resume=False)
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    def mean(xs):
        return sum(xs) / len(xs)

    feat, total = [r["feat"] for r in log], [r["feat"] + r["ce"] for r in log]
    assert mean(feat[-8:]) < 0.7 * mean(feat[:8]) and mean(total[-8:]) < mean(total[:8]), (feat, total)
    assert {"top1", "top1_step2", "top1_step3"} <= set(log[-1]["val"])
