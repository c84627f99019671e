"""Training sequences from the shards of ``generate.py``, with the target's post-norm features
``f_t`` from ``features/feat_NNNNN.safetensors`` beside them: recorded by the generator while it
decoded, or, for shards made with ``--no-features``, recomputed here from the token ids with our
own ``TargetModel`` prefill and cached there (fp16, written then renamed). A fused head also
reads the residual stream after some target layers: those are always computed here (one
prefill per sequence) and cached beside as ``aux{layers}_NNNNN.safetensors`` (``len(layers) * H
* 2`` bytes a token).

Recomputing costs one target prefill over every token, once; the cache takes ``hidden_size * 2``
bytes per token, against 4 for the ids.

Held-out split by prompt: a prompt's greedy answer, sampled answers and follow-up all fall on
the same side, so "held-out" means conversations on prompts never trained on. Validation keeps
the greedy first answers only (what the head meets at inference under greedy decoding).
"""

from __future__ import annotations

from pathlib import Path

import torch

from workbench.attention.batch import extend_batch
from workbench.train.batches import Sequence
from workbench.train.shards import beside, save_atomic, shard_files


@torch.inference_mode()
def target_features(target, seqs: list[list[int]], max_tokens: int = 4096,
                    taps: tuple[int, ...] = ()) -> list[torch.Tensor]:
    """Post-norm features [T, H] (fp32) of each token sequence: prefill batches of at most
    ``max_tokens`` tokens (one sequence alone may exceed it). ``taps``: [T, (n + 1) H], the
    residual stream after those target layers in front (a fused head's input)."""
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
        batch = extend_batch(tokens=group, prefix_slots=[[] for _ in group], new_slots=slots,
                             device=target.lm_head.weight.device)
        hidden = target(batch, target.new_kv_pool(start), taps).float().cpu()  # [sum T, W]
        out += list(hidden.split([len(s) for s in group]))
        i = j
    return out


def aux_path(shard: Path, taps: tuple[int, ...]) -> Path:
    """Where a shard's tapped residual streams (a fused head's extra input) are cached."""
    return beside(shard, "aux" + "-".join(str(i) for i in taps))


FP16_MAX = 65504.0


def load_shard(path: Path, target,
               taps: tuple[int, ...] = ()) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None]:
    """A shard's tensors, its fp16 features [N, H] and, for ``taps``, the residual streams
    after those target layers [N, len(taps) * H] fp16 (else None); each from the cache in
    ``features/``, else computed (one prefill for both) and cached."""
    from safetensors.torch import load_file

    shard = load_file(str(path))
    feat_path = beside(path)
    aux_file = aux_path(path, taps) if taps else None
    feats = load_file(str(feat_path))["features"] if feat_path.exists() else None
    aux = load_file(str(aux_file))["features"] if aux_file is not None and aux_file.exists() else None
    if feats is not None and (aux is not None or not taps):
        return shard, feats, aux
    starts = shard["starts"].tolist()
    toks = shard["tokens"].tolist()
    wide = torch.cat(target_features(target, [toks[s:e] for s, e in zip(starts, starts[1:])], taps=taps))
    h = target.config.hidden_size
    if taps:
        peak = float(wide[:, :-h].abs().max())
        if peak > FP16_MAX:
            raise ValueError(f"{path.name}: the residual stream after target layers {list(taps)} reaches "
                             f"{peak:.0f}, beyond fp16; fuse other layers")
        aux = wide[:, :-h].half()
        save_atomic(aux_file, {"features": aux})
    if feats is None:  # recorded features, when the generator kept them, stay as they were
        feats = wide[:, -h:].half()
        save_atomic(feat_path, {"features": feats})
    return shard, feats, aux


def is_held_out(prompt_index: int, val_every: int) -> bool:
    return val_every > 0 and prompt_index % val_every == 0


def load_sequences(data: Path | list[Path], target, max_response_tokens: int | None = None, val_every: int = 50,
                   log=None, taps: tuple[int, ...] = ()) -> tuple[list[Sequence], list[Sequence]]:
    """(train, held-out) sequences from the shards in order (of each directory of ``data`` in
    turn), until the training side holds ``max_response_tokens`` response tokens (None = all
    shards). Every ``val_every``-th prompt of each directory is held out (its greedy first answer
    is kept for validation). ``taps``: each sequence also carries the residual streams after
    those target layers (``Sequence.aux``)."""
    train, val, seen = [], [], 0
    for path in [f for d in ([data] if isinstance(data, Path) else data) for f in shard_files(d)]:
        if max_response_tokens is not None and seen >= max_response_tokens:
            break
        shard, feats, aux = load_shard(path, target, taps)
        starts = shard["starts"].tolist()
        for i, p in enumerate(shard["prompt_lens"].tolist()):
            s, e = starts[i], starts[i + 1]
            seq = Sequence(shard["tokens"][s:e].long(), feats[s:e], p, None if aux is None else aux[s:e])
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
