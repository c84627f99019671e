"""The draft head's training forward and the EAGLE loss.

``train_forward`` runs the same function as ``DraftHead.forward`` (the engine's inference path
through the paged KV cache) but on padded whole sequences, with plain causal attention
(``scaled_dot_product_attention(is_causal=True)``) and autograd. It reuses the head's own
submodules and the target's RoPE tables, so there is one set of weights and one definition;
``tests/test_train.py`` checks that both forwards agree.

Pairs: position t of a sequence sees ``(f_t, x_{t+1})`` at RoPE position t and regresses
``f_{t+1}`` (docs/design.md §9).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workbench.models.draft import DraftHead
from workbench.models.rope import apply_rotary


def head_input(head: DraftHead, features: torch.Tensor, aux: torch.Tensor | None) -> torch.Tensor:
    """What the head's fc reads beside the token: f_t [B, T, H], or for a fused head
    ``fuse(rms(aux) | f_t)`` (``DraftHead.feature_in``)."""
    if head.fuse is None:
        return features
    if aux is None:
        raise ValueError(f"this head fuses target layers {list(head.fuse_layers)}: the data must carry them "
                         "(load it with taps=head.fuse_layers)")
    return head.feature_in(torch.cat([aux.to(features.dtype), features], dim=-1))


def train_forward(head: DraftHead, embed: torch.nn.Embedding, *, features: torch.Tensor,
                  next_ids: torch.Tensor, aux: torch.Tensor | None = None) -> torch.Tensor:
    """features [B, T, H] (f_t), next_ids [B, T] (x_{t+1}) -> draft hidden states [B, T, H];
    ``aux`` [B, T, n H]: a fused head's residual streams.

    Sequences are right-padded: causal attention keeps padding out of every real position."""
    t = features.shape[1]
    g = head_input(head, features, aux)
    x = head.fc(torch.cat([embed(next_ids).to(features.dtype), g], dim=-1))  # [B, T, H]
    cos, sin = head.target.rope(torch.arange(t, device=x.device), x.dtype)  # [T, 1, Dh]
    for layer in head.layers:
        x = layer_forward(layer, x, cos, sin, keys=[], values=[])
    return x


def layer_forward(layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, keys: list, values: list,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    """One draft ``DecoderLayer`` on whole sequences, with autograd: x [B, T, H] -> [B, T, H].

    This call's keys and values ([B, Hkv, T, Dh], after RoPE) are appended to ``keys`` /
    ``values``, and the queries attend to all of them: ``mask`` [T, len(keys) * T] (True = may
    attend) over the concatenation, or None for plain causal attention (then ``keys`` must hold
    only this call's block)."""
    bsz, t, _ = x.shape
    attn = layer.self_attn
    h = x if layer.input_layernorm is None else layer.input_layernorm(x)

    def heads(proj, n):  # [B, T, H'] -> [B, T, n, Dh]
        return proj(h).view(bsz, t, n, attn.dh)

    q = apply_rotary(heads(attn.q_proj, attn.hq), cos, sin).transpose(1, 2)  # [B, Hq, T, Dh]
    keys.append(apply_rotary(heads(attn.k_proj, attn.hkv), cos, sin).transpose(1, 2))
    values.append(heads(attn.v_proj, attn.hkv).transpose(1, 2))
    g = attn.hq // attn.hkv
    k = torch.cat(keys, dim=2).repeat_interleave(g, dim=1)  # GQA: [B, Hq, n*T, Dh]
    v = torch.cat(values, dim=2).repeat_interleave(g, dim=1)
    if mask is None:
        if len(keys) != 1:
            raise ValueError("causal attention takes one block of keys; pass a mask for more")
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=attn.dh**-0.5)
    else:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.dh**-0.5)
    x = x + attn.o_proj(o.transpose(1, 2).reshape(bsz, t, attn.hq * attn.dh))
    return x + layer.mlp(layer.post_attention_layernorm(x))


def feature_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """SmoothL1 per position averaged over the hidden size, then over positions. [N, H] -> []"""
    return F.smooth_l1_loss(pred, target, reduction="none").mean(-1).mean()


TOKEN_LOSSES = ("ce", "accept", "ce+accept")  # what the head's token distribution is trained against


def soft_ce(pred: torch.Tensor, target: torch.Tensor, *, lm_head: torch.Tensor, topk: int = 0,
            weights: torch.Tensor | None = None, loss: str = "ce") -> tuple[torch.Tensor, int]:
    """The token loss of lm_head(pred) against p = softmax(lm_head(target)), mean over positions
    (``weights`` [N]: a weighted sum instead), and how many rows share their argmax.
    pred, target [N, H]; lm_head [V, H] (the hot rows only restricts both to that vocabulary).
    ``topk`` > 0: the target distribution is cut to its k largest logits and renormalised
    (top-k distillation: the head spends its capacity on the candidates a tree can hold).

    ``loss``: ``ce``, the cross-entropy (forward KL up to p's entropy, EAGLE's); ``accept``,
    -log α with α = Σ min(p, q), the probability that a draft sampled from q is accepted
    (Leviathan et al.'s acceptance rate; trained directly as in the LK losses, arXiv 2602.23881:
    minimising KL does not maximise α for a draft too small to match p); ``ce+accept``, both
    summed."""
    if loss not in TOKEN_LOSSES:
        raise ValueError(f"token loss must be one of {', '.join(TOKEN_LOSSES)}, got {loss!r}")
    with torch.no_grad():
        target_logits = F.linear(target, lm_head).float()  # [N, V]
        if 0 < topk < target_logits.shape[-1]:
            kth = target_logits.topk(topk, dim=-1).values[:, -1:]  # [N, 1]
            target_logits = target_logits.masked_fill(target_logits < kth, float("-inf"))
        p = torch.softmax(target_logits, dim=-1)
    logq = torch.log_softmax(F.linear(pred, lm_head).float(), dim=-1)
    hits = int((logq.detach().argmax(-1) == target_logits.argmax(-1)).sum())
    per_row = torch.zeros(p.shape[0])
    if loss != "accept":
        per_row = per_row - (p * logq.masked_fill(p == 0, 0.0)).sum(-1)  # [N]; 0 * -inf would be nan
    if loss != "ce":
        alpha = torch.minimum(p, logq.exp()).sum(-1)  # [N]: P(accept a draft x ~ q) = Σ_x min(p(x), q(x))
        per_row = per_row - alpha.clamp_min(1e-6).log()  # the clamp: a row with α = 0 still has a gradient
    return (per_row.mean() if weights is None else (per_row * weights).sum()), hits


CONFIDENCE_EDGES = (0.0, 0.5, 0.9, 1.0)


@torch.no_grad()
def coverage_hits(pred: torch.Tensor, target: torch.Tensor, lm_head: torch.Tensor, ks: tuple[int, ...],
                  edges: tuple[float, ...] = CONFIDENCE_EDGES, chunk: int = 1024) -> tuple[dict[int, int], list[list[int]]]:
    """Per k in ``ks``: how many rows have the target's argmax among the k largest logits of
    lm_head(pred), i.e. a tree that drafts the head's top k children would hold the target's
    choice; and per bin of the target's own confidence (the softmax probability of its argmax,
    bins between consecutive ``edges``, the last one closed): [rows, top-1 hits].
    pred, target [N, H]; lm_head [V, H]."""
    hits, bins = dict.fromkeys(ks, 0), [[0, 0] for _ in edges[1:]]
    for s in range(0, pred.shape[0], chunk):
        p_max, want = torch.softmax(F.linear(target[s : s + chunk], lm_head).float(), dim=-1).max(-1)
        kmax = min(max(ks, default=1), lm_head.shape[0])  # k beyond the vocabulary holds all of it
        top = F.linear(pred[s : s + chunk], lm_head).topk(kmax, dim=-1).indices  # [n, kmax]
        for k in ks:
            hits[k] += int((top[:, :k] == want[:, None]).any(-1).sum())
        first = top[:, 0] == want
        for b, (lo, hi) in enumerate(zip(edges, edges[1:])):
            inside = (p_max >= lo) & ((p_max < hi) if b < len(bins) - 1 else (p_max <= hi))
            bins[b][0] += int(inside.sum())
            bins[b][1] += int((first & inside).sum())
    return hits, bins


def eagle_loss_backward(pred: torch.Tensor, target: torch.Tensor, lm_head: torch.Tensor, w_feat: float = 1.0,
                        w_ce: float = 0.1, chunk: int = 1024, ce_frac: float = 1.0,
                        gen: torch.Generator | None = None, topk: int = 0,
                        row_weights: torch.Tensor | None = None, loss: str = "ce") -> dict[str, float]:
    """Backpropagate ``w_feat * SmoothL1 + w_ce * soft CE`` from pred [N, H] (response
    positions only). The [N, V] logits are built ``chunk`` rows at a time so memory stays
    bounded: the CE gradient is accumulated on a detached copy of pred, then pushed through the
    head in one backward. ``ce_frac`` < 1 takes the CE over a random subset of the rows (an
    unbiased estimate at a fraction of the lm_head cost). ``row_weights`` [N] (summing to 1)
    replaces the plain mean over rows (training-time test weighs its steps); ``topk`` and ``loss``
    (the token loss: cross-entropy, acceptance or both) are ``soft_ce``'s. Returns the losses and the
    top-1 agreement of the CE rows."""
    leaf = pred.detach().requires_grad_(True)
    rows = torch.arange(pred.shape[0])
    if ce_frac < 1.0:
        keep = max(1, round(ce_frac * len(rows)))
        rows = torch.randperm(len(rows), generator=gen)[:keep].sort().values
    w = None if row_weights is None else row_weights[rows] / row_weights[rows].sum()
    ce_sum, top1, n = 0.0, 0, len(rows)
    for s in range(0, n, chunk):
        idx = rows[s : s + chunk]
        if w is None:
            ce, hits = soft_ce(leaf[idx], target[idx], lm_head=lm_head, topk=topk, loss=loss)
            ce = ce * (len(idx) / n)
        else:
            ce, hits = soft_ce(leaf[idx], target[idx], lm_head=lm_head, topk=topk, weights=w[s : s + chunk], loss=loss)
        (w_ce * ce).backward()
        ce_sum, top1 = ce_sum + float(ce.detach()), top1 + hits
    if row_weights is None:
        feat = feature_loss(pred, target)
    else:
        feat = (F.smooth_l1_loss(pred, target, reduction="none").mean(-1) * row_weights).sum()
    grad = leaf.grad if leaf.grad is not None else torch.zeros_like(pred)
    torch.autograd.backward([w_feat * feat, pred], [None, grad])
    return {"feat": float(feat.detach()), "ce": ce_sum, "top1": top1 / max(n, 1)}
