"""The EAGLE draft head (EAGLE-1/2 checkpoint format).

    x_t = fc(concat(embed(x_{t+1}), f_t))      fc: Linear(2H, H), bias per config, no activation
    h_t = DecoderLayer(x_t)                    no input_layernorm, no final norm
    logits = target.lm_head(h_t)               predicts x_{t+2}; h_t also stands in for f_{t+1}

EAGLE's heads have one decoder layer. A head may have more (``num_hidden_layers`` > 1, our own
extension): layers 1.. are ordinary pre-norm Llama layers (``layers.i.input_layernorm.weight``)
stacked on layer 0, each with its own draft KV cache layer (whether two layers learn a lookup:
docs/bench/head-training.md §9).

A *fused* head (``fuse_layers`` in its config, our own extension after EAGLE-3's idea) reads more
of the target than ``f_t``: the residual stream after some of the target's layers (the low and
middle ones) beside ``f_t``. The engine asks the target for them (``TargetModel.forward``'s
``taps``) and the head folds them into one feature before ``fc``:

    g_t = fuse(concat(rms(r_a,t), rms(r_b,t), ..., f_t))   fuse: Linear((n + 1) H, H), no bias
    x_t = fc(concat(embed(x_{t+1}), g_t))                  as above

``rms`` scales each tapped state to unit root mean square (no weight: ``fuse`` learns the
scales). Inside the tree a node's feature is its parent's draft output, which skips ``fuse``.
``fuse.weight`` = [0 | ... | 0 | I] is exactly the head without it: a fused head grows from a
plain one.

``embed_tokens`` and ``lm_head`` are the target's (frozen, borrowed, never copied). Checkpoint
keys: ``fc.weight``, ``fc.bias`` (optional), ``layers.0.self_attn.{q,k,v,o}_proj.weight``,
``layers.0.mlp.{gate,up,down}_proj.weight``, ``layers.0.post_attention_layernorm.weight``,
``embed_tokens.weight`` (optional, ignored: the target's is used); ``fuse.weight`` for a fused head.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from workbench.attention.batch import ForwardBatch
from workbench.kv.pool import KVPool
from workbench.models.config import ModelConfig
from workbench.models.linear import Linear
from workbench.models.llama import DecoderLayer, TargetModel


class DraftHead(nn.Module):
    def __init__(self, cfg: ModelConfig, fc_bias: bool, fuse_layers: tuple[int, ...] = ()):
        super().__init__()
        self.config = cfg
        self.fc = Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=fc_bias)
        if cfg.num_layers < 1:
            raise ValueError(f"a draft head needs at least one layer, got {cfg.num_layers}")
        fuse_layers = check_fuse_layers(fuse_layers)
        self.fuse_layers = fuse_layers  # target layers whose residual streams the head reads (() = EAGLE's f_t only)
        h = cfg.hidden_size
        self.fuse = Linear((len(fuse_layers) + 1) * h, h, bias=False) if fuse_layers else None
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, input_norm=i > 0) for i in range(cfg.num_layers))
        self.target: TargetModel | None = None  # set by attach(); not a submodule (not saved)
        self.hot_tokens: torch.Tensor | None = None  # optional pruned draft vocabulary [V_hot]
        self._hot: Linear | None = None  # lm_head rows of the hot tokens [V_hot, H], packed apart (_hot_head)
        self._rotary = None

    def attach(self, target: TargetModel) -> "DraftHead":
        """Borrow the target's embeddings and lm_head after checking the head fits it."""
        t, d = target.config, self.config
        if d.hidden_size != t.hidden_size:
            raise ValueError(f"draft head hidden size {d.hidden_size} does not fit the target's {t.hidden_size}")
        if d.vocab_size != t.vocab_size:
            raise ValueError(f"draft head vocabulary {d.vocab_size} does not fit the target's {t.vocab_size}")
        if self.fuse_layers and self.fuse_layers[-1] >= t.num_layers:
            raise ValueError(f"draft head fuses target layers {list(self.fuse_layers)}; the target has {t.num_layers}")
        object.__setattr__(self, "target", target)  # keep it out of self._modules
        return self

    def new_kv_pool(self, num_slots: int) -> KVPool:
        p = self.fc.weight
        return KVPool(len(self.layers), num_slots, num_kv_heads=self.config.num_kv_heads, head_dim=self.config.head_dim,
                      dtype=p.dtype, device=p.device)

    @property
    def feature_width(self) -> int:
        """Columns of the target features the head reads: H, or (len(fuse_layers) + 1) * H."""
        return (len(self.fuse_layers) + 1) * self.config.hidden_size

    def feature_in(self, features: torch.Tensor) -> torch.Tensor:
        """[..., W] -> [..., H]: a draft output (W = H) passes; target features of a fused head
        (W = ``feature_width``) are folded by ``fuse``."""
        h = self.config.hidden_size
        w = features.shape[-1]
        if w == h:
            return features
        if w != self.feature_width:
            raise ValueError(f"this head (fuse_layers {list(self.fuse_layers)}) reads {self.feature_width} "
                             f"feature columns, got {w}")
        blocks = list(features.split(h, dim=-1))
        eps = self.config.rms_norm_eps
        blocks[:-1] = [b * torch.rsqrt(b.float().pow(2).mean(-1, keepdim=True) + eps).to(b.dtype) for b in blocks[:-1]]
        return self.fuse(torch.cat(blocks, dim=-1))

    @torch.inference_mode()
    def forward(self, features: torch.Tensor, batch: ForwardBatch, kv: KVPool) -> torch.Tensor:
        """features [T, W] (the target's: f_t, or a fused head's [r_a | ... | f_t]; inside the
        tree the parent's draft output [T, H]); batch.input_ids are x_{t+1}. Returns draft hidden
        states [T, H]."""
        target = self.target
        emb = target.model.embed_tokens(batch.input_ids)  # [T, H]
        g = self.feature_in(features.to(emb.dtype))
        x = self.fc(torch.cat([emb, g], dim=-1))  # [T, 2H] -> [T, H]
        cos, sin = target.rope(batch.positions, x.dtype) if same_rope(target.config, self.config) else \
            self._own_rope(batch.positions, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, batch, kv=kv, backend=target.attention_backend)
        return x

    def _own_rope(self, positions, dtype):
        from workbench.models.rope import Rotary

        if self._rotary is None:
            self._rotary = Rotary(self.config.head_dim, self.config.rope_theta, self.config.rope_scaling, positions.device)
        return self._rotary(positions, dtype)

    @torch.inference_mode()
    def log_probs(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Draft distribution over the vocabulary, fp32 log-probabilities [R, V'] and the token
        id of each column (None = the full vocabulary; else the pruned hot-token list)."""
        head = self.target.lm_head if self.hot_tokens is None else self._hot_head()  # [V', H]
        logits = head(hidden.to(head.weight.dtype)).float()
        return torch.log_softmax(logits, dim=-1), self.hot_tokens

    def set_hot_tokens(self, hot: torch.Tensor | None) -> None:
        """Restrict drafting to ``hot`` token ids (FR-Spec / SGLang "hot token map"). Only the
        draft's proposals change; verification still uses the target's full vocabulary."""
        self.hot_tokens = None if hot is None else hot.to(self.fc.weight.device, torch.int64)
        if hot is None:
            object.__setattr__(self, "_hot", None)
            return
        w = self.target.lm_head.weight
        rows = Linear(w.shape[1], len(self.hot_tokens), bias=False, device=w.device, dtype=w.dtype)
        rows.requires_grad_(False)
        rows.weight.copy_(w[self.hot_tokens])
        object.__setattr__(self, "_hot", rows)  # not a submodule: never saved, rebuilt from the list

    def _hot_head(self) -> Linear:
        """The hot tokens' rows of the target's lm_head, a ``Linear`` of their own that follows the
        lm_head's few-row product order with packed copies of its own weight (the lm_head's packs
        hold all V rows, which a product of the hot rows cannot use)."""
        hot, order = self._hot, self.target.lm_head.order
        if hot.order is not order:
            hot.order = order
            hot.pack(order.packed_rows, order.uses_onednn)
        return hot


def same_rope(a: ModelConfig, b: ModelConfig) -> bool:
    return a.head_dim == b.head_dim and a.rope_theta == b.rope_theta and a.rope_scaling == b.rope_scaling


def draft_config_for(target_cfg: ModelConfig, num_layers: int = 1, fuse_layers: tuple[int, ...] = ()) -> dict:
    """config.json of a head with ``num_layers`` layers that fits ``target_cfg`` (EAGLE's format;
    EAGLE's own heads have one), fusing ``fuse_layers`` of the target (none: EAGLE's kind)."""
    t = target_cfg
    extra = {"fuse_layers": list(fuse_layers)} if fuse_layers else {}
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": num_layers,
        "hidden_size": t.hidden_size, "intermediate_size": t.intermediate_size,
        "num_attention_heads": t.num_heads, "num_key_value_heads": t.num_kv_heads, "head_dim": t.head_dim,
        "vocab_size": t.vocab_size, "rms_norm_eps": t.rms_norm_eps, "rope_theta": t.rope_theta,
        "rope_scaling": t.rope_scaling, "max_position_embeddings": t.max_position_embeddings,
        "bias": False, "hidden_act": "silu", "tie_word_embeddings": False, **extra,
    }


def random_head(target: TargetModel, seed: int = 0, std: float = 0.02, num_layers: int = 1,
                fuse_layers: tuple[int, ...] = ()) -> DraftHead:
    """A seeded random head (accepts little; for tests before a trained head exists)."""
    cfg = ModelConfig.from_dict(draft_config_for(target.config, num_layers))
    head = DraftHead(cfg, fc_bias=False, fuse_layers=fuse_layers)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if name.endswith("layernorm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    p = target.lm_head.weight
    return head.to(device=p.device, dtype=p.dtype).eval().attach(target)


def check_fuse_layers(layers) -> tuple[int, ...]:
    """``layers`` as a tuple of target layer indices, distinct and increasing, else ValueError."""
    if not isinstance(layers, (list, tuple)) or not all(isinstance(i, int) and i >= 0 for i in layers):
        raise ValueError(f"fuse_layers must be a list of target layer indices, got {layers!r}")
    if list(layers) != sorted(set(layers)):
        raise ValueError(f"fuse_layers must be distinct target layer indices in increasing order, got {list(layers)}")
    return tuple(layers)


def fuse_layers_in(config: dict) -> tuple[int, ...]:
    """The target layers a head's ``config.json`` fuses (() for EAGLE's kind)."""
    return check_fuse_layers(config.get("fuse_layers") or ())


def load_draft(path: str | Path, target: TargetModel) -> DraftHead:
    """Load an EAGLE-1/2 head directory (config.json + safetensors or pytorch_model.bin), or
    one of ours with more layers or fused target layers."""
    from workbench.models.loading import load_strict, read_state_dict

    path = Path(path)
    if not (path / "config.json").exists():
        raise ValueError(f"draft head {path}: no config.json")
    raw = json.loads((path / "config.json").read_text())
    raw.setdefault("model_type", "llama")
    cfg = ModelConfig.from_dict(raw)
    if cfg.num_layers < 1:
        raise ValueError(f"draft head {path}: num_hidden_layers must be >= 1, got {cfg.num_layers}")
    state = read_state_dict(path)
    state.pop("embed_tokens.weight", None)
    try:
        head = DraftHead(cfg, fc_bias="fc.bias" in state, fuse_layers=fuse_layers_in(raw))
    except ValueError as err:
        raise ValueError(f"draft head {path}: {err}") from None
    head.attach(target)  # refuses a head that does not fit before loading weights
    load_strict(head, state)
    p = target.lm_head.weight
    return head.to(device=p.device, dtype=p.dtype).eval()
