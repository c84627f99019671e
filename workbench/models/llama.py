"""Our own Llama-family forward (Llama, Llama-3, Mistral, Qwen2), over the paged KV cache.

Parameter names are HF's (``model.layers.3.self_attn.q_proj.weight``), so checkpoints load with
a strict ``load_state_dict`` and no converter. A forward takes a ``ForwardBatch`` (token ids,
positions, slots to write, what each query attends) and returns the final hidden states
**after** the last RMSNorm: the features ``f_t`` the EAGLE draft head reads. Logits are a
separate call so verify and plain decoding project only the rows they need onto the vocabulary.
A forward may also return the residual stream after chosen layers (``taps``), the input of a
fused draft head (EAGLE-3's idea: low, middle and last target layers; docs/design.md §9).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workbench.attention import attend
from workbench.attention.batch import ForwardBatch
from workbench.kv.pool import KVPool
from workbench.models.config import ModelConfig
from workbench.models.linear import Linear, project
from workbench.models.rope import Rotary, apply_rotary


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 as HF does; a bf16 mean of squares loses the small features.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.hq, self.hkv, self.dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = Linear(cfg.hidden_size, self.hq * self.dh, bias=cfg.qkv_bias)
        self.k_proj = Linear(cfg.hidden_size, self.hkv * self.dh, bias=cfg.qkv_bias)
        self.v_proj = Linear(cfg.hidden_size, self.hkv * self.dh, bias=cfg.qkv_bias)
        self.o_proj = Linear(self.hq * self.dh, cfg.hidden_size, bias=cfg.o_bias)
        self.qkv_packed = None  # q, k and v as one product where the linear order runs oneDNN

    projection_groups = {"qkv_packed": ("q_proj", "k_proj", "v_proj")}  # read by apply_linear_order

    def forward(self, x, cos, sin, batch: ForwardBatch, *, kv: KVPool, backend: str) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = project(x, (self.q_proj, self.k_proj, self.v_proj), self.qkv_packed)
        q = apply_rotary(q.view(t, self.hq, self.dh), cos, sin)  # [T, Hq, Dh]
        k = apply_rotary(k.view(t, self.hkv, self.dh), cos, sin)  # [T, Hkv, Dh]
        v = v.view(t, self.hkv, self.dh)
        # Write first, then attend through the slot table: new tokens are read back from the
        # pool like the prefix, so one code path serves prefill, decode, extend and verify.
        kv.write(self.layer_idx, batch.out_slots, k, v)
        o = attend(q, kv.k[self.layer_idx], kv.v[self.layer_idx], batch.meta, scale=self.dh**-0.5, backend=backend)
        return self.o_proj(o.reshape(t, self.hq * self.dh))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, i, bias = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = Linear(h, i, bias=bias)
        self.up_proj = Linear(h, i, bias=bias)
        self.down_proj = Linear(i, h, bias=bias)
        self.gate_up_packed = None  # gate and up as one product where the linear order runs oneDNN

    projection_groups = {"gate_up_packed": ("gate_proj", "up_proj")}  # read by apply_linear_order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = project(x, (self.gate_proj, self.up_proj), self.gate_up_packed)
        return self.down_proj(F.silu(gate) * up)  # SwiGLU


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int, input_norm: bool = True):
        super().__init__()
        # The EAGLE draft layer has no input norm: its input is fc's output, not a residual stream.
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if input_norm else None
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, batch: ForwardBatch, *, kv: KVPool, backend: str) -> torch.Tensor:
        h = x if self.input_layernorm is None else self.input_layernorm(x)
        x = x + self.self_attn(h, cos, sin, batch, kv=kv, backend=backend)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    """Holds ``model.*`` parameters: embeddings, layers, final norm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class TargetModel(nn.Module):
    """The target: ``hidden = forward(batch, kv)`` then ``logits(hidden[rows])``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = LlamaBody(cfg)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rotary: Rotary | None = None  # built on first use, on the model's device
        self.attention_backend = "torch"

    def new_kv_pool(self, num_slots: int) -> KVPool:
        p = self.lm_head.weight
        cfg = self.config
        return KVPool(cfg.num_layers, num_slots, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, dtype=p.dtype,
                      device=p.device)

    def rope(self, positions: torch.Tensor, dtype: torch.dtype):
        if self.rotary is None or self.rotary.inv_freq.device != positions.device:
            cfg = self.config
            self.rotary = Rotary(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, positions.device)
        return self.rotary(positions, dtype)

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, kv: KVPool, taps: tuple[int, ...] = (),
                num_layers: int | None = None) -> torch.Tensor:
        """Returns post-norm hidden states [T, H]; writes K/V of every layer at ``out_slots``.

        ``taps`` (layer indices, for a fused draft head): also the residual stream after each of
        those layers, in front: [T, (len(taps) + 1) * H] = [r_a | r_b | ... | post-norm].
        ``num_layers``: run only the first n layers, then the final norm (an early exit, as the
        draft source ``exit:N`` runs it); K/V of those only."""
        layers = self.model.layers
        if num_layers is not None:
            if not 1 <= num_layers <= len(layers):
                raise ValueError(f"num_layers {num_layers}: the target has {len(layers)} layers")
            layers = layers[:num_layers]
        x = self.model.embed_tokens(batch.input_ids)  # [T, H]
        cos, sin = self.rope(batch.positions, x.dtype)
        kept = []
        for i, layer in enumerate(layers):
            x = layer(x, cos, sin, batch, kv=kv, backend=self.attention_backend)
            if i in taps:
                kept.append(x)
        if len(kept) != len(taps):
            raise ValueError(f"tapped layers {taps}: the forward runs layers 0..{len(layers) - 1}")
        return torch.cat([*kept, self.model.norm(x)], dim=-1) if kept else self.model.norm(x)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[R, H] -> [R, V] in fp32 (sampling and comparisons want fp32). A wider ``hidden`` (a
        forward with ``taps``) projects its last H columns, the post-norm state."""
        return self.lm_head(hidden[..., -self.config.hidden_size:]).float()
