"""The lent-GPU head recipe (``experiments/gpu/recipe.py``): the model wheel travels in parts
and is rebuilt exactly, bad parts are named, training stops at its time limit and resumes, and
the whole run works end to end at toy sizes on this CPU (``--dry-run``)."""

import json
import os

import pytest
import torch

from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint
from experiments.gpu.recipe import join_parts, main, split_file, train_steps


@pytest.mark.parametrize("n", [2, 3])
def test_split_and_join_rebuild_the_file(tmp_path, n):
    src = tmp_path / "model.whl"
    src.write_bytes(os.urandom(10_001))
    dirs = [tmp_path / f"p{i}" for i in range(n)]
    manifest = split_file(src, dirs)
    assert [p["bytes"] for p in manifest["parts"]] == [3334, 3334, 3333] if n == 3 else [5001, 5000]
    assert not (dirs[0] / "manifest.json").exists() or n == 1  # the manifest travels with the last part
    out = join_parts(dirs, tmp_path / "joined")
    assert out.name == "model.whl" and out.read_bytes() == src.read_bytes()


def test_join_names_what_is_wrong(tmp_path):
    src = tmp_path / "model.whl"
    src.write_bytes(os.urandom(4000))
    a, b = tmp_path / "a", tmp_path / "b"
    split_file(src, [a, b])
    with pytest.raises(ValueError, match="no manifest.json"):
        join_parts([a], tmp_path / "j")
    with pytest.raises(ValueError, match="cut into 2 parts; got 1"):
        join_parts([b], tmp_path / "j")
    with pytest.raises(ValueError, match="not part 1 of model.whl"):
        join_parts([b, a], tmp_path / "j")
    (a / "part").unlink()
    with pytest.raises(ValueError, match="missing \\(part 1 of 2\\)"):
        join_parts([a, b], tmp_path / "j")
    assert not (tmp_path / "j" / "model.whl").exists()  # nothing half-joined is left under the name


def test_steps_follow_the_data_and_bad_settings_are_refused(capsys):
    assert train_steps(2_300_000, 2.0) == 2000 and train_steps(10, 1.0) == 1
    for argv in (["run", "--gen-minutes", "0"], ["run", "--parts", "a", "b", "--target", "t"]):
        with pytest.raises(SystemExit):
            main(argv)
    assert "--gen-minutes" in capsys.readouterr().err


def test_training_stops_at_its_time_limit_and_resume_finishes_the_schedule(tmp_path):
    from workbench.train.batches import Sequence
    from workbench.train.loop import TrainConfig, train

    target = load_target(make_tiny_checkpoint(tmp_path / "tiny", num_kv_heads=2), torch.float32)
    h, gen = target.config.hidden_size, torch.Generator().manual_seed(0)
    seqs = [Sequence(torch.randint(3, 60, (12,), generator=gen), torch.randn(12, h, generator=gen).half(), 4)
            for _ in range(4)]
    cfg = TrainConfig(steps=5, warmup=1, ckpt_every=100, max_tokens=64)
    train(tmp_path / "work", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=False, minutes=1e-9)
    log = [json.loads(line) for line in (tmp_path / "work" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1] and "val" in log[0] and log[0]["stopped"].startswith("time limit")
    assert torch.load(tmp_path / "work" / "ckpt.pt", weights_only=False)["step"] == 1
    train(tmp_path / "work", target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=True)
    log = [json.loads(line) for line in (tmp_path / "work" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5] and "val" in log[-1]
    with pytest.raises(ValueError, match="device must be cpu, cuda"):
        TrainConfig(device="gpu")


def test_dry_run_generates_trains_both_arms_and_measures_them(smollm2_dir, tmp_path):
    from safetensors.torch import load_file

    from experiments.gpu.recipe import SHIPPED_HEAD

    out = tmp_path / "out"
    main(["run", "--dry-run", "--out", str(out), "--work", str(tmp_path / "work"), "--eval-minutes", "15"])
    report = json.loads((out / "report.json").read_text())
    assert report["data"]["shards"] == 2 and report["data"]["response_tokens"] > 0  # unseen shard, then the rest
    assert report["train_steps"] == 2 and set(report["arms"]) == {"warm", "fused"}
    for arm in report["arms"].values():
        assert arm["exit"] == 0 and [v["step"] for v in arm["val"]] == [1, 2] and 0.0 <= arm["val"][-1]["top1"] <= 1.0
    assert set(report["times"]) == {"generate", "train-warm", "train-fused", "evaluate"} and report["evaluate"] == "done"
    log = (out / "run.log").read_text()
    assert "[generate] exit 0" in log and "[generate] attention backend: padded on cpu" in log
    assert log.count("| linear:5 |") == 3  # the shipped head and the two new ones
    assert sorted(p.name for p in out.iterdir()) == ["fused-head", "report.json", "run.log", "warm-head"]
    new, old = load_file(str(out / "warm-head" / "model.safetensors")), load_file(str(SHIPPED_HEAD / "model.safetensors"))
    assert new.keys() == old.keys()
    moved = max(float((new[k].float() - old[k].float()).abs().max()) for k in new)
    assert 0.0 < moved < 0.05  # warm from the shipped head, two small steps away from it
    assert json.loads((out / "fused-head" / "config.json").read_text())["fuse_layers"] == [1, 14]
    assert "fuse.weight" in load_file(str(out / "fused-head" / "model.safetensors"))
    assert len(json.loads((out / "warm-head" / "hot_tokens.json").read_text())) > 0
    with pytest.raises(SystemExit):
        main(["run", "--dry-run", "--arms", "warm,cold"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_generation_and_training_on_cuda_match_the_cpu(tmp_path):
    """What the recipe runs on a GPU: the generator's greedy answers and features (the padded
    backend there, torch here), and a training run's losses and weights, equal the CPU's on a
    tiny fp32 model."""
    from workbench.train.batches import Sequence
    from workbench.train.generate import decode_batch
    from workbench.train.loop import TrainConfig, train

    path = make_tiny_checkpoint(tmp_path / "tiny", num_kv_heads=2)
    cpu, gpu = load_target(path, torch.float32), load_target(path, torch.float32, "cuda")
    gpu.attention_backend = "padded"  # as the recipe's generator runs
    contexts = [[5, 9, 13, 2], [7, 3], [11, 12, 13, 14, 15, 16]]
    (a_ids, a_feat), (b_ids, b_feat) = (decode_batch(t, contexts, temperature=0.0, seed=0, max_new=8, stop_ids=(1,),
                                                     features=True) for t in (cpu, gpu))
    assert a_ids == b_ids
    for x, y in zip(a_feat, b_feat):
        torch.testing.assert_close(x, y, atol=2e-3, rtol=2e-3)
    h, gen = cpu.config.hidden_size, torch.Generator().manual_seed(0)
    seqs = [Sequence(torch.randint(3, 60, (12,), generator=gen), torch.randn(12, h, generator=gen).half(), 4)
            for _ in range(4)]
    heads, logs = [], []
    for target, device in ((cpu, "cpu"), (gpu, "cuda")):
        cfg = TrainConfig(steps=3, warmup=1, ckpt_every=3, max_tokens=64, ttt_steps=3, hot_vocab=32, device=device)
        heads.append(train(tmp_path / device, target, train_seqs=seqs, val_seqs=seqs[:1], cfg=cfg, resume=False))
        logs.append([json.loads(line) for line in (tmp_path / device / "log.jsonl").read_text().splitlines()])
    for r, s in zip(*logs):
        assert r["feat"] == pytest.approx(s["feat"], rel=1e-3) and r["ce"] == pytest.approx(s["ce"], rel=1e-3)
    for (name, a), (_, b) in zip(heads[0].state_dict().items(), heads[1].state_dict().items()):
        torch.testing.assert_close(a, b.cpu(), atol=1e-4, rtol=1e-3, msg=name)


def test_the_model_converted_there_must_equal_the_one_packed_here(tmp_path):
    import tarfile

    from safetensors.torch import save_file

    from experiments.gpu.recipe import MODEL_FILES, WEIGHTS, same_model, tensor_digests

    here, there, packed = tmp_path / "here", tmp_path / "there", tmp_path / "b"
    for d in (here, there, packed):
        d.mkdir()
    weights = {"a.weight": torch.randn(3, 4), "b.weight": torch.arange(5, dtype=torch.float32)}
    save_file(weights, str(here / "model.safetensors"))
    (here / "tokenizer.json").write_text('{"as": "packed"}')
    (packed / WEIGHTS).write_text(json.dumps(tensor_digests(here / "model.safetensors")))
    with tarfile.open(packed / MODEL_FILES, "w:gz") as tar:
        tar.add(here / "tokenizer.json", arcname="tokenizer.json")
    (there / "tokenizer.json").write_text('{"as": "converted there"}')
    save_file({**weights, "b.weight": weights["b.weight"] + 1e-6}, str(there / "model.safetensors"))
    with pytest.raises(ValueError, match="differs from the packed one in 1 tensors \\(b.weight\\)"):
        same_model(there, packed)
    assert json.loads((there / "tokenizer.json").read_text()) == {"as": "converted there"}  # untouched
    save_file(weights, str(there / "model.safetensors"))
    same_model(there, packed)
    assert json.loads((there / "tokenizer.json").read_text()) == {"as": "packed"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA")
def test_cuda_asked_for_without_cuda_is_a_clear_error(smollm2_dir, tmp_path, capsys):
    from workbench.train.__main__ import main

    assert main(["train", "--shards", str(tmp_path), "--out", str(tmp_path / "w"), "--device", "cuda"]) == 2
    assert "error: --device cuda: this machine has no CUDA device" in capsys.readouterr().err
    assert main(["generate", "--out", str(tmp_path / "d"), "--device", "cuda"]) == 2
    assert "error: --device cuda: this machine has no CUDA device" in capsys.readouterr().err
    assert main(["train", "--shards", str(tmp_path), "--out", str(tmp_path / "w"), "--device", "gpu"]) == 2
    assert "device must be cpu, cuda, cuda:N or auto" in capsys.readouterr().err


def test_the_gguf_reader_names_dequantizes_and_unpermutes_like_llama_cpp_wrote(tmp_path):
    """A GGUF written the way llama.cpp's converter writes a Llama (q and k rows permuted per head,
    one quantized tensor) reads back as our state dict; a tensor it does not know is an error."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    from experiments.gpu.recipe import gguf_state_dict

    def permute(w, heads):  # llama.cpp's order: each head's two rotary halves interleaved
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((8, 32)).astype(np.float32), rng.standard_normal((4, 32)).astype(np.float32)
    emb = rng.standard_normal((5, 32)).astype(np.float32)
    norm = rng.standard_normal(32).astype(np.float32)

    def write(path, extra=None):
        w = GGUFWriter(str(path), "llama")
        w.add_tensor("token_embd.weight", quantize(emb, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
        w.add_tensor("blk.0.attn_q.weight", permute(q, 2))
        w.add_tensor("blk.0.attn_k.weight", permute(k, 1))
        w.add_tensor("blk.0.attn_norm.weight", norm)
        if extra:
            w.add_tensor(extra, norm)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write(tmp_path / "m.gguf")
    state = gguf_state_dict(tmp_path / "m.gguf", num_heads=2, num_kv_heads=1)
    assert sorted(state) == ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                             "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.q_proj.weight"]
    assert torch.equal(state["model.layers.0.self_attn.q_proj.weight"], torch.from_numpy(q))
    assert torch.equal(state["model.layers.0.self_attn.k_proj.weight"], torch.from_numpy(k))
    assert torch.equal(state["model.layers.0.input_layernorm.weight"], torch.from_numpy(norm))
    torch.testing.assert_close(state["model.embed_tokens.weight"], torch.from_numpy(emb), atol=0.03, rtol=0.02)  # Q8_0
    write(tmp_path / "odd.gguf", extra="blk.0.attn_qkv.weight")
    with pytest.raises(ValueError, match="blk.0.attn_qkv.weight is not a Llama weight"):
        gguf_state_dict(tmp_path / "odd.gguf", num_heads=2, num_kv_heads=1)
