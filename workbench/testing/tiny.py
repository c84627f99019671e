"""Tiny random HF checkpoints (Llama and Qwen2 styles) written to a directory, seeded.

They load through the same path as real checkpoints, so tests exercise the real loader.

The app needs what the real model has: weights, a tokenizer and a chat template.
``make_tiny_app_model`` writes all three into one directory in about a second, so the UI can be
exercised end to end without the real model::

    python -m workbench.testing.tiny /tmp/tiny-app      # prints the directory
    python app.py --target /tmp/tiny-app --draft random --dtype fp32

Its vocabulary is small (16 tokens), so a random draft head still guesses the random target's
choice often and the tree, the walk and the rollback all have something to show.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]  # ids 0..3; bos 1, eos 2, pad 0 as the checkpoint
WORDS = ["the", "cat", "sat", "on", "mat", "rug", "and", "soft", "dog", "ran", "tell", "."]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


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


def make_tiny_app_model(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny Llama checkpoint (random, ``seed``) plus its tokenizer into ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
    path = make_tiny_checkpoint(path, vocab_size=len(vocab), seed=seed)
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>",
                                  bos_token="<|im_start|>", eos_token="<|im_end|>")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    return path


if __name__ == "__main__":
    print(make_tiny_app_model(sys.argv[1] if len(sys.argv) > 1 else "tiny-app-model"))
