"""Where a decode step's time goes, and what that says about the cost model's prediction: two
tables of the benchmark report, laid out from what ``suite.py`` recorded (each engine method's
``step_profile``, the engine's own phase times summed over its turns: ``engine/timings.py``).

The first splits each method's decode step into the target's forward (decode or verify), its
logits, the draft (extend and tree levels), the tree build, the accept walk (or a plain step's
sampling), the commit and ``other`` (the step less its phases: admission, the policy's choice,
the loop between phases, and the attribution of the step's stop cause), with the share of the
step spent outside the target (forward and logits).

The second accounts for the gap between the cost model's predicted speedup and the measured
one in two measured steps: the model's step (``cost_model.StepCost.predict``, with the step cost
of the method's own draft source: ``report.predicted_rows``) against the step the engine
measured during the very turns (the model's error, part by part), then that measured step's
speedup, τ × plain step / speculative step, against tokens/s over whole turns (what a step does
not hold: each turn's prefill and first token, and the draft's catch-up over the prompt at the
first speculative step).
"""

from __future__ import annotations

PHASES = (("forward", ("decode_ms", "verify_ms")), ("logits", ("logits_ms",)),
          ("draft", ("draft_extend_ms", "draft_tree_ms")), ("build", ("build_ms",)),
          ("accept", ("accept_ms", "sample_ms")), ("commit", ("commit_ms",)), ("other", ("other_ms", "stops_ms")))


def decode_parts(profile: dict) -> dict | None:
    """One method's decode step, mean ms per part (``PHASES``), from its ``step_profile``: the
    setting that ran the most steps besides the prefill (a fixed method runs one); None without one."""
    settings = [v for k, v in profile.items() if k != "prefill"]
    if not settings:
        return None
    s = max(settings, key=lambda v: v["steps"])
    parts = {name: sum(s.get(k, 0.0) for k in keys) for name, keys in PHASES}
    target = parts["forward"] + parts["logits"]
    return {"steps": s["steps"], **parts, "step": s["step_ms"],
            "outside_target": (s["step_ms"] - target) / s["step_ms"] if s["step_ms"] else 0.0,
            "prefill": profile.get("prefill", {}).get("step_ms")}


def profile_table(result: dict) -> str:
    rows = [(name, decode_parts(s["step_profile"])) for name, s in result["summary"].items()
            if s.get("step_profile")]
    rows = [(name, p) for name, p in rows if p is not None]
    if not rows:
        return "(no phase times in this run: its records predate them)"
    out = ["| method | steps | forward | logits | draft | build | accept | commit | other | step ms | "
           "outside the target | prefill ms |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in rows:
        prefill = "–" if p["prefill"] is None else f"{p['prefill']:.0f}"
        out.append(f"| `{name}` | {p['steps']} | " + " | ".join(f"{p[k]:.1f}" for k, _ in PHASES) +
                   f" | {p['step']:.1f} | {p['outside_target']:.0%} | {prefill} |")
    out += ["", "Mean ms per decode step, from the engine's own phase clocks during the timed turns of every round "
            "(`engine/timings.py`; steps: over all of them; prefill steps apart, in the last column: mean ms per "
            "prefill). forward: the "
            "target's forward over the step's tokens (1, or the verify tree); logits: its LM head; draft: the "
            "draft's extend and tree levels; accept: the accept walk (a plain step: sampling); other: the step less "
            "its phases, and the attribution of each step's stop cause. Outside the target: the step's share that "
            "is neither the forward nor the logits."]
    return "\n".join(out)


def gap_rows(result: dict, predicted: list[dict]) -> list[dict]:
    """Per method of ``predicted`` (``report.predicted_rows``): the model's step beside the step
    measured in the run, and the speedup each implies, beside the measured one."""
    summary = result["summary"]
    plain = decode_parts(summary.get("vanilla", {}).get("step_profile") or {})
    if plain is None:
        return []
    out = []
    for row in predicted:
        spec = decode_parts(summary[row["method"]].get("step_profile") or {})
        if spec is None:
            continue
        step_speedup = row["tau"] * plain["step"] / spec["step"]
        out.append({"method": row["method"], "tau": row["tau"], "model_step": row["step_ms"],
                    "model_verify": row["verify_ms"], "model_draft": row["draft_extend_ms"] + row["draft_levels_ms"],
                    "model_overhead": row["overhead_ms"], "step": spec["step"], "nodes": row.get("nodes"),
                    "target": spec["forward"] + spec["logits"], "draft": spec["draft"],
                    "rest": spec["step"] - spec["forward"] - spec["logits"] - spec["draft"],
                    "model_plain": row["plain_step_ms"], "plain": plain["step"],
                    "predicted": row["step_predicted"], "from_steps": round(step_speedup, 3), "measured": row["measured"]})
    return out


def gap_table(result: dict, predicted: list[dict]) -> str:
    rows = gap_rows(result, predicted)
    if not rows:
        return "(no phase times for vanilla and a speculative method in this run)"
    out = ["| method | τ | model step: verify + draft + overhead | measured step: target + draft + rest | "
           "plain step, model / measured | model step × | × from measured steps | measured × (turns) |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r['method']}` | {r['tau']:.2f} | {r['model_verify']:.1f} + {r['model_draft']:.1f} + "
                   f"{r['model_overhead']:.1f} = {r['model_step']:.1f} | {r['target']:.1f} + {r['draft']:.1f} + "
                   f"{r['rest']:.1f} = {r['step']:.1f} | {r['model_plain']:.1f} / {r['plain']:.1f} | "
                   f"{r['predicted']:.2f}x | {r['from_steps']:.2f}x | {r['measured']:.2f}x |")
    model_gap = [r["from_steps"] - r["predicted"] for r in rows]
    turn_gap = [r["measured"] - r["from_steps"] for r in rows]
    out += ["", "ms per decode step; the model's steps, plain and speculative, are each row's own step cost (its "
            "draft source's, named under the table above). Model step × = τ × the model's plain step / its "
            "speculative step. × from measured steps = τ × measured plain step / "
            "measured speculative step: what the engine's own step times give at the run's τ. "
            f"Between the model and the measured steps: {_span(model_gap)} (the model's error, part by part in "
            f"the step columns); between the measured steps and whole turns: {_span(turn_gap)} (each turn's "
            "prefill and first token, and the draft's catch-up over the prompt, which a decode step does not hold, "
            "and the benchmark's speed, the mean over questions of each one's tokens/s: a question a method "
            "drafts well, at a high τ, counts as much as a slow one, while the steps pool every question's)."]
    bracket = verify_bracket(result, rows)
    return "\n".join(out + (["", bracket] if bracket else []))


def verify_bracket(result: dict, rows: list[dict]) -> str | None:
    """Whether this run's own verify curve (``result["costs"]``: timed at the run's start, its
    range the fastest and slowest repeat) holds the target's part of each measured step (forward
    and logits, at the tokens the method verified; plain decoding at one token), and whether the
    model's verify lies inside that range: a sentence, computed, that says which part of the
    model's error is the machine's speed between two measurements and which the curve does not
    hold at all. None where the run has no such curve or no rows."""
    from workbench.cost_model import Curve
    from workbench.measure.probe import probed_curve

    probes = result.get("probes") or []
    verify = (result.get("costs") or {}).get("verify") or []
    if not rows or not (probes or verify and all("lo" in r for r in verify)):
        return None
    curve = probed_curve(probes) if probes else Curve.from_rows(verify)
    within = lambda ms, n: curve.range_at(n)[0] <= ms <= curve.range_at(n)[1]  # noqa: E731
    held = [r for r in rows if within(r["target"], r["nodes"])]
    over = [r for r in rows if r["target"] > curve.range_at(r["nodes"])[1]]
    model_in = [r for r in rows if within(r["model_verify"], r["nodes"])]
    vanilla = decode_parts(result["summary"]["vanilla"]["step_profile"])  # gap_rows' rows exist only with it
    plain = vanilla["forward"] + vanilla["logits"]
    lo1, hi1 = curve.range_at(1)
    which = (f"The verify of the run's {len(probes)} probes (one after each question's turn of the methods, after "
             "its prompt; the range is the fastest and slowest probe)" if probes else
             f"This run's own verify curve (the table \"Verify cost\" above: timed at the run's start, after a "
             f"{result['costs']['prefix_len']}-token prefix; its range is the fastest and slowest repeat)")
    said = (f"{which} holds the engine's target part (forward and logits, at the tokens each method verified) in "
            f"{len(held)} of {len(rows)} speculative rows, and plain decoding's ({plain:.1f} ms against "
            f"{lo1:.1f}–{hi1:.1f} at one token) {'too' if lo1 <= plain <= hi1 else 'not'}; "
            + ("the model's verify is the probes' median at one token and, at more, that plus the median of each "
               "probe's own difference from its one-token forward (`probe._curve`)." if probes else
               f"the model's verify, from its step cost's own measurement, lies inside that range in "
               f"{len(model_in)} of {len(rows)}."))
    if over:
        said += (" Above the range: " + ", ".join(
            f"`{r['method']}` {r['target']:.1f} ms at {r['nodes']:.0f} tokens (range "
            f"{curve.range_at(r['nodes'])[0]:.1f}–{curve.range_at(r['nodes'])[1]:.1f})" for r in over) +
            ": in the engine's steps over the turns these verifies cost more than the same forward timed alone at "
            "the run's start, beyond the spread of its repeats (the turns run later, and at contexts longer than "
            "the curve's prefix by the prompt and the tokens emitted so far).")
    else:
        said += (" Every step's verify is a forward this machine ran at that speed during the run: the model's "
                 "verify error is the machine's speed between its measurement and this run, not a part of the step "
                 "the model leaves out.")
    return said



def _span(xs: list[float]) -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:+.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:+.2f} to {hi:+.2f}"
