"""Calibration: does the draft's confidence predict what the target accepts?

EAGLE-2 builds its tree from the draft's path scores because, it observes, a node's draft
confidence tracks how often the target accepts it. This file measures that on step traces:
pure functions from traces to a JSON-ready table (``viz/calibration.py`` draws it). Every
**verified** node counts (the tree's nodes but the root; dropped candidates were never
verified). Per node:

==============  ==============================================================================
``prob``        draft probability given its parent (the head's softmax at the parent)
``score``       path score: the product of ``prob`` from the root down
``tried``       its parent was accepted (the root always is): the walk reached its parent, so
                the target's verdict on it is known
``accepted``    on the accepted path (so its parent was accepted too: accepted implies tried)
==============  ==============================================================================

Two rates per bin, each against the confidence it should match:

* ``P(accept | tried)`` against ``prob``: the draft's probability is a conditional claim, "if
  the walk gets to my parent, the target picks me";
* ``P(accept)`` (over all verified nodes) against ``score``: the path score is the product of
  those conditionals, a claim about the whole path from the root.

A perfectly calibrated draft puts both on the diagonal. Per depth k, ``reach`` is the fraction
of steps that accepted a node at depth k among those that accepted one at depth k - 1 (the
glossary's per-depth rate).
"""

from __future__ import annotations

BINS = 10


def calibration_records(traces: list[dict]) -> list[dict]:
    """One row per verified node of every speculative step trace: run, step, request, method,
    node, depth, prob, score, tried, accepted. ``traces`` may hold several runs one after the
    other: a run starts at a prefill trace of a request already seen in the current run."""
    rows, run, prefilled = [], 0, set()
    for t in traces:
        if t.get("kind") == "prefill":
            if t["request"] in prefilled:
                run, prefilled = run + 1, set()
            prefilled.add(t["request"])
        if t.get("kind") != "spec":
            continue
        path = set(t["accept"]["path"])
        for n in t["tree"]["nodes"][1:]:
            rows.append({"run": run, "step": t["step"], "request": t["request"], "method": t.get("method"),
                         "node": n["node"],
                         "depth": n["depth"], "prob": n["prob"], "score": n["score"],
                         "tried": n["parent"] in path, "accepted": n["node"] in path})
    return rows


def _bins(rows: list[dict], key: str, bins: int) -> list[dict]:
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [r for r in rows if lo <= r[key] < hi or (b == bins - 1 and r[key] == 1.0)]
        acc = sum(r["accepted"] for r in inside)
        out.append({"lo": lo, "hi": hi, "count": len(inside), "accepted": acc,
                    "mean_confidence": _mean([r[key] for r in inside]),
                    "rate": acc / len(inside) if inside else None})
    return out


def _ece(bins: list[dict], total: int) -> float | None:
    """Expected calibration error: count-weighted mean |rate - mean confidence| over the bins."""
    if not total:
        return None
    return sum(b["count"] * abs(b["rate"] - b["mean_confidence"]) for b in bins if b["count"]) / total


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def per_depth(rows: list[dict], traces_steps: dict[tuple, set[int]]) -> list[dict]:
    """Per depth: nodes, tried, accepted, P(accept | tried), P(accept), mean prob and score, and
    ``reach`` = P(a node at depth k is accepted | one at depth k - 1 was)."""
    out = []
    for d in sorted({r["depth"] for r in rows}):
        at = [r for r in rows if r["depth"] == d]
        tried = [r for r in at if r["tried"]]
        acc = sum(r["accepted"] for r in at)
        before = sum(1 for depths in traces_steps.values() if d - 1 == 0 or d - 1 in depths)
        reached = sum(1 for depths in traces_steps.values() if d in depths)
        out.append({"depth": d, "nodes": len(at), "tried": len(tried), "accepted": acc,
                    "p_accept_given_tried": acc / len(tried) if tried else None,
                    "p_accept": acc / len(at), "mean_prob": _mean([r["prob"] for r in at]),
                    "mean_score": _mean([r["score"] for r in at]),
                    "reach": reached / before if before else None})
    return out


def calibration_table(traces: list[dict], bins: int = BINS) -> dict:
    """Traces -> {summary, prob_bins (vs P(accept | tried)), score_bins (vs P(accept)), depths}.
    Bins split [0, 1] into ``bins`` equal intervals; empty bins have ``rate`` None."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    rows = calibration_records(traces)
    tried = [r for r in rows if r["tried"]]
    steps: dict[tuple, set[int]] = {}  # (run, step, request) -> depths with an accepted node
    for r in rows:
        key = (r["run"], r["step"], r["request"])
        steps.setdefault(key, set())
        if r["accepted"]:
            steps[key].add(r["depth"])
    prob_bins, score_bins = _bins(tried, "prob", bins), _bins(rows, "score", bins)
    accepted = sum(r["accepted"] for r in rows)
    return {
        "summary": {"steps": len(steps), "nodes": len(rows), "tried": len(tried), "accepted": accepted,
                    "p_accept_given_tried": accepted / len(tried) if tried else None,
                    "p_accept": accepted / len(rows) if rows else None,
                    "ece_prob": _ece(prob_bins, len(tried)), "ece_score": _ece(score_bins, len(rows)),
                    "methods": sorted({r["method"] for r in rows if r["method"]})},
        "prob_bins": prob_bins,
        "score_bins": score_bins,
        "depths": per_depth(rows, steps),
    }
