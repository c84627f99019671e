"""Load HF checkpoints (safetensors, sharded or not, or ``.bin`` with ``weights_only=True``)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from torch import nn

from workbench.models.config import ModelConfig
from workbench.models.llama import TargetModel

IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some old checkpoints saved


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory (or a single weights file)."""
    from safetensors.torch import load_file

    path = Path(path)
    if path.is_file():
        files = [path]
    else:
        index = path / "model.safetensors.index.json"
        if index.exists():
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            files = [path / n for n in names]
        else:
            files = sorted(path.glob("*.safetensors")) or sorted(path.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors or pytorch_model*.bin weights")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        if f.suffix == ".safetensors":
            state.update(load_file(str(f)))
        else:
            state.update(torch.load(f, map_location="cpu", weights_only=True))
    return state


def load_strict(module: nn.Module, state: dict[str, torch.Tensor], optional: tuple[str, ...] = ()) -> None:
    """``load_state_dict`` that names every missing or unexpected key; ``optional`` keys may be
    absent (tied ``lm_head``)."""
    state = {k: v for k, v in state.items() if not k.endswith(IGNORED_SUFFIXES)}
    expected = set(module.state_dict())
    missing = sorted(expected - set(state) - set(optional))
    unexpected = sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(f"checkpoint does not fit: missing {missing[:6]}, unexpected {unexpected[:6]}")
    for name, param in module.state_dict().items():
        if name in state and tuple(state[name].shape) != tuple(param.shape):
            raise ValueError(f"{name}: checkpoint shape {tuple(state[name].shape)} != model {tuple(param.shape)}")
    module.load_state_dict(state, strict=False)


@contextlib.contextmanager
def no_init():
    """Build modules without drawing their random initial weights: every parameter is read from
    the checkpoint right after, so the draws would be thrown away. Built on the meta device instead
    (then moved with ``to_empty``), the draws compute nothing, but the first meta op imports torch's
    Python reference ops: ``Workbench.load`` of the default model took 8.6 s that way and 5.6 s
    this way (2-core AMD EPYC with AVX2 only, one thread, 2026-12-07)."""
    names = ("normal_", "uniform_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_", "xavier_uniform_",
             "xavier_normal_", "zeros_", "ones_", "constant_")
    saved = {n: getattr(nn.init, n) for n in names}
    try:
        for n in names:
            setattr(nn.init, n, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for n, f in saved.items():
            setattr(nn.init, n, f)


def load_target(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> TargetModel:
    cfg = ModelConfig.from_dir(path)
    with torch.device(device), no_init():  # uninitialised memory, filled from the checkpoint below
        model = TargetModel(cfg)
    state = read_state_dict(path)
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    load_strict(model, state, optional=("lm_head.weight",) if cfg.tie_word_embeddings else ())
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(dtype).eval()
