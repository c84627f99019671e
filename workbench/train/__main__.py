"""python -m workbench.train: self-distillation data, an EAGLE-2 head trained on it, the head
exported and measured. One pipeline, four steps:

    python -m workbench.train generate --threads 1       # the target's answers, into ~/.cache/workbench/train-data-v2
    python -m workbench.train train                      # a head on them, checkpoints in ~/.cache/workbench/train
    python -m workbench.train train --resume --steps 1500
    python -m workbench.train train --init ckpt_old.pt --steps 1000   # warm start
    python -m workbench.train train --ttt-steps 3 --head-layers 2 --init workbench/assets/eagle-smollm2-135m
    python -m workbench.train train --fuse-layers 1,14   # a fused head
    python -m workbench.train export                     # write the head of the last checkpoint
    python -m workbench.train evaluate --head DIR --held-out ~/.cache/workbench/train-data-v2

``generate`` writes token shards and the target's features (``generate.py``). ``train`` and
``export`` read them from ``--shards`` (one directory or several, read in turn; features
recomputed once and cached in DIR/features where missing; every ``--val-every``-th prompt of each
held out). ``train`` writes <out>/ckpt.pt every --ckpt-every steps (--resume continues the same
run; --init starts a new run from another checkpoint's or an exported head's weights; with
--head-layers above the layers it holds, the head grows: each new layer starts as the identity)
and exports the head when it stops; ``export`` writes the checkpoint's head again (config.json +
fp16 model.safetensors + hot_tokens.json into --export). ``evaluate`` measures heads
(``evaluate.py``).
"""

from __future__ import annotations

import json
import time
from dataclasses import fields
from pathlib import Path

import torch

from workbench.errors import ArgumentParser, UserError, reports_user_errors
from workbench.models.heads import default_draft_dir
from workbench.train import evaluate, generate
from workbench.train.loop import TrainConfig, add_config_args


def add_data_args(ap, train: bool) -> None:
    """The flags ``train`` and ``export`` share (the data, the work directory, the head's
    destination); with ``train``, also the run's own and one per ``TrainConfig`` field."""
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "workbench" / "train",
                    help="work directory (ckpt.pt, log.jsonl)")
    ap.add_argument("--target", default=None, help="target model directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--export", type=Path, default=default_draft_dir(), help="where the trained head goes")
    ap.add_argument("--shards", type=Path, nargs="+", default=[generate.DEFAULT_OUT], metavar="DIR",
                    help="the data: generate --out directories, read in turn (e.g. the template set's and "
                         "one made from your --prompts file)")
    ap.add_argument("--max-response-tokens", type=int, default=None,
                    help="use the shards up to this many training response tokens (default: all)")
    ap.add_argument("--val-every", type=int, default=50, help="hold out every N-th prompt")
    ap.add_argument("--hot", type=int, default=8192, help="length of the exported hot-token list")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    if not train:
        return
    ap.add_argument("--resume", action="store_true", help="continue from <out>/ckpt.pt")
    ap.add_argument("--minutes", type=float, default=None,
                    help="train for at most this long: then validate, checkpoint and export the head as it is "
                         "(its schedule cut short; --resume continues; default: the whole schedule)")
    ap.add_argument("--val-positions", type=int, default=None,
                    help="validate on the first held-out conversations up to this many positions "
                         "(default: all of them; each validation costs time in proportion)")
    add_config_args(ap)


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m workbench.train", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    generate.add_parser(sub)
    p = sub.add_parser("train", help="train a head on generate's data, then export it",
                       description="Train a head on the shards of --shards: checkpoints in --out, "
                                   "the head in --export.")
    add_data_args(p, train=True)
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("export", help="export the head of the last checkpoint",
                       description="Write the head of <out>/ckpt.pt, with the hot tokens of --shards, into --export.")
    add_data_args(p, train=False)
    p.set_defaults(func=cmd_export)
    evaluate.add_parser(sub)
    return ap


def first_positions(seqs: list, positions: int) -> list:
    """The leading ``seqs`` whose loss positions sum to ``positions`` at most (at least one)."""
    kept, total = [], 0
    for s in seqs:
        if kept and total + s.num_targets > positions:
            break
        kept.append(s)
        total += s.num_targets
    return kept


def load_sequences(args, target, taps: tuple[int, ...] = ()) -> tuple[list, list]:
    """(training, held-out) sequences of the ``--shards`` directories."""
    from workbench.train import features

    train, val = features.load_sequences(args.shards, target, args.max_response_tokens, args.val_every, log=print,
                                         taps=taps)
    if not train or not val:
        raise UserError(f"--shards {' '.join(map(str, args.shards))}: too little data for a training and a "
                        f"held-out set")
    return train, val


def check_data_args(args) -> Path:
    """The target's directory; a missing ``--shards`` or ``--target`` as one ``error:`` line."""
    from workbench import store

    for data in args.shards:
        if not data.is_dir():
            raise UserError(f"--shards {data}: no such directory (python -m workbench.train generate makes it)")
    target_dir = store.resolve_target(args.target)
    if args.threads:
        torch.set_num_threads(args.threads)
    return target_dir


def check_train_args(args) -> None:
    """The mistakes in the flags only ``train`` has, before anything loads."""
    if args.minutes is not None and args.minutes <= 0:
        raise UserError(f"--minutes takes a positive time, got {args.minutes:g}")
    if args.val_positions is not None and args.val_positions < 1:
        raise UserError(f"--val-positions takes a count >= 1, got {args.val_positions}")
    if args.init and not Path(args.init).exists():
        raise UserError(f"--init {args.init}: no such checkpoint or head directory")


def load_target(target_dir: Path, device: torch.device):
    from workbench.models.loading import load_target

    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {device}: this machine has no CUDA device")
    return load_target(target_dir, torch.float32, device).requires_grad_(False)


def write_head(args, head, train_seqs: list, val_seqs: list) -> None:
    """The head and the hot tokens of every sequence into ``--export``; the data's totals beside the run."""
    from workbench.train.export import export_head, export_hot_tokens

    seqs = train_seqs + val_seqs
    export_head(head, args.export)
    export_hot_tokens(seqs, args.export, args.hot)
    stats = {"sequences": len(seqs), "train_sequences": len(train_seqs), "val_sequences": len(val_seqs),
             "tokens": sum(len(s.tokens) for s in seqs), "loss_pairs": sum(s.num_targets for s in train_seqs)}
    (args.out / "data_stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"exported to {args.export}: {stats}", flush=True)


def cmd_train(args) -> int:
    from workbench.train.loop import train

    check_train_args(args)
    target_dir = check_data_args(args)
    try:
        cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
        target = load_target(target_dir, cfg.torch_device)
        last = target.config.num_layers - 1
        if cfg.taps and cfg.taps[-1] > last:
            raise ValueError(f"--fuse-layers {cfg.fuse_layers}: the target has layers 0..{last}")
        train_seqs, val_seqs = load_sequences(args, target, cfg.taps)
        checked = val_seqs if args.val_positions is None else first_positions(val_seqs, args.val_positions)
        t0 = time.time()
        head = train(args.out, target, train_seqs=train_seqs, val_seqs=checked, cfg=cfg, resume=args.resume,
                     minutes=args.minutes)
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from None
    print(f"trained in {time.time() - t0:.0f}s on {cfg.torch_device}", flush=True)
    write_head(args, head, train_seqs, val_seqs)
    return 0


def cmd_export(args) -> int:
    """The head as the checkpoint holds it (its depth and fused layers), whatever the flags say."""
    from workbench.train.loop import init_head, layers_in, parse_layers

    target_dir = check_data_args(args)
    path = args.out / "ckpt.pt"
    if not path.exists():
        raise UserError(f"--out {args.out}: no ckpt.pt (python -m workbench.train train writes it)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        target = load_target(target_dir, torch.device("cpu"))
        train_seqs, val_seqs = load_sequences(args, target)  # the hot tokens need the tokens only
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from None
    fuse_layers = parse_layers(ckpt.get("cfg", {}).get("fuse_layers", ""))
    head = init_head(target, 0, layers_in(ckpt["head"]), fuse_layers)
    head.load_state_dict(ckpt["head"])
    write_head(args, head, train_seqs, val_seqs)
    return 0


@reports_user_errors
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
