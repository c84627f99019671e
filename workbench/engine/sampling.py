"""Sampling parameters and the target distribution ``p`` they define.

One function, ``target_probs``, turns logits into the distribution every method samples from:
plain decoding, the bonus token, and the acceptance tests of speculative decoding. Using the same
function everywhere is what makes speculation lossless under temperature, top-k and top-p.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0 and self.temperature <= 100.0):
            raise ValueError(f"temperature must be in [0, 100], got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """[R, V] logits -> [R, V] fp32 probabilities after temperature, top-k, top-p (renormalised).

    Greedy gives a one-hot on the argmax (the first maximum, as ``torch.argmax``).
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p: drop a token if the mass before it
        # already reaches top_p (the first token is always kept).
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """[R, V] -> [R] int64, one draw per row (argmax when a row is one-hot)."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def choose(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """Next token per row: argmax when greedy, else a draw from ``target_probs``."""
    if params.greedy:
        return logits.argmax(-1)
    return sample(target_probs(logits, params), generator)
