"""The data directory that ``generate`` fills and training reads.

A shard (``shard_NNNNN.safetensors``) stores what training needs, compactly::

    tokens       [N] int32      all sequences, concatenated (context + answer, the answer ends
                                with <|im_end|> unless cut at --max-new)
    starts       [S + 1] int64  sequence boundaries in tokens
    prompt_lens  [S] int64      context tokens of each sequence (the loss covers the answer only)
    prompt_index [S] int64      index of the prompt in the prompt set
    temperature  [S] float32    0 = greedy
    turn         [S] int64      1 = first answer, 2 = answer to the follow-up

about 4 bytes per token. Beside it, ``features/feat_NNNNN.safetensors`` holds the target's
post-norm features ``f_t`` [N, H] fp16, recorded from the target's own forwards while it decodes
(free in compute; H x 2 bytes per token). With ``generate --no-features`` only the ids are kept
and ``features.py`` recomputes the features. Each file is written to ``.tmp`` and renamed into
place, so a killed run leaves only finished shards, which the next run skips. ``config.json``
holds the settings that made the directory: a resume with others is refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

FORMAT = "workbench-selfdistill-v2"


def shard_path(out: Path, i: int) -> Path:
    return out / f"shard_{i:05d}.safetensors"


def beside(shard: Path, kind: str = "feat") -> Path:
    """The file in ``features/`` that belongs to ``shard``: ``feat_NNNNN`` its features,
    ``aux{layers}_NNNNN`` the residual streams a fused head taps."""
    return shard.parent / "features" / shard.name.replace("shard_", f"{kind}_")


def feature_path(out: Path, i: int) -> Path:
    """Where ``features.py`` looks for a shard's features (and caches them when it computes them)."""
    return beside(shard_path(out, i))


def shard_files(data: Path) -> list[Path]:
    files = sorted(data.glob("shard_*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no shard_*.safetensors in {data}: run python -m workbench.train generate first")
    return files


def response_tokens(shard: dict[str, torch.Tensor]) -> int:
    return int(shard["starts"][-1] - shard["prompt_lens"].sum())


def totals(out: Path) -> dict:
    """Shards, sequences, response and all tokens, and bytes on disk of finished shards."""
    from safetensors import safe_open

    t = {"shards": 0, "sequences": 0, "response_tokens": 0, "tokens": 0, "bytes": 0, "feature_bytes": 0}
    for p in sorted(out.glob("shard_*.safetensors")):
        with safe_open(str(p), "pt") as f:
            sh = {k: f.get_tensor(k) for k in ("starts", "prompt_lens")}
        t["shards"] += 1
        t["sequences"] += len(sh["prompt_lens"])
        t["response_tokens"] += response_tokens(sh)
        t["tokens"] += int(sh["starts"][-1])
        t["bytes"] += p.stat().st_size
        f = beside(p)
        t["feature_bytes"] += f.stat().st_size if f.exists() else 0
    return t


def save_atomic(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, str] | None = None) -> None:
    """Write beside ``path`` and rename into place: a reader never sees a partial shard."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def check_same_data(path: Path, identity: str) -> None:
    """Resume only into a directory made with the same prompt set and knobs (else shard i would
    mean other prompts); a new directory gets ``config.json``."""
    if path.exists():
        if json.loads(path.read_text()) != json.loads(identity):
            raise ValueError(f"{path.parent} holds data made with other settings ({path.read_text().strip()}); "
                             f"use the same settings to resume, or another --out")
        return
    path.write_text(identity + "\n")
