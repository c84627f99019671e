"""Fused draft heads (``fuse_layers``): the target hands over the residual stream after chosen
layers beside f_t (drafting stays lossless and the draft KV cache equals a fresh prefill:
tests/test_head_layers.py), a plain head grows into a fused one that computes the same thing,
training's forward is the engine's, and a fused head exports, loads and trains in the
directory format."""

import json

import pytest
import torch

from helpers import engine_forward, random_prompts, tiny_pair
from workbench.attention.batch import extend_batch
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.kv.allocator import SlotAllocator
from workbench.models.draft import load_draft, random_head
from workbench.train.batches import Sequence, collate
from workbench.train.export import export_head
from workbench.train.features import target_features
from workbench.train.forward import train_forward
from workbench.train.loop import TrainConfig, grow_from, init_head, train
from workbench.train.ttt import unrolled_forward

FUSE = (0,)  # the tiny target has two layers: fuse the first one's output beside f_t


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    target, _ = tiny_pair(tmp_path_factory.mktemp("tiny"))
    return target, random_head(target, 1, std=0.3, fuse_layers=FUSE)


def prefill(target, tokens, taps=()):
    kv = target.new_kv_pool(len(tokens))
    slots = SlotAllocator(len(tokens)).alloc(len(tokens))
    return slots, target(extend_batch(tokens=[tokens], prefix_slots=[[]], new_slots=[slots], device="cpu"), kv, taps)


def test_target_taps_the_residual_stream_after_the_chosen_layers(pair):
    target, _ = pair
    seen = []
    hook = target.model.layers[0].register_forward_hook(lambda _m, _i, out: seen.append(out.clone()))
    tokens = [3, 7, 1, 12, 5, 9]
    try:
        _, plain = prefill(target, tokens)
        _, wide = prefill(target, tokens, taps=FUSE)
    finally:
        hook.remove()
    h = target.config.hidden_size
    assert wide.shape == (len(tokens), 2 * h)
    torch.testing.assert_close(wide[:, h:], plain)  # the post-norm state stays last
    torch.testing.assert_close(wide[:, :h], seen[1])  # the residual stream after layer 0
    assert not torch.allclose(wide[:, :h], plain)
    torch.testing.assert_close(target.logits(wide), target.logits(plain))  # logits read the last H
    with pytest.raises(ValueError, match="tapped layers"):
        prefill(target, tokens, taps=(5,))


def test_feature_in_reads_each_kind_of_input(pair):
    target, head = pair
    h = target.config.hidden_size
    own = torch.randn(3, h)
    assert head.feature_in(own) is own  # a draft output inside the tree skips fuse
    wide = torch.randn(3, 2 * h) * 50  # raw residual streams run large: fuse sees them at unit RMS
    # the same unit-RMS input up to rounding of the 1/RMS scale: equal to float32 rounding of fuse's sums
    torch.testing.assert_close(head.feature_in(wide), head.feature_in(torch.cat([wide[:, :h] / 50, wide[:, h:]], -1)),
                               rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="reads 128 feature columns, got 192"):
        head.feature_in(torch.randn(3, 3 * h))
    with pytest.raises(ValueError, match="reads 64 feature columns, got 128"):
        random_head(target, 2).feature_in(wide)  # a plain head never takes tapped layers


def test_plain_head_grows_into_a_fused_one_that_computes_the_same(pair):
    target, _ = pair
    plain = init_head(target, seed=0)
    with torch.no_grad():
        for p in plain.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.1)
    fused = init_head(target, seed=1, fuse_layers=FUSE)
    assert grow_from(fused, plain.state_dict()) == 0
    h = target.config.hidden_size
    assert fused.fuse.weight[:, :h].abs().sum() == 0 and torch.equal(fused.fuse.weight[:, h:], torch.eye(h))
    gen = torch.Generator().manual_seed(0)
    wide = [torch.randn(n, 2 * h, generator=gen) for n in (7, 4)]
    ids = [torch.randint(0, 16, (n,), generator=gen).tolist() for n in (7, 4)]
    for a, b in zip(engine_forward(plain, [w[:, h:] for w in wide], ids), engine_forward(fused, wide, ids)):
        torch.testing.assert_close(a, b)
    with pytest.raises(RuntimeError, match="unexpected keys.*fuse.weight"):
        grow_from(init_head(target, seed=0), fused.state_dict())  # a fused head does not shrink to a plain one


def test_training_forward_equals_inference_forward_for_a_fused_head(pair):
    target, head = pair
    h = target.config.hidden_size
    gen = torch.Generator().manual_seed(4)
    lens = [9, 6]
    wide = [torch.randn(n, 2 * h, generator=gen) for n in lens]
    ids = [torch.randint(0, 16, (n,), generator=gen).tolist() for n in lens]
    want = engine_forward(head, wide, ids)
    seqs = [Sequence(torch.tensor([1] + i), w[:, h:], 1, w[:, :h]) for w, i in zip(wide, ids)]
    seqs = [Sequence(s.tokens, torch.cat([s.features, torch.zeros(1, h)]), 1, torch.cat([s.aux, torch.zeros(1, h)]))
            for s in seqs]
    b = collate(seqs)
    assert b.aux.shape == (2, max(lens), h)
    with torch.no_grad():
        got = train_forward(head, target.model.embed_tokens, features=b.features, next_ids=b.next_ids, aux=b.aux)
        step1 = unrolled_forward(head, target.model.embed_tokens, features=b.features, next_ids=b.next_ids, steps=2,
                                 aux=b.aux)[0]
    for k, n in enumerate(lens):
        torch.testing.assert_close(got[k, :n], want[k], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(step1[k, :n], want[k], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="the data must carry them"):
        train_forward(head, target.model.embed_tokens, features=b.features, next_ids=b.next_ids)


def test_fused_head_exports_loads_and_is_measured_as_trained(pair, tmp_path):
    from workbench.train.evaluate import fused_taps, head_fuse_layers, load_head

    target, head = pair
    out = export_head(head, tmp_path / "head", dtype=torch.float32)
    assert json.loads((out / "config.json").read_text())["fuse_layers"] == list(FUSE)
    back = load_draft(out, target)
    assert back.fuse_layers == FUSE
    gen = torch.Generator().manual_seed(3)
    wide, ids = [torch.randn(6, 2 * target.config.hidden_size, generator=gen)], [[1, 5, 2, 9, 3, 3]]
    torch.testing.assert_close(engine_forward(back, wide, ids)[0], engine_forward(head, wide, ids)[0])
    measured = load_head(out, target)  # what evaluate --held-out / --agreement measures
    torch.testing.assert_close(engine_forward(measured, wide, ids)[0], engine_forward(head, wide, ids)[0])
    plain = export_head(random_head(target, 3), tmp_path / "plain", dtype=torch.float32)
    assert head_fuse_layers(plain) == () and fused_taps([plain, out]) == FUSE
    cfg = json.loads((out / "config.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**cfg, "fuse_layers": [1]}))
    with pytest.raises(ValueError, match="fuse different target layers"):
        fused_taps([out, other])
    (out / "config.json").write_text(json.dumps({**cfg, "fuse_layers": [7]}))
    with pytest.raises(ValueError, match=r"fuses target layers \[7\]; the target has 2"):
        load_draft(out, target)
    (out / "config.json").write_text(json.dumps({**cfg, "fuse_layers": [1, 0]}))
    with pytest.raises(ValueError, match="increasing order"):
        load_draft(out, target)
    (out / "config.json").write_text(json.dumps({**cfg, "fuse_layers": "0"}))
    with pytest.raises(ValueError, match="a list of target layer indices"):
        load_draft(out, target)


def test_fused_head_trains_and_resume_keeps_its_layers(pair, tmp_path):
    target, _ = pair
    h = target.config.hidden_size
    tokens = [[3 + (i * 5 + j) % 13 for i in range(20)] for j in range(4)]
    seqs = [Sequence(torch.tensor(t), f[:, h:].half(), 4, f[:, :h].half())
            for t, f in zip(tokens, target_features(target, tokens, taps=FUSE))]
    cfg = TrainConfig(steps=3, lr=1e-3, warmup=1, ckpt_every=3, max_tokens=96, ttt_steps=2, fuse_layers="0",
                      fuse_lr_mult=5)
    head = train(tmp_path, target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=False)
    assert head.fuse_layers == FUSE
    base, fuse = torch.load(tmp_path / "ckpt.pt", weights_only=False)["opt"]["param_groups"]
    assert fuse["lr"] == pytest.approx(5 * base["lr"]) and len(fuse["params"]) == 1  # fuse.weight, at its own rate
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(log) == 3 and "top1_step2" in log[-1]["val"]
    start = init_head(target, 0, fuse_layers=FUSE).fuse.weight
    assert not torch.allclose(head.fuse.weight, start)  # fuse learns
    with pytest.raises(ValueError, match=r"fuses target layers \[0\]; --fuse-layers gives \[\]"):
        train(tmp_path, target, train_seqs=seqs, val_seqs=seqs[:1], cfg=TrainConfig(steps=4, warmup=1, max_tokens=96),
              resume=True)
    with pytest.raises(ValueError, match="fuse_layers takes target layer indices"):
        TrainConfig(fuse_layers="a,b")
    with pytest.raises(ValueError, match="distinct target layer indices in increasing order"):
        TrainConfig(fuse_layers="3,1")
    with pytest.raises(ValueError, match="fuse_lr_mult must be > 0"):
        TrainConfig(fuse_lr_mult=0)


def test_trace_of_a_fused_head_step(pair):
    from workbench.engine.trace import step_trace

    target, head = pair
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), trace=True)
    eng.add_requests(random_prompts(1, 16, seed=7), 12)
    records = []
    while not eng.done:
        eng.step()
        records += eng.step_records()
    traces = [step_trace(r, str) for r in records if r.kind == "spec"]
    assert traces and all(t["accept_length"] <= len(t["accept"]["path"]) for t in traces)  # cut at the end only
    for t in traces:  # each step's trace: the drafted tree, its verify, the accept walk, what it emitted
        assert t["tree"] and t["verify"] and t["accept_length"] == len(t["emitted"]) >= 1
