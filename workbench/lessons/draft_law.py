"""The draft head's law q of the next token at one position, computed from scratch.

The target runs over x_0..x_{n-1} and returns features f_0..f_{n-1}; the head then reads the
pairs (f_t, x_{t+1}) for t = 0..n-2, exactly as the engine's draft extend does, and its last row
predicts x_n: the depth-1 draft distribution after ``tokens``. The target's own law p of x_n
comes from f_{n-1} (``exact_law.next_token_laws``). Both use the engine's ``target_probs``
(temperature, top-k, top-p), as Algorithm 1 samples q under the same settings.
"""

from __future__ import annotations

import torch

from workbench.attention.batch import extend_batch
from workbench.engine.sampling import SamplingParams, target_probs
from workbench.kv import SlotAllocator


def draft_next_token_law(target, head, tokens: list[int], params: SamplingParams) -> torch.Tensor:
    """[V] float64: the head's law of the token after ``tokens`` (at least 2 tokens), over the
    full vocabulary (0 outside the head's hot tokens, if it has a pruned draft vocabulary)."""
    if len(tokens) < 2:
        raise ValueError("the head needs at least one pair (f_t, x_{t+1}): give at least 2 tokens")
    device = target.lm_head.weight.device
    n = len(tokens)
    kv = target.new_kv_pool(n)
    features = target(extend_batch(tokens=[tokens], prefix_slots=[[]], new_slots=[SlotAllocator(n).alloc(n)],
                                   device=device), kv)  # [n, H]
    draft_kv = head.new_kv_pool(n - 1)
    pairs = extend_batch(tokens=[tokens[1:]], prefix_slots=[[]], new_slots=[SlotAllocator(n - 1).alloc(n - 1)],
                         device=device)
    hidden = head(features[:-1], pairs, draft_kv)  # row t: pair (f_t, x_{t+1}), predicts x_{t+2}
    log_probs, cols = head.log_probs(hidden[-1:])  # [1, V'] and the token id of each column
    q = target_probs(log_probs, params)[0].double().cpu()
    if cols is None:
        return q
    return torch.zeros(target.config.vocab_size, dtype=torch.float64).index_copy(0, cols.cpu(), q)
