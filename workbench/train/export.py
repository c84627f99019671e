"""Write a trained head in the EAGLE checkpoint format, and the hot-token list.

``config.json`` = ``draft_config_for(target, layers, fuse_layers)`` (a LlamaConfig with the head's
layers, one for EAGLE's kind, and ``fuse_layers`` for a fused head);
``model.safetensors`` = the head's own weights in fp16 (``fc.weight``, ``layers.0.*``), never
``embed_tokens`` or ``lm_head`` (the target's are borrowed at load time).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch

from workbench.models.draft import DraftHead, draft_config_for
from workbench.models.heads import HOT_TOKENS_FILE


def export_head(head: DraftHead, out: Path, dtype: torch.dtype = torch.float16) -> Path:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    cfg = draft_config_for(head.target.config, len(head.layers), head.fuse_layers)
    cfg["torch_dtype"] = "float16" if dtype == torch.float16 else str(dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def response_counts(seqs) -> Counter:
    """How often each token occurs in the responses (not the prompts)."""
    counts = Counter()
    for s in seqs:
        counts.update(s.tokens[s.prompt_len:].tolist())
    return counts


def hot_tokens(counts: Counter, n: int) -> list[int]:
    """The ``n`` most frequent tokens (ties: lower id first)."""
    return [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def export_hot_tokens(seqs, out: Path, n: int = 8192) -> Path:
    """``hot_tokens.json``: response-token ids, most frequent first, and the share of the
    response tokens the first 1k/2k/4k/8k of them cover."""
    counts = response_counts(seqs)
    ids, total = hot_tokens(counts, n), sum(counts.values())
    coverage = {str(k): round(sum(counts[t] for t in ids[:k]) / total, 4) for k in (1024, 2048, 4096, 8192) if k <= n}
    f = out / HOT_TOKENS_FILE
    f.write_text(json.dumps({"source": "training responses", "distinct": len(counts), "coverage": coverage,
                             "token_ids": ids}) + "\n")
    return f
