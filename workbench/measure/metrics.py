"""The benchmark's numbers, from per-question records: plain Python, no torch, unit-tested.

A record is one question run by one method: ``question_id``, ``task``, ``new_tokens`` and
``seconds`` (summed over the turns run), ``output_ids`` (one list per turn) and, for speculative
methods, ``accept_lengths`` and ``drafts_accepted`` (one list per turn, one entry per verify step:
the tokens it emitted, n + 1 unless the turn's end cut it, and the drafts n its walk accepted).
τ reads the first (so each turn's steps add up to its output but the prefill's token); per-depth
acceptance reads the second, since a cut step's walk still tried every depth it reached.

Speedup, Spec-Bench style (``evaluation/speed.py``): per question, tokens/s = new tokens over
seconds, both summed over turns; a method's speed is the **mean over questions** of that; the
speedup is the method's speed over the baseline's, on the same questions. The mean of the
per-question ratios is kept beside it: it weighs every question alike instead of favouring
the fast ones, and the two differ when speed varies a lot between questions.
"""

from __future__ import annotations

from statistics import mean

from workbench.engine.timings import StepProfile
from workbench.metrics import serving_metrics, speedup as _ratio, stop_counts, tau  # noqa: F401 - tau is API


def tokens_per_s(rec: dict) -> float:
    return rec["new_tokens"] / max(rec["seconds"], 1e-9)


def speed(records: list[dict]) -> float:
    """Mean over questions of tokens/s (Spec-Bench's ``np.array(speeds).mean()``)."""
    return mean(tokens_per_s(r) for r in records)


def _paired(records: list[dict], base: list[dict]) -> tuple[list[dict], list[dict]]:
    by_id = {r["question_id"]: r for r in base}
    pairs = [(r, by_id[r["question_id"]]) for r in records if r["question_id"] in by_id]
    if not pairs:
        raise ValueError("no question was run by both the method and the baseline")
    return [p[0] for p in pairs], [p[1] for p in pairs]


def speedup(records: list[dict], base: list[dict]) -> float:
    """Spec-Bench speedup: mean tokens/s of the method over the baseline's, same questions."""
    mine, theirs = _paired(records, base)
    return _ratio(speed(mine), speed(theirs))


def speedup_mean_of_ratios(records: list[dict], base: list[dict]) -> float:
    """Mean over questions of (method tokens/s / baseline tokens/s)."""
    mine, theirs = _paired(records, base)
    return mean(_ratio(tokens_per_s(a), tokens_per_s(b)) for a, b in zip(mine, theirs))


def _pooled(records: list[dict], key: str, first_turn_only: bool) -> list[int]:
    out: list[int] = []
    for r in records:
        turns = r.get(key) or []
        for steps in turns[:1] if first_turn_only else turns:
            out.extend(steps)
    return out


def accept_lengths(records: list[dict], first_turn_only: bool = False) -> list[int]:
    """Every verify step's accept length (tokens it emitted), pooled over questions (and turns)."""
    return _pooled(records, "accept_lengths", first_turn_only)


def serving_summary(records: list[dict], num_steps: int) -> dict:
    """vLLM's metrics (``workbench/metrics.py``, without the per-step lists) and the verify
    steps per stop cause (``engine/stops.py``), pooled over questions and turns: {"vllm": ...,
    "stop_causes": ...}; {} for records without the per-step counts (a journal older than them)."""
    if not records or any("drafts_verified" not in r for r in records):
        return {}
    m = serving_metrics(drafts_accepted(records), _pooled(records, "drafts_verified", False), num_steps)
    out = {"stop_causes": stop_counts(_pooled(records, "stop_causes", False))}
    if m is not None:
        out["vllm"] = {k: v for k, v in m.as_dict().items() if not k.startswith("per_step")}
    return out


def drafts_accepted(records: list[dict], first_turn_only: bool = False) -> list[int]:
    """Every verify step's accepted drafts n (the walk's, cut or not), pooled over questions (and turns)."""
    return _pooled(records, "drafts_accepted", first_turn_only)


def per_depth_acceptance(accepted: list[int], num_steps: int) -> list[float | None]:
    """P(accept at depth k | depth k-1 accepted), k = 1..num_steps, from each step's accepted drafts.

    A step whose walk accepted n drafts reached depth n (the root is depth 0, always "accepted").
    Among the steps that reached depth k - 1, the share that reached depth k. None where no step
    reached depth k - 1. A tree without a node at depth k counts as a miss there.
    """
    reached = [sum(1 for n in accepted if n >= k) for k in range(num_steps + 1)]
    return [reached[k] / reached[k - 1] if reached[k - 1] else None for k in range(1, num_steps + 1)]


def equal_fraction(records: list[dict], base: list[dict]) -> float:
    """Share of questions whose output ids (every turn) equal the baseline's."""
    mine, theirs = _paired(records, base)
    return sum(a["output_ids"] == b["output_ids"] for a, b in zip(mine, theirs)) / len(mine)


def by_task(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["task"], []).append(r)
    return out


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values``, linear between the two nearest ranks (numpy's
    default, as vLLM's serving benchmark reports p50 / p90); None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is in 0..100, got {q}")
    xs = sorted(values)
    if not xs:
        return None
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def step_profile(records: list[dict]) -> dict[str, dict]:
    """The engine's phase times (``engine/timings.py``) over every record that holds them, per
    setting (``"prefill"``, ``"off"``, ``"eagle2:4/3/2"``, ...): steps, and mean ms per step of
    each phase, of ``other`` and of the whole step."""
    total = StepProfile()
    for r in records:
        if "profile" in r:
            total.merge(StepProfile.from_json(r["profile"]))
    return total.per_step()
