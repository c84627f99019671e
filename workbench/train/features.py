"""Training sequences from the shards of ``generate.py``, with the target's post-norm features
``f_t`` from ``features/feat_NNNNN.safetensors`` beside them: recorded by the generator while it
decoded, or, for shards made with ``--no-features``, recomputed here from the token ids with our
own ``TargetModel`` prefill and cached there (fp16, written then renamed).

Cost of recomputing: one target prefill over every token, once (as many target FLOPs as the
generation's, though batched better); the cache takes ``hidden_size * 2`` bytes per token
(1,152 B for SmolLM2, about 1.15 GB per million tokens, prompts included), against 4 B per token
for the ids alone. With ``cache=False`` nothing is written (recomputed on every load).

Held-out split by prompt: a prompt's greedy answer, sampled answers and follow-up all fall on
the same side, so "held-out" means conversations on prompts never trained on. Validation keeps
the greedy first answers only (what the head meets at inference under greedy decoding).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from workbench.attention.batch import extend_batch
from workbench.train.batches import Sequence


@torch.inference_mode()
def target_features(target, seqs: list[list[int]], max_tokens: int = 4096) -> list[torch.Tensor]:
    """Post-norm features [T, H] (fp32) of each token sequence: prefill batches of at most
    ``max_tokens`` tokens (one sequence alone may exceed it)."""
    out, i = [], 0
    while i < len(seqs):
        j, n = i, 0
        while j < len(seqs) and (j == i or n + len(seqs[j]) <= max_tokens):
            n += len(seqs[j])
            j += 1
        group = seqs[i:j]
        slots, start = [], 0
        for s in group:
            slots.append(list(range(start, start + len(s))))
            start += len(s)
        batch = extend_batch(group, [[] for _ in group], slots, [0] * len(group), target.lm_head.weight.device)
        hidden = target(batch, target.new_kv_pool(start)).float().cpu()  # [sum T, H]
        out += list(hidden.split([len(s) for s in group]))
        i = j
    return out


def shard_files(data: Path) -> list[Path]:
    files = sorted(data.glob("shard_*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no shard_*.safetensors in {data}: run python -m workbench.train.generate first")
    return files


def load_shard(path: Path, target, cache: bool = True) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """A shard's tensors and its fp16 features [N, H] (from the cache, else computed)."""
    from safetensors.torch import load_file, save_file

    shard = load_file(str(path))
    feat_path = path.parent / "features" / path.name.replace("shard_", "feat_")
    if feat_path.exists():
        return shard, load_file(str(feat_path))["features"]
    starts = shard["starts"].tolist()
    toks = shard["tokens"].tolist()
    feats = torch.cat(target_features(target, [toks[s:e] for s, e in zip(starts, starts[1:])])).half()
    if cache:
        feat_path.parent.mkdir(exist_ok=True)
        tmp = feat_path.with_name(feat_path.name + ".tmp")
        save_file({"features": feats}, str(tmp))
        os.replace(tmp, feat_path)
    return shard, feats


def is_held_out(prompt_index: int, val_every: int) -> bool:
    return val_every > 0 and prompt_index % val_every == 0


def load_sequences(data: Path, target, max_response_tokens: int | None = None, val_every: int = 50,
                   cache: bool = True, log=None) -> tuple[list[Sequence], list[Sequence]]:
    """(train, held-out) sequences from the shards in order, until the training side holds
    ``max_response_tokens`` response tokens (None = all shards). Every ``val_every``-th prompt
    is held out (its greedy first answer is kept for validation)."""
    train, val, seen = [], [], 0
    for path in shard_files(data):
        if max_response_tokens is not None and seen >= max_response_tokens:
            break
        shard, feats = load_shard(path, target, cache)
        starts = shard["starts"].tolist()
        for i, p in enumerate(shard["prompt_lens"].tolist()):
            s, e = starts[i], starts[i + 1]
            seq = Sequence(shard["tokens"][s:e].long(), feats[s:e], p)
            if seq.num_targets <= 0:
                continue
            if is_held_out(int(shard["prompt_index"][i]), val_every):
                if float(shard["temperature"][i]) == 0.0 and int(shard["turn"][i]) == 1:
                    val.append(seq)
            else:
                train.append(seq)
                seen += e - s - p
        if log:
            log(f"{path.name}: {len(train)} training sequences, {seen:,} response tokens", flush=True)
    return train, val
