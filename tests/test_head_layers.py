"""Draft heads with more than one decoder layer: drafting stays lossless, every draft KV layer
equals a fresh prefill, a one-layer head grows into a deeper one that computes the same thing,
and a deeper head exports and loads back in the EAGLE directory format."""

import json

import pytest
import torch

from helpers import engine_forward, fresh_prefill, random_prompts, tiny_pair
from workbench.attention.batch import extend_batch
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.models.draft import load_draft, random_head
from workbench.train.export import export_head
from workbench.train.loop import TrainConfig, grow_from, init_head


@pytest.fixture(scope="module")
def pair2(tmp_path_factory):
    target, _ = tiny_pair(tmp_path_factory.mktemp("tiny"))
    return target, random_head(target, 1, std=0.3, num_layers=2)


def decode(target, head, spec, prompts, n=24):
    eng = Engine(target, head, spec)
    eng.add_requests(prompts, n)
    while not eng.done:
        eng.step()
        eng.check_integrity()
    return eng


@pytest.mark.parametrize("spec", [SpecConfig.linear(3), SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), SpecConfig("eagle2", num_steps=4, topk=4, num_draft_tokens=16)],
                         ids=lambda s: s.describe())
@pytest.mark.parametrize("kind", ["two layers", "fused"])
def test_two_layer_and_fused_heads_are_lossless_and_accepted(pair2, spec, kind):
    target, head = pair2
    if kind == "fused":  # reads the residual stream after target layer 0 beside f_t (tests/test_fused_head.py)
        head = random_head(target, 1, std=0.3, fuse_layers=(0,))
    prompts = random_prompts(4, 16, seed=2)
    plain = decode(target, None, SpecConfig("vanilla"), prompts)
    ours = decode(target, head, spec, prompts)
    assert ours.taps == head.fuse_layers
    assert [r.output_ids for r in ours.requests] == [r.output_ids for r in plain.requests]
    lengths = [n for r in ours.requests for n in r.accept_lengths]
    assert max(lengths) >= 2  # drafts of the head really get accepted, so the walk runs


@pytest.mark.parametrize("kind", ["two layers", "fused"])
def test_every_draft_kv_layer_equals_a_fresh_prefill(pair2, kind):
    target, head = pair2
    if kind == "fused":  # its committed tokens keep the wide target features for the next extend
        head = random_head(target, 1, std=0.3, fuse_layers=(0,))
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6))
    eng.add_requests(random_prompts(2, 16, seed=5), 400)
    for _ in range(30):
        eng.step()
    assert len(eng.draft_kv.k) == len(head.layers)
    for r in eng.requests:
        seq = r.prompt_ids + r.output_ids[:-1]
        slots = eng.table.slots(r.rid)
        _, fresh_slots, hidden = fresh_prefill(target, seq, head.fuse_layers)
        assert r.pending_features.shape[-1] == head.feature_width == hidden.shape[-1]
        dkv = head.new_kv_pool(len(seq))
        head(hidden, extend_batch(tokens=[seq[1:] + [r.output_ids[-1]]], prefix_slots=[[]], new_slots=[fresh_slots],
                                  device="cpu"), dkv)
        done = len(seq) - len(r.pending_tokens)
        for layer in range(len(head.layers)):
            torch.testing.assert_close(eng.draft_kv.k[layer][slots[:done]], dkv.k[layer][fresh_slots[:done]],
                                       atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(eng.draft_kv.v[layer][slots[:done]], dkv.v[layer][fresh_slots[:done]],
                                       atol=1e-4, rtol=1e-4)


def test_grown_head_computes_what_the_one_layer_head_did(pair2):
    target, _ = pair2
    one = init_head(target, seed=0)
    with torch.no_grad():  # a head whose layer 0 is not the identity init
        for p in one.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.1)
    two = init_head(target, seed=1, num_layers=2)
    assert grow_from(two, one.state_dict()) == 1
    assert two.layers[1].self_attn.o_proj.weight.abs().sum() == 0
    assert two.layers[1].self_attn.q_proj.weight.abs().sum() > 0  # the rest keeps its init
    gen = torch.Generator().manual_seed(0)
    feats = [torch.randn(n, target.config.hidden_size, generator=gen) for n in (7, 4)]
    ids = [torch.randint(0, 16, (n,), generator=gen).tolist() for n in (7, 4)]
    for a, b in zip(engine_forward(one, feats, ids), engine_forward(two, feats, ids)):
        torch.testing.assert_close(a, b)
    assert grow_from(init_head(target, seed=2, num_layers=2), two.state_dict()) == 0  # same depth: a plain load


def test_grow_from_refuses_what_does_not_fit(pair2):
    target, _ = pair2
    two = init_head(target, seed=0, num_layers=2).state_dict()
    with pytest.raises(RuntimeError, match=r"hold layers \[0, 1\]; the head has 1"):
        grow_from(init_head(target, seed=0), two)
    gappy = {k: v for k, v in two.items() if not k.startswith("layers.0.")}
    with pytest.raises(RuntimeError, match=r"hold layers \[1\]"):
        grow_from(init_head(target, seed=0, num_layers=2), gappy)
    with pytest.raises(RuntimeError, match="unexpected keys.*fc.bias"):
        grow_from(init_head(target, seed=0, num_layers=2), {**two, "fc.bias": torch.zeros(1)})
    no_fc = {k: v for k, v in two.items() if k != "fc.weight"}
    with pytest.raises(RuntimeError, match="missing keys.*fc.weight"):
        grow_from(init_head(target, seed=0, num_layers=3), no_fc)
    with pytest.raises(ValueError, match="head_layers must be >= 1"):
        TrainConfig(head_layers=0)


def test_two_layer_head_exports_and_loads_back(pair2, tmp_path):
    target, head = pair2
    out = export_head(head, tmp_path / "head", dtype=torch.float32)
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    back = load_draft(out, target)
    assert len(back.layers) == 2 and back.layers[0].input_layernorm is None
    assert back.layers[1].input_layernorm is not None
    gen = torch.Generator().manual_seed(3)
    feats, ids = [torch.randn(6, target.config.hidden_size, generator=gen)], [[1, 5, 2, 9, 3, 3]]
    torch.testing.assert_close(engine_forward(back, feats, ids)[0], engine_forward(head, feats, ids)[0])
    from workbench.train.evaluate import load_head

    measured = load_head(out, target)  # what evaluate --held-out / --agreement measures
    torch.testing.assert_close(engine_forward(measured, feats, ids)[0], engine_forward(head, feats, ids)[0])
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 0}))
    with pytest.raises(ValueError, match="num_hidden_layers must be >= 1"):
        load_draft(out, target)


def test_upper_layers_get_their_own_learning_rate(pair2, tmp_path):
    from workbench.train.batches import Sequence
    from workbench.train.features import target_features
    from workbench.train.loop import train

    target, _ = pair2
    tokens = [[3 + (i * 5 + j) % 13 for i in range(20)] for j in range(4)]
    seqs = [Sequence(torch.tensor(t), f.half(), 4) for t, f in zip(tokens, target_features(target, tokens))]
    cfg = TrainConfig(steps=2, lr=1e-3, warmup=1, ckpt_every=2, max_tokens=96, head_layers=2, upper_lr_mult=10)
    head = train(tmp_path, target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=False)
    base, upper = torch.load(tmp_path / "ckpt.pt", weights_only=False)["opt"]["param_groups"]
    assert upper["lr"] == pytest.approx(10 * base["lr"])
    assert len(upper["params"]) == len(list(head.layers[1].parameters()))
    assert len(base["params"]) == len(list(head.parameters())) - len(upper["params"])
    cfg1 = TrainConfig(steps=1, warmup=1, ckpt_every=1, max_tokens=96)  # one layer: one group, the plain recipe
    train(tmp_path / "one", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg1, resume=False)
    assert len(torch.load(tmp_path / "one" / "ckpt.pt", weights_only=False)["opt"]["param_groups"]) == 1
    with pytest.raises(ValueError, match="upper_lr_mult and fuse_lr_mult must be > 0"):
        TrainConfig(upper_lr_mult=0)


def test_resume_and_export_follow_the_checkpoint_depth(pair2, tmp_path):
    from workbench.train.batches import Sequence
    from workbench.train.features import target_features
    from workbench.train.loop import layers_in, train

    target, _ = pair2
    tokens = [[3 + (i * 3 + j) % 13 for i in range(16)] for j in range(3)]
    seqs = [Sequence(torch.tensor(t), f.half(), 4) for t, f in zip(tokens, target_features(target, tokens))]
    cfg = TrainConfig(steps=1, warmup=1, ckpt_every=1, max_tokens=96, head_layers=2)
    train(tmp_path, target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=False)
    state = torch.load(tmp_path / "ckpt.pt", weights_only=False)["head"]
    assert layers_in(state) == 2 and layers_in({"fc.weight": torch.zeros(1)}) == 0
    with pytest.raises(ValueError, match="holds a head of 2 layers; --head-layers is 1"):
        train(tmp_path, target, train_seqs=seqs, val_seqs=seqs[:1], cfg=TrainConfig(steps=2, warmup=1, max_tokens=96),
              resume=True)
