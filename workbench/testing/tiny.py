"""Tiny random HF checkpoints (Llama and Qwen2 styles) written to a directory, seeded.

They load through the same path as real checkpoints, so tests exercise the real loader.
"""

from __future__ import annotations

from pathlib import Path

import torch


def make_tiny_checkpoint(path: str | Path, style: str = "llama", seed: int = 0, vocab_size: int = 96,
                         hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2,
                         tie: bool = False, rope_scaling: dict | None = None) -> Path:
    """Save a random ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` with HF's own ``save_pretrained``."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    common = dict(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                  num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                  max_position_embeddings=1024, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0)
    torch.manual_seed(seed)
    if style == "llama":
        kwargs = dict(common, rope_theta=10000.0)
        if rope_scaling is not None:
            kwargs["rope_scaling"] = rope_scaling
        model = LlamaForCausalLM(LlamaConfig(**kwargs))
    elif style == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, rope_theta=1000000.0))
        with torch.no_grad():  # random non-zero biases so the bias path is really tested
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
    else:
        raise ValueError(f"unknown style {style!r}")
    with torch.no_grad():  # HF initialises with std 0.02: too flat to make greedy choices differ
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.15)
    model.save_pretrained(path)
    return path
