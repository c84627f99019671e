"""A step's phase times: ``with timings.phase("verify"):`` around a phase records its wall time
in ms under ``"verify_ms"``, the key ``StepRecord.timing_ms`` carries (the app, the benchmarks
and the notebooks read these keys: ``prefill_ms``, ``decode_ms``; a speculative step's
``draft_extend_ms``, ``draft_tree_ms``, ``build_ms``, ``verify_ms``, ``accept_ms``, ``commit_ms``).

CUDA is asynchronous: without a sync, a phase's kernels would run, and be timed, in a later
phase. With ``sync`` (the engine's tracing on a CUDA device) the clock is read after
``torch.cuda.synchronize``; without it a phase costs two ``perf_counter`` reads and nothing waits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class StepTimings:
    """The phases of one step, timed in order (filled by ``engine.py``, read as ``ms``)."""

    def __init__(self, device: torch.device, sync: bool):
        self.device, self.sync = device, sync and device.type == "cuda"
        self.ms: dict[str, float] = {}  # "<phase>_ms" -> wall time in ms, in the order the phases ran

    def _clock(self) -> float:
        if self.sync:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (a phase that raises is not recorded)."""
        start = self._clock()
        yield
        self.ms[f"{name}_ms"] = (self._clock() - start) * 1e3
