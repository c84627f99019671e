"""The exact law of the next k tokens of a small-vocabulary target, by enumeration.

``P(x1..xk | prompt) = p(x1 | prompt) · p(x2 | prompt, x1) ··· p(xk | prompt, x1..x(k-1))``, each
factor from a plain forward of the target and the engine's own ``target_probs`` (temperature,
top-k, top-p). With V tokens that is 1 + V + ... + V^(k-1) forwards: fine for V = 8 and k <= 4
on a tiny model, hopeless on a real vocabulary, which is why the notebook uses a tiny target.
``sample_sequences`` draws the same tokens from the engine, many copies of one prompt at once.
"""

from __future__ import annotations

import itertools

import torch

from workbench.attention.batch import extend_batch
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.engine.sampling import SamplingParams, target_probs
from workbench.kv import SlotAllocator
from workbench.lessons import smoke

MAX_CELLS = 1 << 16  # V^k above this is not a "small vocabulary"


def next_token_laws(target, sequences: list[list[int]], params: SamplingParams) -> torch.Tensor:
    """[len(sequences), V] float64: the target's law of the token after each sequence, in one
    batched forward over fresh caches."""
    device = target.lm_head.weight.device
    total = sum(len(s) for s in sequences)
    kv = target.new_kv_pool(total)
    alloc = SlotAllocator(total)
    slots = [alloc.alloc(len(s)) for s in sequences]
    hidden = target(extend_batch(tokens=sequences, prefix_slots=[[] for _ in sequences], new_slots=slots,
                                 device=device), kv)
    ends = torch.tensor(list(itertools.accumulate(len(s) for s in sequences))) - 1
    return target_probs(target.logits(hidden[ends.to(device)]), params).double().cpu()


def sequence_law(target, prompt: list[int], params: SamplingParams, length: int) -> torch.Tensor:
    """[V] * length float64: P(the next ``length`` tokens after ``prompt`` are x1..x_length)."""
    vocab = target.config.vocab_size
    if length < 1 or vocab ** length > MAX_CELLS:
        raise ValueError(f"{vocab}^{length} sequences is too many to enumerate (at most {MAX_CELLS})")
    law = torch.ones(())
    for depth in range(length):
        prefixes = list(itertools.product(range(vocab), repeat=depth))  # same order as law.flatten()
        nxt = next_token_laws(target, [prompt + list(x) for x in prefixes], params)  # [V^depth, V]
        law = (law.reshape(-1, 1).double() * nxt).reshape((vocab,) * (depth + 1))
    return law


def sequence_counts(outputs: list[list[int]], vocab: int, length: int) -> torch.Tensor:
    """[V] * length counts of the first ``length`` tokens of each output."""
    if any(len(o) < length for o in outputs):
        raise ValueError(f"every output needs at least {length} tokens")
    index = torch.tensor([o[:length] for o in outputs]).T  # [length, N]
    counts = torch.zeros((vocab,) * length, dtype=torch.float64)
    counts.index_put_(tuple(index), torch.ones(len(outputs), dtype=torch.float64), accumulate=True)
    return counts


def sample_sequences(target, head, spec: SpecConfig, params: SamplingParams, prompt: list[int], length: int,
                     n: int) -> tuple[torch.Tensor, list[int]]:
    """``n`` requests of ``prompt`` decoded together by the engine: [V] * length counts of their
    first ``length`` tokens, and per request the drafts its first speculative step accepted (at
    smoke size, ``smoke.SAMPLES`` requests at most)."""
    eng = Engine(target, head, spec, sampling=params)
    eng.add_requests([prompt] * smoke.samples(n), length)
    eng.run()
    counts = sequence_counts([r.output_ids for r in eng.requests], target.config.vocab_size, length)
    # what the walk accepted, not what was emitted: ``length`` may end the output inside the step
    return counts, [r.drafts_accepted[0] for r in eng.requests]
