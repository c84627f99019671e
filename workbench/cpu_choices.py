"""Choices that depend on the CPU, measured on the machine instead of assumed.

Today one: the order of the few-row fp32 linear products (``workbench.models.linear``). ``auto``
times both orders on the loaded model's own weights (about two seconds), once per CPU (model
name, family and vector extensions), torch version, thread count and weight shapes, and caches the verdict in
``<cache>/cpu-choices.json`` (``<cache>`` as for the model store); ``weight-left`` and ``plain``
force either order. Runs that are not fp32 on a CPU need no choice: they run ``F.linear``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import torch
from torch import nn

from workbench.models.linear import MEASURED_ROWS, Linear, LinearOrder, decide, time_orders

LINEAR_ORDERS = ("auto", "weight-left", "plain")
CACHE_FILE = "cpu-choices.json"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in open("/proc/cpuinfo", encoding="ascii", errors="ignore"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_signature() -> str:
    """The CPU as the cache tells machines apart: its model name, family and model numbers and
    the vector extensions that change which order wins (one model name can cover several)."""
    fields, flags = {}, set()
    try:
        for line in open("/proc/cpuinfo", encoding="ascii", errors="ignore"):
            name, _, value = line.partition(":")
            name = name.strip()
            if name == "flags":
                flags = set(value.split())
                break
            fields.setdefault(name, value.strip())
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return (f"{cpu_model()} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')}; "
            f"{' '.join(isa) or 'no avx2'})")


def linear_weights(model: nn.Module) -> list[torch.Tensor]:
    """The weights of every ``Linear`` in ``model``, each once (a tied lm_head counts once)."""
    seen, out = set(), []
    for m in model.modules():
        if isinstance(m, Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            out.append(m.weight.detach())
    return out


def choose_linear_order(choice: str, model: nn.Module, cache_dir: Path | None = None) -> LinearOrder:
    """The few-row linear order for ``model`` on this machine (see the module docstring).

    ``choice``: ``auto`` (measure, or reuse the cached measurement), ``weight-left`` or ``plain``.
    The measurement prints one line on stderr while it runs.
    """
    if choice not in LINEAR_ORDERS:
        raise ValueError(f"--linear-order must be one of {', '.join(LINEAR_ORDERS)}, got {choice!r}")
    weights = linear_weights(model)
    if not weights or weights[0].device.type != "cpu" or weights[0].dtype != torch.float32:
        return LinearOrder(0, "not an fp32 CPU run")
    if choice == "plain":
        return LinearOrder(0, "forced by --linear-order plain")
    if choice == "weight-left":
        return LinearOrder(MEASURED_ROWS[-1], "forced by --linear-order weight-left")
    key = _cache_key(weights)
    path = _cache_path(cache_dir)
    cached = _read_cache(path).get(key)
    if cached is not None:
        return LinearOrder(cached["max_left_rows"], f"measured on this CPU, cached in {CACHE_FILE}")
    print(f"[linear] timing F.linear against (W @ x^T)^T on this CPU (once, a few seconds): {cpu_model()}",
          file=sys.stderr, flush=True)
    timings = time_orders(weights)
    order = LinearOrder(decide(timings), "measured on this CPU")
    _write_cache(path, key, {"max_left_rows": order.max_left_rows, "cpu": cpu_signature(),
                             "torch": torch.__version__, "threads": torch.get_num_threads(), "timings": timings})
    return order


def _cache_key(weights: list[torch.Tensor]) -> str:
    shapes = sorted({tuple(w.shape) for w in weights})
    return f"{cpu_signature()} | torch {torch.__version__} | {torch.get_num_threads()} threads | {shapes}"


def _cache_path(cache_dir: Path | None) -> Path:
    from workbench.store import default_cache_dir

    return Path(cache_dir) / CACHE_FILE if cache_dir is not None else default_cache_dir() / CACHE_FILE


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: measure again
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, key: str, value: dict) -> None:
    """Add one verdict; a cache that cannot be written only costs a measurement next time."""
    data = _read_cache(path)
    data[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    except OSError as err:
        print(f"[linear] note: could not cache the choice in {path}: {err.strerror or err}", file=sys.stderr)
