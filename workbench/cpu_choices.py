"""Choices that depend on the CPU, measured on the machine instead of assumed.

Today one: the order of the few-row fp32 linear products (``workbench.models.linear``). ``auto``
times both orders on the loaded model's own weights, in ``ROUNDS`` whole rounds one after another
(a few seconds), once per CPU (model name, family and vector extensions), torch version, thread
count and weight shapes. A verdict is kept only when every round reaches it: a busy machine
(another process on the cores for part of the run) makes the rounds disagree, and then this
process runs ``F.linear`` (the safe default) and nothing is cached, so the next load measures
again. An agreed verdict is cached in ``<cache>/cpu-choices.json`` (``<cache>`` as for the model
store) with how it was measured: rounds, repeats, each round's verdict, the median ms of each
order and its spread over the rounds. ``weight-left`` and ``plain`` force either order without
measuring. Runs that are not fp32 on a CPU need no choice: they run ``F.linear``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from statistics import median

import torch
from torch import nn

from workbench.models.linear import MEASURED_ROWS, Linear, LinearOrder, decide, time_orders

LINEAR_ORDERS = ("auto", "weight-left", "plain")
CACHE_FILE = "cpu-choices.json"
ROUNDS = 3  # whole measurements, one after another; the verdict must be the same in each
REPEATS = 3  # timed repeats per order and row count in one round, the fastest kept


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
    The measurement prints one line on stderr while it runs, and one more if its rounds disagree.
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
    if isinstance(cached, dict) and "rounds" in cached:  # an entry without rounds was never checked: measure
        return LinearOrder(cached["max_left_rows"], f"measured on this CPU, cached in {CACHE_FILE}")
    print(f"[linear] timing F.linear against (W @ x^T)^T on this CPU ({ROUNDS} rounds, once, a few seconds): "
          f"{cpu_model()}", file=sys.stderr, flush=True)
    measured = measure_rounds(weights)
    if len(set(measured["verdicts"])) > 1:
        print(f"[linear] the {ROUNDS} rounds chose differently ((W @ x^T)^T up to {measured['verdicts']} rows, "
              f"0 = F.linear; a busy machine?): F.linear for this run, nothing cached, measured again next load",
              file=sys.stderr, flush=True)
        return LinearOrder(0, "measurements disagreed, not cached")
    order = LinearOrder(measured["verdicts"][0], "measured on this CPU")
    _write_cache(path, key, {"max_left_rows": order.max_left_rows, "cpu": cpu_signature(),
                             "torch": torch.__version__, "threads": torch.get_num_threads(), **measured})
    return order


def measure_rounds(weights: list[torch.Tensor], rounds: int = ROUNDS, repeats: int = REPEATS) -> dict:
    """Time both orders ``rounds`` times over (``time_orders``: best of ``repeats`` per order and
    row count), each round deciding on its own timings.

    Returns what the cache records: ``rounds``, ``repeats``, ``verdicts`` (each round's
    ``max_left_rows``) and ``timings``, per row count the median ms of each order over the
    rounds and its spread, (max - min) / median. Rounds run one after another, so a load that
    comes and goes lands in some rounds and not others, and their verdicts differ.
    """
    per_round = [time_orders(weights, repeats=repeats) for _ in range(rounds)]
    timings = []
    for i, first in enumerate(per_round[0]):
        row = {"rows": first["rows"]}
        for order in ("linear_ms", "weight_left_ms"):
            ms = [r[i][order] for r in per_round]
            mid = median(ms)
            row[order] = mid
            row[order.replace("_ms", "_spread")] = (max(ms) - min(ms)) / mid if mid > 0 else 0.0
        timings.append(row)
    return {"rounds": rounds, "repeats": repeats, "verdicts": [decide(r) for r in per_round], "timings": timings}


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
