"""The numbers every report of a run uses, defined once: τ, speedup, predicted speedup, latency.

Plain Python, no torch; the command line, the app, the benchmarks, the views and the notebooks
import these rather than writing the formulas again (docs/design.md §6).

- **τ (accept length)**: tokens emitted per verify step (accepted drafts + the bonus, ``n + 1``,
  fewer at the step where a stop token or ``max_new_tokens`` ended the output), the mean over
  verify steps; the prefill's first token is not a verify step and is not counted, so a
  request's τ is (tokens - 1) / (verify steps). Steps are pooled: a run (or a set of questions)
  is one list of accept lengths (``Request.accept_lengths``, a trace's ``accept_length``).
- **speedup**: tokens/s of a method over tokens/s of the baseline (plain decoding).
- **predicted speedup**: what τ buys at the measured costs: a step emits τ tokens in
  ``t_draft + t_verify(D)`` ms where plain decoding emits 1 token in ``t(1)`` ms, so
  ``τ · t(1) / (t_draft + t_verify(D))``.
- **latency** of one answer of n tokens: **TTFT**, from the request's arrival to its first
  token (the prefill's), **TPOT**, the mean gap between the n - 1 tokens after it, and the
  **end-to-end** time, arrival to the last token: e2e = TTFT + (n - 1) TPOT, so a measured
  answer's TPOT is (e2e - TTFT) / (n - 1) (none for a one-token answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean


def tau(accept_lengths: list[int]) -> float | None:
    """Mean tokens emitted per verify step over pooled accept lengths; None without a verify step."""
    return float(mean(accept_lengths)) if accept_lengths else None


def requests_tau(requests) -> float | None:
    """τ of one request or several (``Request``s: their ``accept_lengths``), pooled; None without
    a verify step (vanilla's 1.0 is the caller's to say)."""
    requests = requests if isinstance(requests, (list, tuple)) else [requests]
    return tau([n for r in requests for n in r.accept_lengths])


def traces_tau(traces: list[dict]) -> float | None:
    """τ over the verify steps of step traces (``engine/trace.py``: every step but a prefill)."""
    return tau([t["accept_length"] for t in traces if t["kind"] != "prefill"])


def speedup(tokens_per_s: float, base_tokens_per_s: float) -> float:
    """How many times as fast as the baseline."""
    if base_tokens_per_s <= 0:
        raise ValueError(f"the baseline's tokens/s must be > 0, got {base_tokens_per_s}")
    return tokens_per_s / base_tokens_per_s


def predicted_speedup(tau: float, verify_ms: float, draft_ms: float, decode_ms: float) -> float:
    """Tokens per ms of a step (τ / (draft + verify)) over plain decoding's (1 / decode)."""
    return tau * decode_ms / (draft_ms + verify_ms)


def tpot_ms(*, ttft_ms: float, e2e_ms: float, tokens: int) -> float | None:
    """A measured answer's time per output token after the first: (e2e - TTFT) / (tokens - 1);
    None for a one-token answer."""
    return (e2e_ms - ttft_ms) / (tokens - 1) if tokens > 1 else None


@dataclass(frozen=True)
class Latency:
    """An answer's time to the first token and time per output token after it, in ms."""

    ttft_ms: float
    tpot_ms: float

    def e2e_ms(self, tokens: int) -> float:
        """End-to-end ms of an answer of ``tokens`` tokens (the first from the prefill)."""
        return self.ttft_ms + (tokens - 1) * self.tpot_ms
