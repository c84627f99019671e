"""Self-distillation data: the target's own greedy answers to the training prompts, with its
post-norm features ``f_t`` for every position of every sequence.

One pass makes both. The target decodes a batch of prompts greedily (transformers' batched
``generate`` on the same checkpoint, left-padded, fp32) while a hook on the final RMSNorm records
the features of every position it runs: the prompt at prefill, then each generated token as it
is fed back. Every position but the last token of a sequence is run, which is exactly what
training needs (``f_t`` for t = 0..T-2). ``check_features`` compares these features with our
own ``TargetModel`` prefill of the same sequence.

Shards (``<work>/data/shard_NNNN.safetensors``), one per batch, resumable::

    tokens      [N] int32       all sequences of the batch, concatenated (prompt + response)
    features    [N, H] fp16     f_t per token (the row of each sequence's last token is zero)
    starts      [S + 1] int64   sequence boundaries in tokens / features
    prompt_lens [S] int64       prompt tokens per sequence (loss only after them)
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from workbench.models.chat import chat_ids


def length_batches(prompt_ids: list[list[int]], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar prompt length (less padding)."""
    order = sorted(range(len(prompt_ids)), key=lambda i: (len(prompt_ids[i]), i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


class FeatureRecorder:
    """Forward hook on the final norm: keeps its outputs, [B, T_step, H] per forward."""

    def __init__(self, norm: torch.nn.Module):
        self.chunks: list[torch.Tensor] = []
        self.handle = norm.register_forward_hook(lambda _m, _i, out: self.chunks.append(out.detach().float()))

    def take(self) -> torch.Tensor:
        """All recorded positions, [B, T_total, H]; clears the record."""
        out, self.chunks = torch.cat(self.chunks, dim=1), []
        return out

    def close(self) -> None:
        self.handle.remove()


@torch.inference_mode()
def generate_batch(model, prompts: list[list[int]], max_new: int, eos: int, pad: int, rec: FeatureRecorder):
    """Greedy answers for one batch. Returns [(token ids, prompt_len, features [T, H] fp16)]."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):  # left padding: every prompt ends at column width-1
        ids[b, width - len(p):] = torch.tensor(p)
        mask[b, width - len(p):] = 1
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                         eos_token_id=eos, pad_token_id=pad)
    feats = rec.take()  # [B, width + steps - 1, H]
    rows = []
    for b, p in enumerate(prompts):
        gen = out[b, width:].tolist()
        if eos in gen:
            gen = gen[: gen.index(eos) + 1]
        seq = p + gen
        f = torch.zeros(len(seq), feats.shape[-1], dtype=torch.float16)
        f[:-1] = feats[b, width - len(p): width - len(p) + len(seq) - 1].half()
        rows.append((seq, len(p), f))
    return rows


def save_shard(path: Path, rows) -> int:
    from safetensors.torch import save_file

    starts = [0]
    for seq, _, _ in rows:
        starts.append(starts[-1] + len(seq))
    save_file({
        "tokens": torch.tensor([t for seq, _, _ in rows for t in seq], dtype=torch.int32),
        "features": torch.cat([f for _, _, f in rows]),
        "starts": torch.tensor(starts, dtype=torch.int64),
        "prompt_lens": torch.tensor([n for _, n, _ in rows], dtype=torch.int64),
    }, str(path.with_suffix(".tmp")))
    path.with_suffix(".tmp").rename(path)
    return starts[-1]


def make_data(work: Path, target_dir: Path, prompts: list[str], batch_size: int, max_new: int,
              minutes: float, seed: int = 0,
              worker: int = 0, workers: int = 1) -> None:
    """Generate shards until every batch is done or ``minutes`` ran out; skips finished shards.
    ``worker`` of ``workers`` processes takes every ``workers``-th batch."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target_dir)
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    ids = [chat_ids(tok, p) for p in prompts]
    batches = length_batches(ids, batch_size)
    random.Random(seed).shuffle(batches)  # a time-cut run still covers every prompt length
    out_dir = work / "data"
    out_dir.mkdir(parents=True, exist_ok=True)
    rec, t0 = FeatureRecorder(model.model.norm), time.time()
    for i, idx in enumerate(tqdm(batches, desc="self-distillation", unit="batch")):
        path = out_dir / f"shard_{i:04d}.safetensors"
        if path.exists() or i % workers != worker:  # workers split the batches between them
            continue
        if time.time() - t0 > minutes * 60:
            tqdm.write(f"time budget of {minutes} min reached after {i} batches")
            break
        n = save_shard(path, generate_batch(model, [ids[j] for j in idx], max_new, eos, pad, rec))
        tqdm.write(f"{path.name}: {len(idx)} sequences, {n} tokens, {time.time() - t0:.0f}s")
    rec.close()


def data_worker(job: dict, worker: int) -> None:
    """One data process (one torch thread): ``make_data`` on every ``workers``-th batch."""
    from workbench.train.prompts import build_prompts

    torch.set_num_threads(1)
    make_data(job["work"], job["target_dir"], build_prompts(job["seed"], job["num_prompts"]), job["batch_size"],
              job["max_new"], job["minutes"], job["seed"], worker, job["workers"])


def load_shards(work: Path) -> list[dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    return [load_file(str(p)) for p in sorted((work / "data").glob("shard_*.safetensors"))]
