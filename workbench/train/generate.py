"""Self-distillation data at scale: the target's own answers to the large prompt set (or to your
own prompts) and its features, sharded and resumable.

    OMP_NUM_THREADS=1 nice -n 19 python -m workbench.train generate --threads 1   # into ~/.cache/workbench/train-data-v2
    python -m workbench.train generate --out DIR --shard-size 48 --samples 2 --max-new 512
    python -m workbench.train generate --status                      # totals only, generates nothing
    python -m workbench.train generate --threads 1 --worker 0/2 & python -m workbench.train generate --threads 1 --worker 1/2
    python -m workbench.train generate --first-shard 138             # only shards 138.. (ones a head has not seen)
    python -m workbench.train generate --prompts my_prompts.jsonl --out ~/.cache/workbench/my-data

Shard i holds prompts ``[i*G, (i+1)*G)`` of ``build_prompt_set(seed)`` (G = ``--shard-size``), or
with ``--prompts FILE`` of the file's prompts in its order (one JSON object a line,
``{"text": ..., "kind": ...}``, ``prompt_set.read_prompts``).
For each of them the target, decoding them as one batch with the engine's plain (vanilla) batched
decoding through the chat template, writes:

- a greedy answer (temperature 0), the answer the draft head must predict at inference;
- ``--samples`` sampled answers at a temperature from ``--temperatures`` (rotating), which put
  the target's less likely continuations into the data (the head sees more of p than its argmax);
- for a ``--followup-frac`` share of the prompts, a second user turn built on the greedy answer
  ("Explain that more simply.", "Add comments to the code.", ...) and the greedy reply to it.

The shards and the features beside them are laid out as ``shards.py`` says. Every sampled answer
has its own seed (shard, pass), so a regenerated shard is identical (with the same dtype and
attention backend, both in each shard's metadata). One progress line per shard: response tokens/s of
this run, totals and the ETA to ``--goal-tokens`` and to the last shard.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.attention import BACKENDS
from workbench.device import default_device
from workbench.errors import UserError, as_user_error
from workbench.models.chat import chat_ids
from workbench.train.prompt_set import Prompt, build_prompt_set, followup, read_prompts
from workbench.train.shards import (FORMAT, check_same_data, feature_path, response_tokens, save_atomic, shard_path,
                                    totals)

DEFAULT_OUT = Path.home() / ".cache" / "workbench" / "train-data-v2"


@dataclass(frozen=True)
class GenConfig:
    out: Path = DEFAULT_OUT
    seed: int = 0  # the template set's order and the sampling seeds
    num_prompts: int | None = None  # None = the whole prompt set
    prompts_file: Path | None = None  # a JSON-lines file of the user's prompts (None = the template set)
    shard_size: int = 48  # prompts per shard = batch of one decoding pass
    samples: int = 1  # sampled answers per prompt beside the greedy one
    temperatures: tuple[float, ...] = (0.7, 0.85, 1.0)
    followup_frac: float = 0.3
    max_new: int = 384
    max_shards: int | None = None  # stop after this many new shards (None = until done)
    goal_tokens: int = 3_000_000  # response tokens the ETA is reported against
    features: bool = True  # record the target's features while decoding (features/feat_NNNNN.safetensors)
    dtype: str = "fp32"  # the target's weights while decoding (bf16: ~1.7x faster on a CPU with AVX-512 BF16)
    worker: tuple[int, int] = (0, 1)  # (k, n): this process makes the shards i with i % n == k
    first_shard: int = 0  # make only the shards i >= first_shard
    minutes: float | None = None  # start no new shard after this long (None = no limit)

    def __post_init__(self) -> None:
        if self.shard_size < 1 or self.samples < 0 or self.max_new < 1:
            raise ValueError("--shard-size and --max-new must be >= 1 and --samples >= 0")
        if not 0.0 <= self.followup_frac <= 1.0:
            raise ValueError(f"--followup-frac must be in [0, 1], got {self.followup_frac}")
        if self.num_prompts is not None and self.num_prompts < 1:
            raise ValueError(f"--num-prompts must be >= 1, got {self.num_prompts}")
        if self.samples and (not self.temperatures or any(not 0.0 < t <= 2.0 for t in self.temperatures)):
            raise ValueError(f"--temperatures must be in (0, 2], got {self.temperatures}")
        if self.dtype not in ("fp32", "bf16"):
            raise ValueError(f"--dtype must be fp32 or bf16, got {self.dtype!r}")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"--minutes must be > 0, got {self.minutes:g}")
        if self.first_shard < 0:
            raise ValueError(f"--first-shard must be >= 0, got {self.first_shard}")
        k, n = self.worker
        if not 0 <= k < n:
            raise ValueError(f"--worker K/N needs 0 <= K < N, got {k}/{n}")


class Chat:
    """The chat template and the tokenizer, as the generator needs them (tests pass a fake)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, messages: list[dict]) -> list[int]:
        return chat_ids(self.tokenizer, messages)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def decode_batch(target, contexts: list[list[int]], *, temperature: float, seed: int, max_new: int,
                 stop_ids: tuple[int, ...], features: bool = False):
    """One batch through the engine's plain decoding: the answers' token ids, and with
    ``features`` also each sequence's post-norm features [T - 1, H] fp16 (f_t for every token
    the target was fed: the prompt at prefill, then each emitted token but the last), recorded
    from the target's forwards while it decodes, so training need not run the target again."""
    from workbench.engine.config import SpecConfig
    from workbench.engine.engine import Engine
    from workbench.engine.sampling import SamplingParams

    # batches shrink as answers finish: eager steps, no graph per size
    eng = Engine(target, None, SpecConfig("vanilla"), sampling=SamplingParams(temperature=temperature, seed=seed),
                 stop_ids=stop_ids, cuda_graphs=False)
    reqs = eng.add_requests(contexts, max_new)
    if not features:
        return [r.output_ids for r in eng.run()]
    rows: list[torch.Tensor] = []
    hook = target.register_forward_hook(lambda _m, _i, out: rows.append(out.detach().to("cpu", torch.float16)))
    feats: list[list[torch.Tensor]] = [[] for _ in reqs]
    try:
        while not eng.done:
            fed = [r.rid for r in eng.running]  # plain decoding feeds one row per running request, in this order
            first = eng.steps == 0
            eng.step()
            out = torch.cat(rows)
            rows.clear()
            parts = out.split([len(c) for c in contexts]) if first else out.split(1)
            if len(parts) != len(fed):
                raise RuntimeError(f"engine fed {out.shape[0]} rows for {len(fed)} requests: feature recording "
                                   f"assumes the vanilla step's one row per running request")
            for rid, part in zip(fed, parts):
                feats[rid].append(part)
    finally:
        hook.remove()
    return [r.output_ids for r in reqs], [torch.cat(f) for f in feats]


def prompts_for(cfg: GenConfig) -> list[Prompt]:
    """The first ``cfg.num_prompts`` prompts (all with None) of ``cfg.prompts_file``, in its
    order, or of the template set, shuffled by ``cfg.seed``; a bad file is a ``ValueError``
    naming ``--prompts`` and the line."""
    if cfg.prompts_file is None:
        return build_prompt_set(cfg.seed, cfg.num_prompts)
    try:
        return read_prompts(cfg.prompts_file)[: cfg.num_prompts]
    except ValueError as err:
        raise ValueError(f"--prompts {err}") from None


def shard_seed(cfg: GenConfig, shard: int, what: int) -> int:
    return (cfg.seed * 1_000_003 + shard) * 16 + what


def make_shard(target, chat: Chat, *, stop_ids: tuple[int, ...], prompts: list[Prompt], first: int, shard: int,
               cfg: GenConfig, log=None) -> dict[str, torch.Tensor]:
    """Every sequence of one shard (prompts ``first .. first+len(prompts)-1``), with their
    features under ``"features"`` when ``cfg.features``; ``log`` gets a line per decoding pass."""

    def decode(contexts, temperature, seed, what):
        t0 = time.time()
        answers, feats = decode_batch(target, contexts, temperature=temperature, seed=seed, max_new=cfg.max_new,
                                      stop_ids=stop_ids, features=True) \
            if cfg.features else (decode_batch(target, contexts, temperature=temperature, seed=seed,
                                               max_new=cfg.max_new, stop_ids=stop_ids), None)
        if feats is not None:
            hid = feats[0].shape[-1]
            kept.extend(torch.cat([f, torch.zeros(1, hid, dtype=f.dtype)]) for f in feats)  # [T, H], last row unused
        if log:
            n = sum(map(len, answers))
            log(f"  shard {shard:05d} {what}: {len(answers)} answers, {n:,} tokens, "
                f"{n / (time.time() - t0):.1f} tok/s", flush=True)
        return answers

    rows = []  # (context ids, answer ids, prompt index, temperature, turn)
    kept = []  # each sequence's features [T, H], in the order of rows
    contexts = [chat.encode([{"role": "user", "content": p.text}]) for p in prompts]
    greedy = decode(contexts, 0.0, 0, "greedy")
    rows += [(c, a, first + j, 0.0, 1) for j, (c, a) in enumerate(zip(contexts, greedy))]
    for s in range(cfg.samples):
        temp = cfg.temperatures[(shard + s) % len(cfg.temperatures)]
        answers = decode(contexts, temp, shard_seed(cfg, shard, 1 + s), f"sampled at T={temp}")
        rows += [(c, a, first + j, temp, 1) for j, (c, a) in enumerate(zip(contexts, answers))]
    rng = random.Random(shard_seed(cfg, shard, 0))
    follow, idx = [], []
    for j, (p, a) in enumerate(zip(prompts, greedy)):
        take = rng.random() < cfg.followup_frac
        if take and a and a[-1] in stop_ids:  # only after a finished answer
            follow.append(chat.encode([{"role": "user", "content": p.text},
                                       {"role": "assistant", "content": chat.decode(a)},
                                       {"role": "user", "content": followup(p, rng)}]))
            idx.append(j)
    if follow:
        answers = decode(follow, 0.0, 0, "follow-ups")
        rows += [(c, a, first + j, 0.0, 2) for j, c, a in zip(idx, follow, answers)]
    starts = [0]
    for c, a, *_ in rows:
        starts.append(starts[-1] + len(c) + len(a))
    out = {
        "tokens": torch.tensor([t for c, a, *_ in rows for t in c + a], dtype=torch.int32),
        "starts": torch.tensor(starts, dtype=torch.int64),
        "prompt_lens": torch.tensor([len(c) for c, *_ in rows], dtype=torch.int64),
        "prompt_index": torch.tensor([r[2] for r in rows], dtype=torch.int64),
        "temperature": torch.tensor([r[3] for r in rows], dtype=torch.float32),
        "turn": torch.tensor([r[4] for r in rows], dtype=torch.int64),
    }
    if kept:  # [N, H] fp16, row i = f of token i (zero for each sequence's last token)
        out["features"] = torch.cat(kept)
    return out


def data_identity(cfg: GenConfig, prompts: list[Prompt]) -> dict:
    """What fixes a shard's content: the prompts (a fingerprint of their texts, whether the
    template set's or a ``--prompts`` file's, so a directory is resumed only with the same
    prompts in the same order) and the knobs. ``max_shards`` and ``goal_tokens`` only steer a
    run, so they are left out; so is the file's path (a moved file is the same data)."""
    keep = ("seed", "num_prompts", "shard_size", "samples", "temperatures", "followup_frac", "max_new")
    digest = hashlib.sha256("\n\0".join(p.text for p in prompts).encode()).hexdigest()[:16]
    return {"format": FORMAT, "prompt_set": digest, "num_prompt_set": len(prompts),
            **{k: getattr(cfg, k) for k in keep}}


def stop_ids(target_dir: Path, tokenizer) -> tuple[int, ...]:
    """The ids that end an answer: the tokenizer's end of sequence and the target's
    ``generation_config.json`` ``eos_token_id`` (one id or a list)."""
    eos = json.loads((Path(target_dir) / "generation_config.json").read_text()).get("eos_token_id")
    stop = {tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])}
    return tuple(sorted(i for i in stop if i is not None))


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def run(cfg: GenConfig, target, chat: Chat, stop_ids: tuple[int, ...], log=print,
        prompts: list[Prompt] | None = None) -> dict:
    """Generate every missing shard (or ``cfg.max_shards`` of them) of ``prompts`` (by default
    ``prompts_for(cfg)``); returns the totals."""
    prompts = prompts_for(cfg) if prompts is None else prompts
    cfg.out.mkdir(parents=True, exist_ok=True)
    num_shards = -(-len(prompts) // cfg.shard_size)
    meta = {"format": FORMAT, "config": json.dumps(data_identity(cfg, prompts), sort_keys=True), "dtype": cfg.dtype,
            "attention": target.attention_backend}  # both steer bf16 rounding, so a rerun's exact tokens
    check_same_data(cfg.out / "config.json", meta["config"])
    done = totals(cfg.out)
    me, n = cfg.worker  # (``k`` below counts this run's shards)
    missing = [i for i in range(num_shards) if not shard_path(cfg.out, i).exists()]
    todo = [i for i in missing if i % n == me and i >= cfg.first_shard]
    mine = f" ({len(todo)} of them for worker {me}/{n})" if n > 1 else ""
    log(f"{len(prompts)} prompts in {num_shards} shards of {cfg.shard_size}; {num_shards - len(missing)} done"
        f" ({done['response_tokens']:,} response tokens); {len(missing)} to go{mine}", flush=True)
    if cfg.max_shards is not None:
        todo = todo[: cfg.max_shards]
    t0, made = time.time(), 0
    for k, i in enumerate(todo):
        if k and cfg.minutes is not None and time.time() - t0 > 60 * cfg.minutes:  # one shard at least
            log(f"stopping before shard {i:05d}: the time limit of {cfg.minutes:g} min ran out "
                f"({len(todo) - k} shards left; the same command continues)", flush=True)
            break
        first = i * cfg.shard_size
        shard = make_shard(target, chat, stop_ids=stop_ids, prompts=prompts[first : first + cfg.shard_size],
                           first=first, shard=i, cfg=cfg, log=log)
        feats = shard.pop("features", None)
        if feats is not None:  # before the shard: a shard on disk always has its features beside it
            save_atomic(feature_path(cfg.out, i), {"features": feats}, meta)
        save_atomic(shard_path(cfg.out, i), shard, meta)
        made += response_tokens(shard)
        rate = made / (time.time() - t0)
        # with N workers the others' shards count too, and the directory fills ~N times as fast
        have = totals(cfg.out)["response_tokens"] if n > 1 else done["response_tokens"] + made
        to_goal = max(0, cfg.goal_tokens - have) / (rate * n)
        to_end = (time.time() - t0) / (k + 1) * (len(todo) - k - 1)
        log(f"shard {i:05d} ({k + 1}/{len(todo)}): {len(shard['turn'])} sequences, {response_tokens(shard):,} "
            f"response tokens; {rate:.1f} tok/s; total {have:,} response tokens; ETA {cfg.goal_tokens:,}: "
            f"{hours(to_goal)}, all shards: {hours(to_end)}", flush=True)
    return totals(cfg.out)


def parse_worker(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)``; a clear error for anything else."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--worker takes K/N, e.g. 1/2, got {text!r}") from None
    return k, n


def add_parser(sub) -> None:
    """Register ``generate`` on ``python -m workbench.train``'s subparsers."""
    ap = sub.add_parser("generate", help="the target's own answers to the prompt set, and its features, in shards",
                        description=__doc__)
    add_arguments(ap)
    ap.set_defaults(func=cmd_generate)


def add_arguments(ap) -> None:
    d = GenConfig()
    ap.add_argument("--out", type=Path, default=d.out, help="data directory")
    ap.add_argument("--target", default=None, help="target model directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--prompts", type=Path, default=None, metavar="FILE.jsonl",
                    help='your own prompts, one JSON object a line: {"text": ..., "kind": ...}, the kind optional '
                         "(writing, coding, math, ...: it picks follow-ups that fit); default: the template set")
    ap.add_argument("--num-prompts", type=int, default=None, help="use the first N prompts (default: all)")
    ap.add_argument("--seed", type=int, default=d.seed, help="the template set's order and the sampling seeds")
    ap.add_argument("--shard-size", type=int, default=d.shard_size, help="prompts per shard = decoding batch")
    ap.add_argument("--samples", type=int, default=d.samples, help="sampled answers per prompt besides the greedy one")
    ap.add_argument("--temperatures", default=",".join(map(str, d.temperatures)), help="comma-separated, rotating")
    ap.add_argument("--followup-frac", type=float, default=d.followup_frac, help="share of prompts with a second turn")
    ap.add_argument("--max-new", type=int, default=d.max_new, help="new tokens per answer at most")
    ap.add_argument("--max-shards", type=int, default=None, help="stop after N new shards (default: no limit)")
    ap.add_argument("--minutes", type=float, default=None,
                    help="start no new shard after this many minutes (default: no limit)")
    ap.add_argument("--device", default="cpu", help="where the target decodes: cpu, cuda (or cuda:N), or auto")
    ap.add_argument("--attention", choices=BACKENDS, default=None,
                    help="attention backend (default: padded, plain decoding's batch in one call; triton is self-checked "
                         "first)")
    ap.add_argument("--goal-tokens", type=int, default=d.goal_tokens, help="response tokens the ETA is counted to")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--worker", default="0/1", metavar="K/N",
                    help="make only the shards i with i %% N == K, so N processes (one per core, each with "
                         "--threads 1) fill one directory side by side")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default=d.dtype,
                    help="the target's dtype while decoding, recorded in each shard's metadata; shards of "
                         "either dtype may share a directory (bf16 answers follow the bf16 target's greedy "
                         "choices, and its features carry bf16 rounding, well under the training noise)")
    ap.add_argument("--first-shard", type=int, default=d.first_shard,
                    help="make only shards from this one on (e.g. those a head has not trained on yet)")
    ap.add_argument("--no-features", action="store_true",
                    help="store token ids only (features.py then recomputes the features: one prefill per sequence)")
    ap.add_argument("--status", action="store_true", help="print the totals of --out and exit")


def cmd_generate(args) -> int:
    """``python -m workbench.train generate``: every missing shard of ``--out`` (or its totals)."""
    if args.status:
        t = totals(args.out)
        per_m = {"mb_per_million_tokens": round(t["bytes"] / max(1, t["tokens"]), 2),
                 "feature_mb_per_million_tokens": round(t["feature_bytes"] / max(1, t["tokens"]), 1)}
        print(json.dumps({**t, **per_m}, indent=2))
        return 0
    try:
        temps = tuple(float(x) for x in args.temperatures.split(",") if x.strip())
        worker = parse_worker(args.worker)
        cfg = GenConfig(out=args.out, seed=args.seed, num_prompts=args.num_prompts, prompts_file=args.prompts,
                        shard_size=args.shard_size, samples=args.samples, temperatures=temps,
                        followup_frac=args.followup_frac, max_new=args.max_new, max_shards=args.max_shards,
                        goal_tokens=args.goal_tokens, features=not args.no_features, dtype=args.dtype, worker=worker,
                        first_shard=args.first_shard, minutes=args.minutes)
        prompts = prompts_for(cfg)  # a bad --prompts file is refused before the model loads
        device = torch.device(default_device() if args.device == "auto" else args.device)
    except (ValueError, RuntimeError) as err:
        raise UserError(str(err)) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {args.device}: this machine has no CUDA device")
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    from workbench import store
    from workbench.attention.selfcheck import choose_attention_backend
    from workbench.device import DTYPES
    from workbench.models.loading import load_target

    target_dir = store.resolve_target(args.target)
    target = load_target(target_dir, DTYPES[cfg.dtype], device)
    c = target.config  # the device's fastest attention, decided in one place; triton only where it checks out
    check = choose_attention_backend(args.attention or "padded", device, dtype=DTYPES[cfg.dtype],
                                     head_dim=c.head_dim, num_heads=c.num_heads, num_kv_heads=c.num_kv_heads)
    print(check.message if check.ok else f"warning: {check.message}", file=sys.stderr, flush=True)
    target.attention_backend = check.backend
    tok = AutoTokenizer.from_pretrained(target_dir)
    with as_user_error():
        t = run(cfg, target, Chat(tok), stop_ids(target_dir, tok), prompts=prompts)
    print(json.dumps(t), flush=True)
    return 0
