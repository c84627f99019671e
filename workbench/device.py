"""Device and dtype, decided in one place.

* device: CUDA when present, else the CPU.
* dtype ``auto``: bf16 on a GPU, and on a CPU that computes bf16 natively (AVX-512 BF16 or AMX
  instructions); fp32 on any other CPU, where bf16 matmuls are emulated and run several times
  slower than fp32 (docs/benchmarks.md, "Measurements behind code choices").
"""

from __future__ import annotations

from functools import lru_cache

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # by the name the flags take
DTYPE_CHOICES = ("auto", *DTYPES)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@lru_cache(maxsize=1)
def cpu_info() -> dict[str, str]:
    """``/proc/cpuinfo`` as {field: value}, each field's first value (the first processor's);
    empty where there is no such file."""
    fields: dict[str, str] = {}
    try:
        for line in open("/proc/cpuinfo", encoding="ascii", errors="ignore"):
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_has_native_bf16() -> bool:
    return bool({"avx512_bf16", "amx_bf16"} & set(cpu_info().get("flags", "").split()))


def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bf16"``: the name the flags take (``str(dtype)`` for another dtype)."""
    return next((name for name, d in DTYPES.items() if d == dtype), str(dtype))


def resolve_dtype(name: str, device: str) -> str:
    """``auto`` -> the fastest exact-enough dtype for ``device``; other names pass through."""
    if name not in DTYPE_CHOICES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPE_CHOICES)}")
    if name != "auto":
        return name
    if torch.device(device).type == "cuda" or cpu_has_native_bf16():
        return "bf16"
    return "fp32"
