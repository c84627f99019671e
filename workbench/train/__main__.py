"""python -m workbench.train: self-distillation data, then EAGLE-2 head training, then export.

    python -m workbench.train                      # everything, into ~/.cache/workbench/train
    python -m workbench.train --phase train --resume --steps 1500
    python -m workbench.train --phase train --init ckpt_old.pt --steps 1000   # warm start
    python -m workbench.train --phase export       # write the head of the last checkpoint
    python -m workbench.train --phase train --shards ~/.cache/workbench/train-data-v2 --ttt-steps 3
    python -m workbench.train --phase train --head-layers 2 --init workbench/assets/eagle-smollm2-135m
    python -m workbench.train --phase train --shards DIR --fuse-layers 1,14   # a fused head

``--shards DIR`` trains on the token-only shards of ``python -m workbench.train.generate``
(features recomputed once and cached in DIR/features; every ``--val-every``-th prompt held out)
instead of the ``data`` phase's shards in <out>/data.

Phases: ``data`` (greedy answers + features, shards in <out>/data, finished shards are kept),
``train`` (checkpoints in <out>/ckpt.pt every --ckpt-every steps; --resume continues the same
run; --init starts a new run from another checkpoint's or an exported head's weights; with
--head-layers above the layers it holds, the head grows: each new layer starts as the identity),
``export`` (config.json + fp16 model.safetensors + hot_tokens.json into --export).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from dataclasses import fields
from pathlib import Path

import torch

from workbench.errors import ArgumentParser, UserError, reports_user_errors
from workbench.models.heads import default_draft_dir
from workbench.train.loop import TrainConfig, add_config_args

def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m workbench.train", description=__doc__)
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "workbench" / "train", help="work directory")
    ap.add_argument("--target", default=None, help="target model directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--phase", choices=("all", "data", "train", "export"), default="all", help="what to run")
    ap.add_argument("--resume", action="store_true", help="continue from <out>/ckpt.pt")
    ap.add_argument("--export", type=Path, default=default_draft_dir(), help="where the trained head goes")
    ap.add_argument("--prompts", type=int, default=None, help="use the first N training prompts (default: all)")
    ap.add_argument("--gen-batch", type=int, default=48, help="prompts decoded together")
    ap.add_argument("--max-new", type=int, default=256, help="new tokens per answer at most")
    ap.add_argument("--gen-minutes", type=float, default=30.0, help="stop starting new data batches after this")
    ap.add_argument("--gen-workers", type=int, default=2, help="data processes (one thread each)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads for training (default: torch's)")
    ap.add_argument("--minutes", type=float, default=None,
                    help="train for at most this long: then validate, checkpoint and export the head as it is "
                         "(its schedule cut short; --resume continues; default: the whole schedule)")
    ap.add_argument("--val", type=int, default=24, help="held-out sequences for the validation loss")
    ap.add_argument("--hot", type=int, default=8192, help="length of the exported hot-token list")
    ap.add_argument("--shards", type=Path, default=None,
                    help="train on python -m workbench.train.generate shards (default: the data phase's)")
    ap.add_argument("--max-response-tokens", type=int, default=None,
                    help="with --shards: use this many at most (default: all)")
    ap.add_argument("--val-every", type=int, default=50, help="with --shards: hold out every N-th prompt")
    ap.add_argument("--val-positions", type=int, default=None,
                    help="with --shards: validate on the first held-out conversations up to this many "
                         "positions (default: all of them; each validation costs time in proportion)")
    add_config_args(ap)
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def run_data(args, target_dir: Path) -> None:
    from workbench.train.data import data_worker

    job = dict(work=args.out, target_dir=target_dir, seed=args.seed, num_prompts=args.prompts,
               batch_size=args.gen_batch, max_new=args.max_new, minutes=args.gen_minutes, workers=args.gen_workers)
    if args.gen_workers == 1:
        return data_worker(job, 0)
    ctx = mp.get_context("spawn")  # the worker lives in an importable module: spawn pickles it by name
    procs = [ctx.Process(target=data_worker, args=(job, w)) for w in range(args.gen_workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        raise SystemExit("a data worker failed")


def first_positions(seqs: list, positions: int) -> list:
    """The leading ``seqs`` whose loss positions sum to ``positions`` at most (at least one)."""
    kept, total = [], 0
    for s in seqs:
        if kept and total + s.num_targets > positions:
            break
        kept.append(s)
        total += s.num_targets
    return kept


def load_sequences(args, target=None):
    from workbench.train.batches import sequences_from_shards, split

    if args.shards is not None:
        from workbench.train.features import load_sequences as load_token_shards

        capture = TrainConfig(fuse_layers=args.fuse_layers).capture
        train, val = load_token_shards(args.shards, target, args.max_response_tokens, args.val_every, log=print,
                                       capture=capture)
        if not train or not val:
            raise UserError(f"{args.shards}: too little data for a training and a held-out set")
        checked = val if args.val_positions is None else first_positions(val, args.val_positions)
        return train + val, train, checked  # the cap is validation's only: hot tokens count every sequence
    from workbench.train.data import load_shards

    if args.fuse_layers:
        raise UserError("--fuse-layers needs --shards (data of python -m workbench.train.generate)")
    seqs = sequences_from_shards(load_shards(args.out))
    if not seqs:
        raise UserError(f"no data in {args.out / 'data'}: run the data phase first")
    return seqs, *split(seqs, args.val, args.seed)


def run_train_export(args, target_dir: Path, train: bool) -> None:
    from workbench.models.loading import load_target
    from workbench.train.export import export_head, export_hot_tokens
    from workbench.train.loop import init_head, layers_in, parse_layers, train as train_loop

    if not train:  # export: the head is what the checkpoint holds, whatever the flags say
        ckpt = torch.load(args.out / "ckpt.pt", map_location="cpu", weights_only=False)
        args.fuse_layers = ckpt.get("cfg", {}).get("fuse_layers", "")
        args.device = "cpu"
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
    if cfg.torch_device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {cfg.device}: this machine has no CUDA device")
    target = load_target(target_dir, torch.float32, cfg.torch_device).requires_grad_(False)
    if cfg.capture and cfg.capture[-1] >= target.config.num_layers:
        raise ValueError(f"--fuse-layers {cfg.fuse_layers}: the target has layers 0..{target.config.num_layers - 1}")
    seqs, train_seqs, val_seqs = load_sequences(args, target)
    if train:
        t0 = time.time()
        head = train_loop(args.out, target, train_seqs, val_seqs, cfg, args.resume, args.minutes)
        print(f"trained in {time.time() - t0:.0f}s on {cfg.torch_device}", flush=True)
    else:
        state = ckpt["head"]
        head = init_head(target, cfg.seed, layers_in(state), parse_layers(cfg.fuse_layers))  # as trained
        head.load_state_dict(state)
    export_head(head, args.export)
    export_hot_tokens(seqs, args.export, args.hot)
    stats = {"sequences": len(seqs), "train_sequences": len(train_seqs), "val_sequences": len(val_seqs),
             "tokens": sum(len(s.tokens) for s in seqs), "loss_pairs": sum(s.num_targets for s in train_seqs)}
    (args.out / "data_stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"exported to {args.export}: {stats}", flush=True)


@reports_user_errors
def main(argv=None) -> int:
    from workbench import store

    args = parse_args(argv)
    if args.shards is not None and args.phase in ("all", "data"):
        raise UserError("--shards is data made by python -m workbench.train.generate: use --phase train or export")
    if args.shards is not None and not args.shards.is_dir():
        raise UserError(f"--shards {args.shards}: no such directory")
    if args.val_positions is not None and (args.shards is None or args.val_positions < 1):
        raise UserError("--val-positions takes a count >= 1, with --shards")
    if args.minutes is not None and args.minutes <= 0:
        raise UserError(f"--minutes takes a positive time, got {args.minutes:g}")
    if args.init and not Path(args.init).exists():
        raise UserError(f"--init {args.init}: no such checkpoint or head directory")
    if args.threads:
        torch.set_num_threads(args.threads)
    target_dir = store.resolve_target(args.target)
    t0 = time.time()
    if args.phase in ("all", "data"):
        run_data(args, target_dir)
        print(f"data phase: {time.time() - t0:.0f}s", flush=True)
    if args.phase in ("all", "train", "export"):
        try:
            run_train_export(args, target_dir, train=args.phase != "export")
        except (ValueError, FileNotFoundError) as err:
            raise UserError(str(err)) from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
