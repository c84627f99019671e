"""Data-scaling curve: held-out top-1 and τ of heads trained on growing prefixes of the data.

    python -m experiments.scaling --shards ~/.cache/workbench/train-data-v2 \\
        --points 375000,750000,1500000,3000000 --epochs 2 --out ~/.cache/workbench/scaling

For each point N, a fresh head is trained (same recipe, ``--epochs`` passes) on the first
training sequences holding N response tokens (the shards follow the shuffled prompt set, so a
prefix is a balanced sample), then measured on the same held-out set for every point:

- held-out top-1 at draft steps 1-3 (conversations on prompts never trained on, greedy answers,
  full vocabulary; steps 2-3 are fed the head's own outputs, as drafting is);
- τ on ``-n`` MT-bench first turns × ``--max-new`` tokens, greedy, fp32, at EAGLE-2's 60/6/10
  tree and SGLang's 8/5/4 (``workbench/train/evaluate.py``; these questions are never trained on).

Each point writes ``<out>/tokens_N/`` (checkpoint, log, exported head) and a row of
``<out>/scaling.json`` and ``<out>/scaling.md``; a finished point is skipped on a rerun. Any
``TrainConfig`` option (``--ttt-steps 3``, ``--hot-vocab 4096`` ...) applies to every point.
"""

from __future__ import annotations

import json
import time
from dataclasses import fields, replace
from pathlib import Path

import torch

from workbench.errors import ArgumentParser, UserError, reports_user_errors
from workbench.train.loop import TrainConfig, add_config_args

TAU_METHODS = ("eagle2:8/5/4", "eagle2:60/6/10")


def prefix(seqs, response_tokens: int):
    """The first sequences whose answers hold ``response_tokens`` tokens (at least one)."""
    out, n = [], 0
    for s in seqs:
        if out and n >= response_tokens:
            break
        out.append(s)
        n += len(s.tokens) - s.prompt_len
    return out, n


def steps_for(seqs, cfg: TrainConfig, epochs: float) -> int:
    from workbench.train.batches import plan_batches

    return max(cfg.warmup + 1, round(epochs * len(plan_batches(seqs, cfg.max_tokens, cfg.seed))))


def tau(head_dir: Path, n: int, max_new: int, target: str | None = None,
        trees: tuple[str, ...] = TAU_METHODS) -> dict[str, float]:
    """τ of the head at each of ``trees`` ({} when ``n`` is 0); checks losslessness."""
    from workbench.measure.specbench import DATA_FILE
    from workbench.engine.config import SpecConfig
    from workbench.train.evaluate import mt_bench_first_turns, run, speculative_methods
    from workbench.pipeline import Workbench

    if n == 0:
        return {}
    wb = Workbench.load(target=target, draft=str(head_dir), dtype="fp32")
    prompts = [wb.encode(q) for q in mt_bench_first_turns(DATA_FILE, n)]
    base = run(wb, prompts, SpecConfig("vanilla"), max_new)["outputs"]
    out = {}
    for name in trees:
        r = run(wb, prompts, speculative_methods([name])[name], max_new)
        if r["outputs"] != base:
            raise RuntimeError(f"{name}: outputs differ from greedy decoding")
        out[name] = round(r["tau"], 3)
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| response tokens (data) | tokens seen | steps | held-out top-1 | step 2 | step 3 | "
             "τ 8/5/4 | τ 60/6/10 | minutes |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        v, t = r["val"], {k: f"{x:.2f}" for k, x in r["tau"].items()}
        lines.append(f"| {r['response_tokens']:,} | {r['tokens_seen']:,} | {r['steps']} | {v['top1']:.3f} | "
                     f"{v.get('top1_step2', 0):.3f} | {v.get('top1_step3', 0):.3f} | {t.get(TAU_METHODS[0], '-')} | "
                     f"{t.get(TAU_METHODS[1], '-')} | {r['minutes']:.0f} |")
    return "\n".join(lines) + "\n"


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m experiments.scaling", description=__doc__)
    ap.add_argument("--shards", type=Path, required=True,
                    help="the data: a python -m workbench.train generate --out directory")
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "workbench" / "scaling",
                    help="where each point's head and scaling.json go")
    ap.add_argument("--points", default="375000,750000,1500000,3000000", help="response tokens per point")
    ap.add_argument("--epochs", type=float, default=2.0, help="passes over each point's data")
    ap.add_argument("--val-every", type=int, default=50, help="hold out every N-th prompt")
    ap.add_argument("--max-val", type=int, default=200, help="held-out sequences at most")
    ap.add_argument("--target", default=None, help="target model directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("-n", type=int, default=20, help="MT-bench questions for τ (0: no τ)")
    ap.add_argument("--max-new", type=int, default=128, help="new tokens per answer at most, for τ")
    ap.add_argument("--trees", nargs="+", default=list(TAU_METHODS), choices=TAU_METHODS,
                    help="the trees τ is measured at")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    add_config_args(ap, skip=("steps", "init", "dtype"))
    return ap


def parse_args(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        args.points = sorted({int(p) for p in args.points.split(",") if p.strip()})
    except ValueError:
        ap.error(f"--points must be comma-separated integers, got {args.points!r}")
    args.trees = tuple(args.trees)
    if len(args.points) < 1 or args.points[0] < 1:
        ap.error("--points needs at least one positive number of response tokens")
    return args


@reports_user_errors
def main(argv=None) -> int:
    from workbench import store
    from workbench.models.loading import load_target
    from workbench.train.export import export_head, export_hot_tokens
    from workbench.train.features import load_sequences
    from workbench.train.loop import train

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        base = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)})
        target = load_target(store.resolve_target(args.target), torch.float32).requires_grad_(False)
        train_all, val = load_sequences(args.shards, target, args.points[-1], args.val_every, log=print,
                                        taps=base.taps)
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from None
    val = val[: args.max_val]
    if not val:
        raise UserError(f"{args.shards}: no held-out sequences (lower --val-every or generate more)")
    args.out.mkdir(parents=True, exist_ok=True)
    table = args.out / "scaling.json"
    rows = json.loads(table.read_text()) if table.exists() else []
    for point in args.points:
        if any(r["point"] == point for r in rows):
            continue
        seqs, have = prefix(train_all, point)
        if have < point:
            print(f"only {have:,} response tokens in {args.shards}: stopping before the point {point:,}")
            break
        cfg = replace(base, steps=steps_for(seqs, base, args.epochs))
        work, t0 = args.out / f"tokens_{point}", time.time()
        head = train(work, target, train_seqs=seqs, val_seqs=val, cfg=cfg, resume=True)
        export_head(head, work / "head")
        export_hot_tokens(seqs, work / "head")
        last = json.loads((work / "log.jsonl").read_text().splitlines()[-1])
        rows.append({"point": point, "response_tokens": have, "sequences": len(seqs), "steps": cfg.steps,
                     "tokens_seen": round(have * args.epochs), "val": last["val"],
                     "tau": tau(work / "head", args.n, args.max_new, args.target, args.trees),
                     "minutes": (time.time() - t0) / 60,
                     "config": {k: v for k, v in cfg.__dict__.items()}})
        table.write_text(json.dumps(rows, indent=2) + "\n")
        (args.out / "scaling.md").write_text(markdown(rows))
        print(markdown(rows), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
