"""Training examples from the data shards (``features.py``), packed into padded batches of similar length.

A sequence of T tokens x_0..x_{T-1} with features f_0..f_{T-2} gives T-1 pairs: pair t is
``(f_t, x_{t+1})`` at position t, with target ``f_{t+1}``. The last pair has no target (f_{T-1},
the feature at the final token, is never computed), and pairs before ``prompt_len - 1`` are
context only: pair t's prediction drafts x_{t+2}, and the first token the draft head ever
proposes is x_{P+1}. So the loss covers pairs ``P-1 <= t <= T-3``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch


@dataclass
class Sequence:
    tokens: torch.Tensor  # [T] int64
    features: torch.Tensor  # [T, H] fp16; row T-1 unused
    prompt_len: int
    aux: torch.Tensor | None = None  # [T, n H] fp16: residual streams after target layers (fused heads)

    @property
    def num_targets(self) -> int:
        return max(0, len(self.tokens) - 1 - self.prompt_len)


def plan_batches(seqs: list[Sequence], max_tokens: int, seed: int) -> list[list[int]]:
    """Index batches of length-sorted sequences, each at most ``max_tokens`` padded pairs,
    in a seeded random order."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i].tokens))
    batches, cur, width = [], [], 0
    for i in order:
        w = len(seqs[i].tokens) - 1
        if cur and max(width, w) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, w)
    if cur:
        batches.append(cur)
    random.Random(seed).shuffle(batches)
    return batches


@dataclass
class Batch:
    features: torch.Tensor  # [B, W, H] fp32, f_t
    next_ids: torch.Tensor  # [B, W] int64, x_{t+1}
    targets: torch.Tensor  # [N, H] fp32, f_{t+1} of the loss pairs
    loss_mask: torch.Tensor  # [B, W] bool, the loss pairs
    aux: torch.Tensor | None = None  # [B, W, n H] fp32, a fused head's extra input at t (None: plain)

    def to(self, device: torch.device | str) -> "Batch":
        """The same batch on ``device`` (collate builds it on the CPU)."""
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.features), move(self.next_ids), targets=move(self.targets),
                     loss_mask=move(self.loss_mask),
                     aux=move(self.aux))


def collate(seqs: list[Sequence]) -> Batch:
    width = max(len(s.tokens) - 1 for s in seqs)
    hid = seqs[0].features.shape[-1]
    feats = torch.zeros(len(seqs), width, hid)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.bool)
    targets = []
    aux = None if seqs[0].aux is None else torch.zeros(len(seqs), width, seqs[0].aux.shape[-1])
    for b, s in enumerate(seqs):
        n = len(s.tokens) - 1
        feats[b, :n] = s.features[:n].float()
        if aux is not None:
            aux[b, :n] = s.aux[:n].float()
        ids[b, :n] = s.tokens[1:]
        lo, hi = s.prompt_len - 1, n - 1  # pairs lo..hi-1 have a target and draft response tokens
        mask[b, lo:hi] = True
        targets.append(s.features[lo + 1 : hi + 1].float())
    return Batch(feats, ids, targets=torch.cat(targets), loss_mask=mask, aux=aux)
