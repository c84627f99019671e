"""Training-time test: the draft head unrolled for several draft steps, fed its own outputs.

At inference the head drafts step 1 from the target's real features, and every later step from
its own previous output: the second draft at position t pairs the head's guess of ``f_t``
with token ``x_{t+1}`` (EAGLE-2's step 2..num_steps). Trained only on real features (step 1),
the head never sees its own errors; HASS and EAGLE-3 unroll the draft steps during training.

Step k (k = 1..K) runs the head over every position of the sequence at once:

    input at t     (h^{k-1}_t, x_{t+1}),  h^0_t = f_t (real),  h^{k-1}_t = out^{k-1}_{t-1}
    output at t    out^k_t, the guess of f_{t+1} (the same target as step 1)

and a query of step k at position t sees what inference would have in its KV cache when the
real prefix ends at r = t - k + 1: step 1's keys at positions <= r, then step j's key at
position r + j - 1 for j = 2..k (its own ancestors, one per earlier step). That is the mask
``ttt_mask`` builds over the keys of all steps so far, concatenated [step 1 | ... | step k].
Tokens stay the data's ``x_{t+1}`` (for greedy data, the target's own choice); only the
features are the head's own. ``tests/test_train_ttt.py`` checks step k against running the head
k times on a growing sequence, exactly as drafting does.

Loss: step k covers the positions whose real prefix ends in the response,
``t - k + 1 >= prompt_len - 1``: the loss mask of step 1 moved right by k - 1.
"""

from __future__ import annotations

import torch

from workbench.models.draft import DraftHead
from workbench.train.forward import head_input, layer_forward


def ttt_mask(t: int, k: int, device=None) -> torch.Tensor:
    """[T, k*T] bool, True = may attend. Query t of step k; key block j (0-based) is step j+1."""
    q = torch.arange(t, device=device)[:, None]  # [T, 1]
    s = torch.arange(t, device=device)[None, :]  # [1, T]
    blocks = [s <= q - k + 1]  # step 1: the real prefix r = t - k + 1
    blocks += [s == q - k + 1 + j for j in range(1, k)]  # step j+1: one key, at r + j
    return torch.cat(blocks, dim=1)


def unrolled_forward(head: DraftHead, embed: torch.nn.Embedding, *, features: torch.Tensor, next_ids: torch.Tensor,
                     steps: int, aux: torch.Tensor | None = None) -> list[torch.Tensor]:
    """features [B, T, H] (real f_t), next_ids [B, T] (x_{t+1}) -> ``steps`` outputs [B, T, H].
    ``aux`` [B, T, n H]: a fused head's residual streams (step 1 only: later steps read the
    head's own outputs, as drafting does).

    Step 1 is ``train_forward``'s function (causal attention over real features). Right padding
    stays harmless: a real position never attends a later (padded) one."""
    bsz, t, hid = features.shape
    emb = embed(next_ids).to(features.dtype)  # [B, T, H]
    cos, sin = head.target.rope(torch.arange(t, device=features.device), features.dtype)  # [T, 1, Dh]
    cache = [([], []) for _ in head.layers]  # per layer: keys and values of every step so far
    outs, h = [], head_input(head, features, aux)
    for k in range(1, steps + 1):
        x = head.fc(torch.cat([emb, h], dim=-1))  # [B, T, H]
        mask = None if k == 1 else ttt_mask(t, k, x.device)  # step 1: causal over the real prefix
        for layer, (keys, values) in zip(head.layers, cache):
            x = layer_forward(layer, x, cos, sin, keys=keys, values=values, mask=mask)
        outs.append(x)  # [B, T, H]
        # next step's input at t is this step's guess of f_t, made at t - 1 (zero at t = 0, never a loss row)
        h = torch.cat([torch.zeros(bsz, 1, hid, dtype=x.dtype, device=x.device), x[:, :-1]], dim=1)
    return outs


def step_masks(loss_mask: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """[B, T] loss mask of step 1 -> one per step: step k's is step 1's moved right by k - 1
    and cut to the positions step 1 also covers (the last target is the same f_{T-2})."""
    out = [loss_mask]
    for k in range(2, steps + 1):
        shifted = torch.zeros_like(loss_mask)
        shifted[:, k - 1 :] = loss_mask[:, : loss_mask.shape[1] - (k - 1)]
        out.append(shifted & loss_mask)
    return out
