"""The draft head shipped with the package: EAGLE-2 for SmolLM2-135M-Instruct.

It lives in ``workbench/assets/eagle-smollm2-135m/`` (``config.json``, ``model.safetensors`` in
fp16 without ``embed_tokens``, ``README.md``; optionally ``hot_tokens.json``), trained by
``python -m workbench.train``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


DEFAULT_HEAD = "eagle-smollm2-135m"
HOT_TOKENS_FILE = "hot_tokens.json"


def default_draft_dir() -> Path:
    """Directory of the shipped head (it may be missing in a checkout that never trained one)."""
    return Path(__file__).resolve().parent.parent / "assets" / DEFAULT_HEAD


def load_hot_tokens(path: Path | None = None, n: int | None = None) -> torch.Tensor | None:
    """The head's frequent-token list (most frequent first), cut to ``n``; None if absent."""
    f = (path or default_draft_dir()) / HOT_TOKENS_FILE
    if not f.exists():
        return None
    ids = json.loads(f.read_text())["token_ids"]
    return torch.tensor(ids if n is None else ids[:n], dtype=torch.int64)
