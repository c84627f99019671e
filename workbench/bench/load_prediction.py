"""The load report's predictions: what the one cost model (``workbench/cost_model.py``) says each
closed-loop run is worth, beside what the run measured, and the gap split into measured parts.

For each closed-loop row of a policy with one setting, at the row's τ and mean running batch B,
its verify priced at the tokens the run's speculative steps verified (``LoadResult.nodes``: a
tree the n-gram lookup filled in part is a smaller verify than ``num_draft_tokens``):

- **decode steps alone**: ``StepCost.predict``, B·τ tokens per step(B), as if the batch did
  nothing but decode;
- **with prefill**: ``StepCost.closed_loop`` over the run's requests, their prompt and output
  lengths: each one's share of the decode steps plus its prefill step and, under a speculative
  setting, the draft's catch-up over its prompt, which hold the whole batch up.

The gap is then split in measured parts. The engine's own profile of the run
(``engine/timings.py``'s ``StepProfile``, setting ``prefill``) holds the time its prefill steps
took; the rest of the run's wall time is its decode steps (a closed loop never waits for an
arrival). With the measured prefill in the model's place, what remains is the decode steps'
error: the steps where the batch was smaller or larger than its mean, and what a step under load
costs beyond the model. A figure over several rounds is the median of the rounds.

**The machine's pace** is the last measured part: the step cost was measured once and cached, and
these two cores run the same forward up to twice as slow from one hour to the next. So the run
times the step cost's own forwards (``PACE_SIZES`` tokens after its prefix) at its start and at
its end (``machine_pace``); their time over the step cost's is the pace (> 1: slower now). The
model's decode steps (and the draft's catch-up) times the pace at the start and at the end, with
the measured prefill beside them, is what the model gives at the run's speed, a range where the
two differ.
"""

from __future__ import annotations

from statistics import median

from workbench.cost_model import StepCost


def predicted(rows: list[dict], policies, models: dict[str, StepCost], *, runs: dict,
              prompts: list[list[int]]) -> list[dict]:
    """One prediction per closed-loop row of a policy with one setting (``policies``:
    ``NamedPolicy``s), each priced by ``models[policy]``, its own draft source's step cost
    (``load_run.report_costs``; a policy without one is left out). ``runs``: (mode, load, policy)
    -> that row's records, one per round (``LoadResult.record``); ``prompts``: the load's prompts
    as token ids (a record's requests name theirs by ``prompt_index``)."""
    one = {p.name: p.settings()[0] for p in policies if len(p.settings()) == 1}
    out = []
    for r in rows:
        spec, model = one.get(r["policy"]), models.get(r["policy"])
        if r["mode"] != "closed" or spec is None or model is None or r["mean_batch"] is None \
                or r["throughput_tok_s"] is None:
            continue
        if spec.speculative and r["tau"] is None:
            continue
        out.append(row_prediction(r, spec, model, recs=runs[(r["mode"], r["load"], r["policy"])], prompts=prompts))
    return out


def row_prediction(row: dict, spec, model: StepCost, *, recs: list[dict], prompts: list[list[int]]) -> dict:
    """The model's figures for one row beside the run's (module docstring): tokens/s from the
    decode steps alone and with every request's prefill; ms over the run, part by part, the
    model's and the measured (None where the records kept no engine profile); and tokens/s with
    the measured prefill in the model's place."""
    requests = recs[0]["requests"]  # greedy: every round's requests emit the same tokens
    loop = model.closed_loop(spec, row["tau"], row["mean_batch"],
                             prompt_lens=[len(prompts[q["prompt_index"]]) for q in requests],
                             output_lens=[len(q["output_ids"]) for q in requests], nodes=row.get("nodes"))
    prefills = [prefill_ms(rec) for rec in recs]
    known = None not in prefills
    measured_prefill = median(prefills) if known else None
    decode = median(rec["seconds"] * 1e3 - p for rec, p in zip(recs, prefills)) if known else None
    swapped = None if not known else loop.tokens / (measured_prefill + loop.decode_ms + loop.catch_up_ms) * 1e3
    spread = row["spreads"]["throughput_tok_s"]
    r2 = lambda x: None if x is None else round(x, 2)  # noqa: E731
    return {"policy": row["policy"], "draft": spec.draft.name if spec.speculative else "no draft",
            "tokens": loop.tokens, "load": row["load"], "batch": row["mean_batch"], "tau": row["tau"],
            "nodes": row.get("nodes") if spec.speculative else None,
            "step_ms": r2(loop.step.parts.total_ms), "predicted_tok_s": r2(loop.step.tokens_per_s),
            "closed_loop_tok_s": r2(loop.tokens_per_s), "prefill_priced": loop.prefill_priced,
            "measured_tok_s": row["throughput_tok_s"], "measured_range": [spread["low"], spread["high"]],
            "model_ms": {"prefill": r2(loop.prefill_ms), "catch_up": r2(loop.catch_up_ms),
                         "decode": r2(loop.decode_ms)},
            "measured_ms": {"prefill": r2(measured_prefill), "decode": r2(decode)},
            "with_measured_prefill_tok_s": r2(swapped)}


def prefill_ms(record: dict) -> float | None:
    """The ms a run's prefill steps took, from the engine's profile in its record (None: a record
    kept before runs kept their profile)."""
    profile = record.get("profile")
    if profile is None:
        return None
    return profile["prefill"]["wall_ms"] if "prefill" in profile else 0.0


PACE_SIZES = (1, 4)  # tokens of the forwards a run times at its start and end against its step cost's


def machine_pace(target, cost: StepCost) -> dict:
    """How fast this machine runs the step cost's forwards now (module docstring): each of
    ``PACE_SIZES`` tokens after the step cost's prefix, median of five, and its ratio to the step
    cost's figure; ``pace``, the median ratio (> 1: slower than when the step cost was measured)."""
    from workbench.measure.cost import measure_verify_cost
    from workbench.measure.step_cost import PREFIX

    rows = measure_verify_cost(target, sizes=PACE_SIZES, prefix_len=PREFIX, repeats=5, warmup=2)
    ratios = [r["ms"] / cost.verify_ms(r["tokens"]) for r in rows]
    return {"ms": [[r["tokens"], r["ms"]] for r in rows], "pace": round(median(ratios), 3)}


def at_pace(predicted_rows: list[dict], paces: list[float]) -> list[dict]:
    """Each row's tokens/s at the run's pace (module docstring): its tokens over the measured
    prefill plus the model's decode steps and catch-up times the pace, the lowest and highest over
    ``paces`` (the start's and the end's), and whether the measured range holds any of it. Rows
    without a measured prefill are left out."""
    out = []
    for r in predicted_rows:
        if r["measured_ms"]["prefill"] is None or not paces:
            continue
        model = r["model_ms"]["decode"] + r["model_ms"]["catch_up"]
        values = sorted(r["tokens"] / (r["measured_ms"]["prefill"] + p * model) * 1e3 for p in paces)
        lo, hi = r["measured_range"]
        out.append({"policy": r["policy"], "load": r["load"], "low": round(values[0], 2), "high": round(values[-1], 2),
                    "inside": values[0] <= hi and values[-1] >= lo})
    return out

