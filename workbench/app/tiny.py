"""A tiny random target with a word-level tokenizer and a chat template, for app tests and demos.

The app needs what the real model has: weights, a tokenizer and a chat template. This writes all
three into one directory in about a second, so the UI can be exercised end to end without the
real model::

    python -m workbench.app.tiny /tmp/tiny-app          # prints the directory
    python app.py --target /tmp/tiny-app --draft random --dtype fp32

Its vocabulary is small (16 tokens), so a random draft head still guesses the random target's
choice often and the tree, the walk and the rollback all have something to show.
"""

from __future__ import annotations

import sys
from pathlib import Path

SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]  # ids 0..3; bos 1, eos 2, pad 0 as the checkpoint
WORDS = ["the", "cat", "sat", "on", "mat", "rug", "and", "soft", "dog", "ran", "tell", "."]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


def make_tiny_app_model(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny Llama checkpoint (random, ``seed``) plus its tokenizer into ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from workbench.testing.tiny import make_tiny_checkpoint

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
