"""Model configuration read from an HF ``config.json`` (Llama, Qwen2, Mistral)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


@dataclass(frozen=True)
class ModelConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = field(default=None, hash=False, compare=False)
    qkv_bias: bool = False  # Qwen2: q/k/v have a bias, o_proj none
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    model_type: str = "llama"

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.num_heads} attention heads is not a multiple of {self.num_kv_heads} KV heads")

    @classmethod
    def from_dict(cls, cfg: dict) -> "ModelConfig":
        model_type = cfg.get("model_type", "llama")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_type {model_type!r} is not a Llama-family model ({', '.join(SUPPORTED_MODEL_TYPES)})")
        heads = cfg["num_attention_heads"]
        rope = cfg.get("rope_parameters") or {}
        scaling = cfg.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
        if scaling is not None and scaling.get("rope_type", scaling.get("type", "default")) in ("default", None):
            scaling = None
        attention_bias = cfg.get("attention_bias", False)
        return cls(
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            vocab_size=cfg["vocab_size"],
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-5),
            rope_theta=rope.get("rope_theta", cfg.get("rope_theta", 10000.0)),
            rope_scaling=scaling,
            qkv_bias=True if model_type == "qwen2" else bool(attention_bias),
            o_bias=False if model_type == "qwen2" else bool(attention_bias),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            model_type=model_type,
        )

    @classmethod
    def from_dir(cls, path: str | Path) -> "ModelConfig":
        return cls.from_dict(json.loads((Path(path) / "config.json").read_text()))
