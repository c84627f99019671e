"""Choices that depend on the CPU, measured on the machine instead of assumed.

Today one: which implementation each few-row fp32 or bf16 linear product runs, per row count
(``workbench.models.linear``). ``auto`` first checks each implementation against ``F.linear`` on
the loaded model's own weights (one not within fp32 rounding is never timed nor chosen), then
times the eligible ones on those weights in ``ROUNDS`` whole rounds (ten seconds or so), once per
CPU (model name, family, vector extensions), torch version, thread count, implementations
available, weight shapes and dtype. The verdict is decided on each implementation's median over
the rounds, and kept only when the rounds agree: at each row count every round chose the same
implementation, or the ones chosen are within ``LEVEL`` of each other in every round (noise,
either runs as fast). On a busy machine a round sees an implementation lose by far more; then
this process runs ``F.linear`` and nothing is cached, so the next load measures again. An agreed
verdict is cached in ``<cache>/cpu-choices.json`` (``<cache>`` as for the model store) with how it
was measured (rounds, repeats, the implementations that passed, each round's verdict, median ms
and spread per row count, the packed weights' memory); delete it or its entry to measure again.
``weight-left``, ``mkl-packed``, ``onednn-packed`` and ``plain`` force one implementation for
2-16 rows without measuring (``F.linear`` where this torch lacks the library's ops or the dtype
cannot run it). Other dtypes, and GPUs, run ``F.linear``. ``python -m experiments.linear_order``
prints the timings themselves.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from statistics import median

import torch
from torch import nn

from workbench.cache_file import add_entry, read_entries
from workbench.device import cpu_info, dtype_name
from workbench.models.linear import (DTYPE_PATHS, ONEDNN, PACKED, PATH_NAMES, PATHS, PLAIN, ROW_BUCKETS, WEIGHT_LEFT,
                                     Linear, LinearOrder, available_paths, check_paths, decide, pack_weight, time_paths)

FORCED = {"plain": PLAIN, "weight-left": WEIGHT_LEFT, "mkl-packed": PACKED, "onednn-packed": ONEDNN}  # --linear-order value
LINEAR_ORDERS = ("auto", *FORCED)  # the values --linear-order accepts
CACHE_FILE = "cpu-choices.json"
PATHS_VERSION = 2  # in the cache key: a change to what a path runs (2: one weight-left row padded to two) measures again
ROUNDS = 3  # whole measurements, one after another; the verdict must be the same in each, or level
LEVEL = 0.15  # two implementations within 15 % of each other in every round are level: either may be chosen
REPEATS = 3  # timed repeats per order and row count in one round, the fastest kept


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    return cpu_info().get("model name") or platform.processor() or platform.machine() or "unknown CPU"


def cpu_flags() -> set[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where there is none)."""
    return set(cpu_info().get("flags", "").split())


def cpu_kind(flags: set[str]) -> str:
    """The kind of CPU as the benchmark records tell them apart: its widest vector extension."""
    if any(f.startswith("amx") for f in flags):
        return "AMX"
    if "avx512_bf16" in flags:
        return "AVX-512 BF16"
    return "AVX-512" if "avx512f" in flags else "AVX2 only" if "avx2" in flags else "no AVX2"


def cpu_signature() -> str:
    """The CPU as the cache tells machines apart: its model name, family and model numbers and
    the vector extensions that change which order wins (one model name can cover several)."""
    fields, flags = cpu_info(), cpu_flags()
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
    """The few-row linear implementations for ``model`` on this machine (module docstring).

    ``choice``: ``auto`` (measure, or reuse the cached measurement) or one of ``FORCED``.
    The measurement prints one line on stderr while it runs, and one more if its rounds disagree.
    """
    if choice not in LINEAR_ORDERS:
        raise ValueError(f"--linear-order must be one of {', '.join(LINEAR_ORDERS)}, got {choice!r}")
    weights = linear_weights(model)
    if not weights or weights[0].device.type != "cpu" or weights[0].dtype not in DTYPE_PATHS:
        return LinearOrder((), "not an fp32 or bf16 CPU run")
    dtype = weights[0].dtype
    if choice != "auto":
        return _forced(FORCED[choice], choice, weights)
    paths = available_paths(dtype)
    key = _cache_key(weights, paths)
    path = _cache_path(cache_dir)
    cached = read_entries(path).get(key)
    if isinstance(cached, dict) and "rounds" in cached and "paths" in cached:  # else never checked: measure
        return LinearOrder(tuple(cached["paths"]), f"measured on this CPU, cached in {CACHE_FILE}",
                           cached.get("packed_mb", 0.0), dtype)
    print(f"[linear] timing {', '.join(paths)} at {', '.join(map(str, ROW_BUCKETS))} rows on this CPU, "
          f"{dtype_name(dtype)} ({ROUNDS} rounds, once, ten seconds or so): {cpu_model()}", file=sys.stderr,
          flush=True)
    eligible = check_paths(weights, paths)
    measured = measure_rounds(weights, tuple(p for p in paths if eligible[p] or p == PLAIN))
    if not measured["agreed"]:
        print(f"[linear] the {ROUNDS} rounds chose differently, by more than noise ({measured['verdicts']}, "
              f"[] = F.linear; a busy machine?): F.linear for this run, nothing cached, measured again next load",
              file=sys.stderr, flush=True)
        return LinearOrder((), "measurements disagreed, not cached", dtype=dtype)
    verdict = tuple(measured["verdict"])
    packed_mb = _packed_mb(weights, verdict)
    add_entry(path, key, value={"paths": list(verdict), "packed_mb": packed_mb, "cpu": cpu_signature(),
                             "torch": torch.__version__, "threads": torch.get_num_threads(),
                             "dtype": dtype_name(dtype), "eligible": eligible, **measured}, tag="[linear]",
                             what="the choice")
    return LinearOrder(verdict, "measured on this CPU", packed_mb, dtype)


def measure_rounds(weights: list[torch.Tensor], paths: tuple[str, ...], rounds: int = ROUNDS,
                   repeats: int = REPEATS) -> dict:
    """Time ``paths`` ``rounds`` times over (``time_paths``: best of ``repeats`` per path and
    row count), each round deciding on its own timings.

    Returns what the cache records: ``rounds``, ``repeats``, ``verdicts`` (each round's paths
    per row count, [] = F.linear everywhere), ``timings`` (per row count and path the median ms
    over the rounds and its spread, (max - min) / median), ``verdict`` (decided on those
    medians) and ``agreed`` (``rounds_agree``: a load that comes and goes lands in some rounds
    only, and their verdicts differ)."""
    per_round = [time_paths(weights, paths, repeats=repeats) for _ in range(rounds)]
    timings = []
    for i, first in enumerate(per_round[0]):
        row = {"rows": first["rows"], "ms": {}, "spread": {}}
        for p in first["ms"]:
            ms = [r[i]["ms"][p] for r in per_round]
            mid = median(ms)
            row["ms"][p] = mid
            row["spread"][p] = (max(ms) - min(ms)) / mid if mid > 0 else 0.0
        timings.append(row)
    verdicts = [list(decide(r)) for r in per_round]
    verdict = list(decide([{"rows": t["rows"], "ms": t["ms"]} for t in timings]))
    return {"rounds": rounds, "repeats": repeats, "verdicts": verdicts, "verdict": verdict, "timings": timings,
            "agreed": rounds_agree(per_round, verdicts + [verdict])}


def rounds_agree(per_round: list[list[dict]], verdicts: list[list[str]], level: float = LEVEL) -> bool:
    """Whether the rounds' timings (``time_paths`` each) back one verdict: at every row count,
    the implementations that ``verdicts`` name there (each a ``decide`` result, [] = F.linear)
    are one, or are level: in every round, the slowest of them within ``level`` of the fastest."""
    for i, bucket in enumerate(ROW_BUCKETS):
        named = {(v[i] if v else PLAIN) for v in verdicts}
        if len(named) == 1:
            continue
        for timings in per_round:
            ms = next((t["ms"] for t in timings if t["rows"] == bucket), None)
            if ms is None or any(p not in ms for p in named):
                return False
            if max(ms[p] for p in named) > (1 + level) * min(ms[p] for p in named):
                return False
    return True


def _forced(impl: str, choice: str, weights: list[torch.Tensor]) -> LinearOrder:
    dtype = weights[0].dtype
    if impl == PLAIN:
        return LinearOrder((), "forced by --linear-order plain", dtype=dtype)
    if impl not in DTYPE_PATHS[dtype]:
        return LinearOrder((), f"--linear-order {choice}: {PATH_NAMES[impl]} does not run {dtype_name(dtype)}",
                           dtype=dtype)
    if impl not in available_paths(dtype):
        return LinearOrder((), f"--linear-order {choice}: {PATH_NAMES[impl]} is not in this torch build or not native on this CPU", dtype=dtype)
    order = LinearOrder.forced(impl, f"forced by --linear-order {choice}", dtype=dtype)
    return LinearOrder.forced(impl, order.reason, _packed_mb(weights, order.paths), dtype)


def _packed_mb(weights: list[torch.Tensor], paths: tuple[str, ...]) -> float:
    """The MB packed copies of ``weights`` hold for the packed row counts of ``paths``, packed
    once here one weight at a time (MKL sizes the buffer; it is several times the weight), plus
    oneDNN's one copy of each weight (its own bytes) when some count runs it."""
    order = LinearOrder(paths, dtype=weights[0].dtype)
    total = sum(pack_weight(w, r).numel() * 4 for r in order.packed_rows for w in weights)  # fp32 buffers
    total += sum(w.numel() * w.element_size() for w in weights) if order.uses_onednn else 0
    return round(total / 2**20, 1)


def _cache_key(weights: list[torch.Tensor], paths: tuple[str, ...] = PATHS) -> str:
    shapes = sorted({tuple(w.shape) for w in weights})
    dtype = "" if weights[0].dtype == torch.float32 else f" | {dtype_name(weights[0].dtype)}"  # fp32 keys as before
    return (f"{cpu_signature()} | torch {torch.__version__} | {torch.get_num_threads()} threads | "
            f"{'/'.join(paths)} v{PATHS_VERSION} | {shapes}{dtype}")


def _cache_path(cache_dir: Path | None) -> Path:
    from workbench.store import default_cache_dir

    return Path(cache_dir) / CACHE_FILE if cache_dir is not None else default_cache_dir() / CACHE_FILE
