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
- **the serving engines' metrics** (``ServingMetrics``), as vLLM defines them
  (``vllm/v1/spec_decode/metrics.py``; a step is observed only when it drafted something): over
  the verify steps that drafted, **num_drafts** (those steps), **num_draft_tokens** (the drafts
  they verified), **num_accepted_tokens**; **mean_acceptance_length** = 1 + accepted / drafts
  (the bonus counted, as τ, which also counts the steps that drafted nothing and only what was
  emitted); **draft_acceptance_rate** = accepted / drafted tokens; **per-position acceptance**:
  the share of steps that accepted at least k drafts (a tree's position is its depth);
  **acceptance_histogram**: steps per number of accepted drafts. On a tree the rate misleads:
  every verified sibling counts as drafted though a walk accepts one node per depth, so a wide
  tree's rate is low while its τ is high.
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
class ServingMetrics:
    """vLLM's speculative-decoding metrics over verify steps (see the module docstring)."""

    per_step: list[tuple[int, int]]  # (accepted, drafted) per verify step that drafted, in order
    positions: int  # the per-position vector's length: the deepest a step could accept (num_steps)

    @property
    def num_drafts(self) -> int:
        return len(self.per_step)

    @property
    def num_draft_tokens(self) -> int:
        return sum(d for _, d in self.per_step)

    @property
    def num_accepted_tokens(self) -> int:
        return sum(a for a, _ in self.per_step)

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + self.num_accepted_tokens / self.num_drafts

    @property
    def draft_acceptance_rate(self) -> float:
        """Accepted over drafted tokens: a tree's siblings count as drafted (it reads low for trees)."""
        return self.num_accepted_tokens / self.num_draft_tokens

    @property
    def acceptance_histogram(self) -> list[int]:
        """Steps by accepted drafts: entry k counts the steps that accepted exactly k."""
        counts = [0] * (self.positions + 1)
        for a, _ in self.per_step:
            counts[a] += 1
        return counts

    @property
    def per_position(self) -> list[float]:
        """Per position (depth) k = 1..positions: the share of steps that accepted at least k drafts."""
        return [sum(a >= k for a, _ in self.per_step) / self.num_drafts for k in range(1, self.positions + 1)]

    def as_dict(self, digits: int = 4) -> dict:
        """JSON-ready, vLLM's names."""
        return {"num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
                "num_accepted_tokens": self.num_accepted_tokens,
                "mean_acceptance_length": round(self.mean_acceptance_length, digits),
                "draft_acceptance_rate": round(self.draft_acceptance_rate, digits),
                "acceptance_histogram": self.acceptance_histogram,
                "per_position_acceptance": [round(x, digits) for x in self.per_position],
                "per_step_accepted": [a for a, _ in self.per_step], "per_step_drafted": [d for _, d in self.per_step]}


def serving_metrics(accepted: list[int], drafted: list[int], positions: int | None = None) -> ServingMetrics | None:
    """From per-step accepted and drafted counts (one entry per verify step; a step that drafted
    nothing is left out, as vLLM does); ``positions``: the deepest a step could accept (default:
    the most any step accepted). None when no step drafted."""
    if len(accepted) != len(drafted):
        raise ValueError(f"{len(accepted)} accepted counts but {len(drafted)} drafted counts: one of each per step")
    steps = [(a, d) for a, d in zip(accepted, drafted) if d > 0]
    if not steps:
        return None
    most = max(a for a, _ in steps)
    if positions is not None and positions < most:
        raise ValueError(f"a step accepted {most} drafts, more than the {positions} positions given")
    return ServingMetrics(per_step=steps, positions=most if positions is None else positions)


def requests_serving(requests, positions: int | None = None) -> ServingMetrics | None:
    """``serving_metrics`` of one request or several (their ``drafts_accepted``, ``drafts_verified``)."""
    requests = requests if isinstance(requests, (list, tuple)) else [requests]
    return serving_metrics([n for r in requests for n in r.drafts_accepted],
                           [n for r in requests for n in r.drafts_verified], positions)


def traces_serving(traces: list[dict]) -> ServingMetrics | None:
    """``serving_metrics`` of step traces (``engine/trace.py``: each speculative step's
    ``spec_decode`` counts); positions: the deepest tree among them."""
    spec = [t for t in traces if t["kind"] == "spec"]
    depth = max((n["depth"] for t in spec for n in t["tree"]["nodes"]), default=0)
    return serving_metrics([t["spec_decode"]["num_accepted_tokens"] for t in spec],
                           [t["spec_decode"]["num_draft_tokens"] for t in spec], depth or None)


def traces_stop_causes(traces: list[dict]) -> dict[str, int]:
    """Speculative steps per stop cause (``engine/stops.py``) in step traces, most frequent first."""
    return stop_counts([t["stop"]["cause"] for t in traces if "stop" in t])


def stop_counts(causes: list[str]) -> dict[str, int]:
    """Steps per stop cause from a list of causes (``Request.stop_causes``), most frequent first
    (ties in the order they first happened)."""
    counts: dict[str, int] = {}
    for c in causes:
        counts[c] = counts.get(c, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


@dataclass(frozen=True)
class Latency:
    """An answer's time to the first token and time per output token after it, in ms."""

    ttft_ms: float
    tpot_ms: float

    def e2e_ms(self, tokens: int) -> float:
        """End-to-end ms of an answer of ``tokens`` tokens (the first from the prefill)."""
        return self.ttft_ms + (tokens - 1) * self.tpot_ms
