"""The training loop: seeded, resumable, with a tqdm bar and a JSON-lines log.

Work directory layout: ``ckpt.pt`` (head + optimiser + RNG + step, written every ``ckpt_every``
steps and at the end), ``log.jsonl`` (one line per step); the data stays where ``generate.py``
wrote it.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from tqdm import tqdm

from workbench.models.config import ModelConfig
from workbench.models.draft import DraftHead, check_fuse_layers, draft_config_for
from workbench.models.llama import TargetModel
from workbench.train.batches import collate, plan_batches
from workbench.train.forward import TOKEN_LOSSES, eagle_loss_backward, train_forward
from workbench.train.ttt import step_masks, unrolled_forward


@dataclass
class TrainConfig:
    steps: int = 1200
    lr: float = 6e-4
    warmup: int = 60
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    max_tokens: int = 3072  # padded pairs per batch
    noise: float = 0.1  # half-width of the uniform noise on input features, in units of their RMS
    clip_value: float = 0.5
    w_ce: float = 0.1
    ce_frac: float = 0.35  # share of the loss positions that get the (costly) CE term each step
    w_feat: float = 1.0  # weight of the SmoothL1 feature regression
    ttt_steps: int = 1  # draft steps unrolled in training (training-time test); 1 = plain EAGLE
    ttt_decay: float = 0.8  # step k's loss weighs ttt_decay**(k-1) (EAGLE-3: 0.8)
    hot_vocab: int = 0  # CE over the N most frequent response tokens only (0 = full vocabulary)
    distill_topk: int = 0  # CE against the target's top-k distribution, renormalised (0 = all of it)
    token_loss: str = "ce"  # ce (EAGLE's), accept (-log Σ min(p, q), the acceptance rate), or ce+accept
    ckpt_every: int = 200
    seed: int = 0
    dtype: str = "fp32"  # bf16 = autocast for the head's matmuls
    init: str = ""  # start from these weights (a ckpt.pt or an exported head directory), fresh schedule
    head_layers: int = 1  # decoder layers in the head (EAGLE's: 1); --init may hold fewer (see grow_from)
    upper_lr_mult: float = 1.0  # learning rate of layers 1.. (a grown head's new layers) over everything else's
    fuse_layers: str = ""  # target layers whose residual streams a fused head reads, e.g. "1,14" ("" = EAGLE's f_t only)
    fuse_lr_mult: float = 1.0  # learning rate of a fused head's fuse layer over everything else's
    device: str = "cpu"  # where the head and the target train: cpu, cuda (or cuda:N), or auto (cuda when present)

    def __post_init__(self) -> None:
        if self.ttt_steps < 1:
            raise ValueError(f"ttt_steps must be >= 1 (1 = no unrolling), got {self.ttt_steps}")
        if not 0.0 < self.ttt_decay <= 1.0:
            raise ValueError(f"ttt_decay must be in (0, 1], got {self.ttt_decay}")
        if not 0.0 < self.ce_frac <= 1.0:
            raise ValueError(f"ce_frac must be in (0, 1], got {self.ce_frac}")
        if self.upper_lr_mult <= 0 or self.fuse_lr_mult <= 0:
            raise ValueError(f"upper_lr_mult and fuse_lr_mult must be > 0, got {self.upper_lr_mult}, {self.fuse_lr_mult}")
        if self.head_layers < 1:
            raise ValueError(f"head_layers must be >= 1, got {self.head_layers}")
        if self.hot_vocab < 0 or self.distill_topk < 0 or self.w_feat < 0 or self.w_ce < 0:
            raise ValueError("hot_vocab, distill_topk, w_feat and w_ce must be >= 0")
        if self.token_loss not in TOKEN_LOSSES:
            raise ValueError(f"token_loss must be one of {', '.join(TOKEN_LOSSES)}, got {self.token_loss!r}")
        self.taps  # parses fuse_layers, or says what is wrong with it
        if self.device != "auto":
            try:
                torch.device(self.device)
            except RuntimeError:
                raise ValueError(f"device must be cpu, cuda, cuda:N or auto, got {self.device!r}") from None

    @property
    def torch_device(self) -> torch.device:
        """``device`` resolved (``auto``: CUDA when present, else the CPU)."""
        from workbench.device import default_device

        return torch.device(default_device() if self.device == "auto" else self.device)

    @property
    def taps(self) -> tuple[int, ...]:
        """``fuse_layers`` as target layer indices (increasing, distinct)."""
        return parse_layers(self.fuse_layers)


# --help of the flags made from TrainConfig's fields, one per field (a test checks that none lacks it)
CONFIG_HELP = {
    "steps": "optimizer steps of the schedule",
    "lr": "peak learning rate",
    "warmup": "linear warm-up steps",
    "min_lr_ratio": "the cosine schedule ends at lr times this",
    "weight_decay": "AdamW weight decay",
    "max_tokens": "padded token pairs per batch",
    "noise": "half-width of the uniform noise on the input features, in units of their RMS",
    "clip_value": "gradient-norm clip",
    "w_ce": "weight of the cross-entropy term",
    "ce_frac": "share of the loss positions that get the (costly) cross-entropy term each step",
    "w_feat": "weight of the SmoothL1 feature regression",
    "ttt_steps": "draft steps unrolled in training (training-time test); 1 = plain EAGLE",
    "ttt_decay": "step k's loss weighs ttt_decay**(k-1)",
    "hot_vocab": "cross-entropy over the N most frequent response tokens only; 0 = full vocabulary",
    "distill_topk": "cross-entropy against the target's top-k distribution, renormalised; 0 = all of it",
    "token_loss": "the head's token loss: ce (cross-entropy, EAGLE's), accept (-log of the acceptance rate "
                  "sum min(p, q), arXiv 2602.23881), or ce+accept; its weight is --w-ce",
    "ckpt_every": "steps between checkpoints",
    "seed": "seed of the head's initialisation and of the batches",
    "dtype": "bf16 = autocast for the head's matmuls",
    "init": "start from these weights (a ckpt.pt or an exported head directory), fresh schedule",
    "head_layers": "decoder layers in the head (EAGLE's: 1); --init may hold fewer (new ones start as the identity)",
    "upper_lr_mult": "learning rate of layers 1.. (a grown head's new layers) over everything else's",
    "fuse_layers": 'target layers whose residual streams a fused head reads, e.g. "1,14"; "" = EAGLE\'s f_t only',
    "fuse_lr_mult": "learning rate of a fused head's fuse layer over everything else's",
    "device": "where the head and the target train: cpu, cuda (or cuda:N), or auto (cuda when present)",
}


def add_config_args(ap, skip: tuple[str, ...] = ()) -> None:
    """One ``--flag`` per TrainConfig field (``ttt_steps`` -> ``--ttt-steps``) but ``skip``, with its default."""
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        if f.name in skip:
            continue
        flag, default = "--" + f.name.replace("_", "-"), getattr(defaults, f.name)
        if f.name in ("dtype", "token_loss"):
            choices = ("fp32", "bf16") if f.name == "dtype" else TOKEN_LOSSES
            ap.add_argument(flag, choices=choices, default=default, help=CONFIG_HELP[f.name])
        else:
            ap.add_argument(flag, type=type(default), default=default, help=CONFIG_HELP[f.name])


def parse_layers(text: str) -> tuple[int, ...]:
    """"1,14" -> (1, 14): target layer indices, distinct and increasing ("" -> ())."""
    try:
        layers = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise ValueError(f"fuse_layers takes target layer indices like 1,14; got {text!r}") from None
    return check_fuse_layers(layers)


def init_head(target: TargetModel, seed: int, num_layers: int = 1, fuse_layers: tuple[int, ...] = ()) -> DraftHead:
    """A head that starts as the identity on f_t: fc = [small random | I] (a fused head's fuse
    too: [small random | I] on [rms(r_a) | ... | f_t]), every other linear layer small random
    (std 0.02), norm weights 1. (A copy of the target's last layer is a poor start here: without
    its input norm it blows the post-norm features up ~20x.)"""
    torch.manual_seed(seed)
    head = DraftHead(ModelConfig.from_dict(draft_config_for(target.config, num_layers)), fc_bias=False,
                     fuse_layers=fuse_layers)
    h = target.config.hidden_size
    with torch.no_grad():
        for name, p in head.named_parameters():
            p.fill_(1.0) if name.endswith("layernorm.weight") else p.normal_(0, 0.02)
        head.fc.weight[:, h:] += torch.eye(h)
        if head.fuse is not None:
            head.fuse.weight[:, -h:] += torch.eye(h)
    return head.float().attach(target)


def init_weights(path: Path) -> dict[str, torch.Tensor]:
    """The head's weights from a training checkpoint (``ckpt.pt``) or an exported head directory
    (``model.safetensors``), as fp32."""
    if path.is_dir():
        from safetensors.torch import load_file

        if not (path / "model.safetensors").exists():
            raise FileNotFoundError(f"--init {path}: no model.safetensors in this directory")
        state = load_file(str(path / "model.safetensors"))
    elif path.is_file():
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)["head"]
        except Exception as err:  # not a torch file, or not one of our checkpoints
            raise ValueError(f"--init {path}: not a training checkpoint with a 'head' ({err!r})") from None
    else:
        raise FileNotFoundError(f"--init {path}: no such checkpoint or head directory")
    return {k: v.float() for k, v in state.items()}


def layers_in(state: dict[str, torch.Tensor]) -> int:
    """How many decoder layers a head's state dict holds."""
    return 1 + max((int(k.split(".")[1]) for k in state if k.startswith("layers.")), default=-1)


def grow_from(head: DraftHead, state: dict[str, torch.Tensor]) -> int:
    """Load ``state`` into ``head``, which may have more layers than ``state`` holds: the layers
    it lacks keep their initialisation except ``o_proj`` and ``down_proj``, set to zero, so each
    new layer starts as the identity and the grown head computes exactly what ``state`` did.
    Likewise a fused head from weights without ``fuse``: fuse = [0 | ... | 0 | I] reads f_t alone.
    Returns how many layers were added. Anything else that does not fit raises RuntimeError."""
    ours = head.state_dict()
    new_fuse = head.fuse is not None and "fuse.weight" not in state
    have = {int(k.split(".")[1]) for k in state if k.startswith("layers.")}
    if not have or have != set(range(len(have))) or len(have) > len(head.layers):
        raise RuntimeError(f"these weights hold layers {sorted(have)}; the head has {len(head.layers)}")
    added = range(len(have), len(head.layers))
    new_keys = {k for k in ours if k.startswith("layers.") and int(k.split(".")[1]) in added}
    new_keys |= {"fuse.weight"} if new_fuse else set()
    if set(ours) - set(state) != new_keys or set(state) - set(ours):
        raise RuntimeError(f"missing keys {sorted(set(ours) - set(state) - new_keys)}, "
                           f"unexpected keys {sorted(set(state) - set(ours))}")
    head.load_state_dict(state, strict=False)  # shapes are still checked
    with torch.no_grad():
        for i in added:
            head.layers[i].self_attn.o_proj.weight.zero_()
            head.layers[i].mlp.down_proj.weight.zero_()
        if new_fuse:
            h = head.config.hidden_size
            head.fuse.weight.zero_()
            head.fuse.weight[:, -h:] = torch.eye(h)
    return len(added)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def batch_schedule(seqs, cfg: TrainConfig):
    """Endless stream of (epoch, index batch): each epoch re-plans with seed + epoch."""
    epoch = 0
    while True:
        for idx in plan_batches(seqs, cfg.max_tokens, cfg.seed + epoch):
            yield epoch, idx
        epoch += 1


def train_step(head, target, *, batch, cfg: TrainConfig, feat_rms: float, gen: torch.Generator,
               hot: torch.Tensor | None = None) -> dict:
    """One optimisation step's forward + backward (no optimiser update). Returns the losses.
    ``hot``: token ids the CE is restricted to (``cfg.hot_vocab``), None = full vocabulary."""
    feats = batch.features
    dev = feats.device.type
    noise = ((torch.rand(feats.shape, generator=gen) * 2 - 1) * (cfg.noise * feat_rms)).to(feats.device)
    lm_head = target.lm_head.weight.float() if hot is None else target.lm_head.weight.float()[hot]
    loss_kw = dict(w_feat=cfg.w_feat, w_ce=cfg.w_ce, ce_frac=cfg.ce_frac, gen=gen, topk=cfg.distill_topk,
                   loss=cfg.token_loss)
    if cfg.ttt_steps == 1:
        with torch.autocast(dev, torch.bfloat16, enabled=cfg.dtype == "bf16"):
            out = train_forward(head, target.model.embed_tokens, features=feats + noise, next_ids=batch.next_ids,
                                aux=batch.aux)
        pred = out.float()[batch.loss_mask]  # [N, H]
        return eagle_loss_backward(pred, batch.targets, lm_head, **loss_kw)
    with torch.autocast(dev, torch.bfloat16, enabled=cfg.dtype == "bf16"):
        outs = unrolled_forward(head, target.model.embed_tokens, features=feats + noise, next_ids=batch.next_ids,
                                steps=cfg.ttt_steps,
                                aux=batch.aux)
    goal = torch.cat([feats[:, 1:], torch.zeros_like(feats[:, :1])], dim=1)  # [B, W, H]: f_{t+1} at t
    preds, goals, weights = [], [], []
    for k, (out, mask) in enumerate(zip(outs, step_masks(batch.loss_mask, cfg.ttt_steps))):
        n = int(mask.sum())
        if n:  # every row of step k weighs decay**k / n: each step is a mean, steps are weighted
            preds.append(out.float()[mask])
            goals.append(goal[mask])
            weights.append(torch.full((n,), cfg.ttt_decay**k / n, device=feats.device))
    w = torch.cat(weights)
    return eagle_loss_backward(torch.cat(preds), torch.cat(goals), lm_head, row_weights=w / w.sum(), **loss_kw)


@torch.no_grad()
def evaluate_loss(head, target, seqs, cfg: TrainConfig, steps: int = 3, coverage: tuple[int, ...] = ()) -> dict:
    """Mean losses and top-1 agreement on held-out sequences (no noise, full vocabulary), at
    draft step 1 and, fed the head's own outputs, at steps 2..``steps`` (``top1_step2``, ...).
    ``coverage`` (k, ...): also the fraction of step-1 positions whose target token is among the
    head's k most likely (``in_top{k}``), the most a depth-1 fan of k children can catch, and
    step-1 top-1 per bin of the target's own confidence (``confidence``: lo, hi, share, top1)."""
    from workbench.train.forward import CONFIDENCE_EDGES, coverage_hits, feature_loss, soft_ce

    tot, n = {"feat": 0.0, "ce": 0.0, "top1": 0.0}, {}
    bins = [[0, 0] for _ in CONFIDENCE_EDGES[1:]]
    lm_head = target.lm_head.weight.float()
    device = next(head.parameters()).device
    for idx in plan_batches(seqs, cfg.max_tokens, 0):
        b = collate([seqs[i] for i in idx]).to(device)
        outs = unrolled_forward(head, target.model.embed_tokens, features=b.features, next_ids=b.next_ids, steps=steps,
                                aux=b.aux)
        goal = torch.cat([b.features[:, 1:], torch.zeros_like(b.features[:, :1])], dim=1)
        for k, (out, mask) in enumerate(zip(outs, step_masks(b.loss_mask, steps))):
            pred, tgt = out[mask], goal[mask]
            ce, hits = soft_ce(pred, tgt, lm_head=lm_head)
            key = "top1" if k == 0 else f"top1_step{k + 1}"
            tot[key] = tot.get(key, 0.0) + hits
            n[key] = n.get(key, 0) + pred.shape[0]
            if k == 0:
                tot["feat"] += float(feature_loss(pred, tgt)) * pred.shape[0]
                tot["ce"] += float(ce) * pred.shape[0]
                if coverage:
                    hits, in_bins = coverage_hits(pred, tgt, lm_head, coverage)
                    for kk, h in hits.items():
                        tot[f"in_top{kk}"] = tot.get(f"in_top{kk}", 0) + h
                    bins = [[a + c, b + d] for (a, b), (c, d) in zip(bins, in_bins)]
    same_rows = ("feat", "ce", *(f"in_top{kk}" for kk in coverage))  # counted over step 1's rows
    out = {k: v / max(n.get("top1" if k in same_rows else k, 0), 1) for k, v in tot.items()}
    if coverage:
        rows = max(n.get("top1", 0), 1)
        out["confidence"] = [{"lo": lo, "hi": hi, "share": c / rows, "top1": h / c if c else None}
                             for (lo, hi), (c, h) in zip(zip(CONFIDENCE_EDGES, CONFIDENCE_EDGES[1:]), bins)]
    return out


def save_ckpt(path: Path, head, *, opt, step: int, gen: torch.Generator, cfg: TrainConfig) -> None:
    state = {"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "gen": gen.get_state(),
             "py_rng": random.getstate(), "cfg": asdict(cfg)}
    torch.save(state, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


def train(work: Path, target: TargetModel, *, train_seqs, val_seqs, cfg: TrainConfig, resume: bool,
          minutes: float | None = None) -> DraftHead:
    """Train (or continue) a head on ``train_seqs``; returns it (fp32), on the target's device
    (``cfg.device``: the caller loads the target there). ``minutes``: a time limit; when it runs
    out before ``cfg.steps``, the run validates, checkpoints (``--resume`` continues it) and
    returns the head as it is, its schedule cut short."""
    device = target.lm_head.weight.device
    head = init_head(target, cfg.seed, cfg.head_layers, cfg.taps).to(device).train()
    def group(name: str) -> str:  # layers 1.. and fuse get their own rates (--upper-lr-mult, --fuse-lr-mult)
        if name.startswith("layers.") and int(name.split(".")[1]) > 0:
            return "upper"
        return "fuse" if name.startswith("fuse.") else "rest"

    mults = {"rest": 1.0, "upper": cfg.upper_lr_mult, "fuse": cfg.fuse_lr_mult}
    params = {g: [p for n, p in head.named_parameters() if group(n) == g] for g in mults}
    groups = [{"params": params[g], "mult": m} for g, m in mults.items() if params[g]]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    work.mkdir(parents=True, exist_ok=True)
    ckpt, log_path, start = work / "ckpt.pt", work / "log.jsonl", 0
    if resume and ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=False)
        if layers_in(state["head"]) != cfg.head_layers:
            raise ValueError(f"--resume: {ckpt} holds a head of {layers_in(state['head'])} layers; "
                             f"--head-layers is {cfg.head_layers}")
        had = parse_layers(state.get("cfg", {}).get("fuse_layers", ""))
        if had != cfg.taps:
            raise ValueError(f"--resume: {ckpt} fuses target layers {list(had)}; --fuse-layers gives {list(cfg.taps)}")
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["gen"])
        start = state["step"]
        if log_path.exists():  # drop log lines of steps after the checkpoint (they are redone)
            keep = [ln for ln in log_path.read_text().splitlines() if json.loads(ln)["step"] <= start]
            log_path.write_text("".join(ln + "\n" for ln in keep))
    else:
        if cfg.init:  # warm start: weights only; optimiser, schedule and data order start afresh
            try:
                grow_from(head, init_weights(Path(cfg.init)))
            except RuntimeError as err:
                raise ValueError(f"--init {cfg.init}: these weights do not fit this target's head ({err})") from None
        if log_path.exists():
            log_path.unlink()
    hot = None
    if cfg.hot_vocab:
        from workbench.train.export import hot_tokens, response_counts

        hot = torch.tensor(hot_tokens(response_counts(train_seqs), cfg.hot_vocab), dtype=torch.int64, device=device)
    feat_rms = float(torch.cat([s.features[:-1].float() for s in train_seqs[:64]]).pow(2).mean().sqrt())
    stream = batch_schedule(train_seqs, cfg)
    for _ in range(start):  # resume: skip the batches already seen (cheap: indices only)
        next(stream)
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="train", unit="step")
    t0 = time.time()
    with log_path.open("a") as log:
        for step in bar:
            epoch, idx = next(stream)
            for g in opt.param_groups:
                g["lr"] = lr_at(step, cfg) * g["mult"]
            opt.zero_grad(set_to_none=True)
            batch = collate([train_seqs[i] for i in idx]).to(device)
            losses = train_step(head, target, batch=batch, cfg=cfg, feat_rms=feat_rms, gen=gen, hot=hot)
            torch.nn.utils.clip_grad_value_(head.parameters(), cfg.clip_value)
            opt.step()
            rec = {"step": step + 1, "epoch": epoch, "lr": opt.param_groups[0]["lr"], **losses}
            out_of_time = minutes is not None and time.time() - t0 > 60 * minutes
            if out_of_time:
                rec["stopped"] = f"time limit of {minutes:g} min"
            if (step + 1) % cfg.ckpt_every == 0 or step + 1 == cfg.steps or out_of_time:
                rec["val"] = evaluate_loss(head.eval(), target, val_seqs, cfg)
                head.train()
                save_ckpt(ckpt, head, opt=opt, step=step + 1, gen=gen, cfg=cfg)
            log.write(json.dumps(rec) + "\n")
            log.flush()
            bar.set_postfix(feat=f"{losses['feat']:.3f}", ce=f"{losses['ce']:.2f}", top1=f"{losses['top1']:.2f}")
            if out_of_time:
                print(f"stopped at step {step + 1} of {cfg.steps}: the time limit of {minutes:g} min ran out "
                      f"(--resume continues from {ckpt})", flush=True)
                break
    return head.eval()
