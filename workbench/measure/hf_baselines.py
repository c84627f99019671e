"""The transformers baselines: greedy ``generate`` and prompt lookup decoding, timed like ours.

Both load the HF model from the same target directory in the same dtype, take the same prompt
ids (chat template applied once, by the benchmark) and stop on the same stop ids. Tokens are
counted as the engine counts them: the new tokens only, a final stop token included; seconds
cover the whole ``generate`` call (prefill included), as ``Workbench.generate`` times its own, the
clock read after a sync on CUDA (``cost.synced_clock``).

Prompt lookup (``prompt_lookup_num_tokens``) drafts by matching the last n-gram against the
prompt and copying what followed it; transformers verifies the copy with the target, so its
greedy output equals plain greedy ``generate``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.measure.cost import synced_clock

PROMPT_LOOKUP_TOKENS = 10  # drafted tokens per step (transformers' prompt_lookup_num_tokens)


@dataclass
class HFResult:
    output_ids: list[int]  # new tokens, a final stop token included
    seconds: float


def load_hf_model(target_dir, dtype: torch.dtype):
    """``AutoModelForCausalLM`` from the target directory, in ``dtype``, on the CPU, eval mode."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    return AutoModelForCausalLM.from_pretrained(target_dir, dtype=dtype).eval()


@torch.inference_mode()
def hf_generate(model, prompt_ids: list[int], *, max_new_tokens: int, stop_ids: tuple[int, ...],
                prompt_lookup: int | None = None) -> HFResult:
    """Greedy ``generate`` (``prompt_lookup``: prompt lookup with that many drafted tokens)."""
    ids = torch.tensor([prompt_ids], dtype=torch.int64, device=model.device)  # [1, P]
    t0 = synced_clock(model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
                         eos_token_id=list(stop_ids), pad_token_id=stop_ids[0],
                         prompt_lookup_num_tokens=prompt_lookup, temperature=None, top_p=None, top_k=None)
    seconds = synced_clock(model.device) - t0
    new = out[0, len(prompt_ids):].tolist()
    return HFResult(_cut_at_stop(new, stop_ids), seconds)


def _cut_at_stop(tokens: list[int], stop_ids: tuple[int, ...]) -> list[int]:
    """Up to and including the first stop token (HF pads nothing at batch 1, but be exact)."""
    for i, tok in enumerate(tokens):
        if tok in stop_ids:
            return tokens[: i + 1]
    return tokens
