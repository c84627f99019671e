"""The load report's predictions: what the one cost model (``workbench/cost_model.py``) says each
closed-loop run is worth, beside what the run measured, and the gap split into measured parts.

For each closed-loop row of a policy with one setting, at the row's τ and mean running batch B,
its verify priced at the tokens the run's speculative steps verified (``LoadResult.nodes``: a
tree the n-gram lookup filled in part is a smaller verify than ``num_draft_tokens``):

- **decode steps alone**: ``StepCost.predict``, B·τ tokens per step(B), as if the batch did
  nothing but decode;
- **with prefill**: ``StepCost.closed_loop`` over the run's requests, their prompt and output
  lengths: each one's share of the decode steps plus its prefill and, under a speculative
  setting, the draft's catch-up over its prompt, which hold the whole batch up. The requests'
  prefills are priced in as many steps as the run admitted them in (the engine's profile counts
  them; the median over the rounds): a closed loop admits its first requests in one step, and
  each prompt beyond the first of a step saves what the probes measured (``prefill_joined``).

The gap is then split in measured parts. The engine's own profile of the run
(``engine/timings.py``'s ``StepProfile``, setting ``prefill``) holds the time its prefill steps
took; the rest of the run's wall time is its decode steps (a closed loop never waits for an
arrival). With the measured prefill in the model's place, what remains is the decode steps'
error: the steps where the batch was smaller or larger than its mean, and what a step under load
costs beyond the model. A figure over several rounds is the median of the rounds.

**The machine's pace** is taken out: the step cost was measured once and cached, and these two
cores run the same forward a fifth slower or faster from one minute to the next. So each round of
a closed load gives one turn to a probe of the target's part (``measure/probe.py``: the prefill,
the verifies at the load's batches and the head's forwards), and each row of that load is priced
by its step cost with those parts the probes' medians (``probe.probed``), its overhead its own.
At a load of more than one request each probe also times the batch's own forwards (that many
requests after the run's prompts, for each count of new tokens a request), whose time over what
the curves and the context term say of them scales the row's forwards at the counts its requests
verified (``StepCost.batched_tokens``): a batch of eight ran its decode steps 18 %
slower in one run than in another an hour before, while the one-sequence probes beside it did not
(docs/benchmarks.md, "Speculation under load").
"""

from __future__ import annotations

from statistics import median

from workbench.cost_model import StepCost


def predicted(rows: list[dict], policies, models: dict[str, StepCost], *, runs: dict,
              prompts: list[list[int]], probes: dict | None = None) -> list[dict]:
    """One prediction per closed-loop row of a policy with one setting (``policies``:
    ``NamedPolicy``s), each priced by ``models[policy]``, its own draft source's step cost
    (``load_run.report_costs``; a policy without one is left out), with the parts the probes of
    its load timed in place (``probes``: (mode, load) -> that load's probes; none: as cached).
    ``runs``: (mode, load, policy) -> that row's records, one per round (``LoadResult.record``);
    ``prompts``: the load's prompts as token ids (a record's requests name theirs by
    ``prompt_index``)."""
    from workbench.measure.probe import probed

    one = {p.name: p.settings()[0] for p in policies if len(p.settings()) == 1}
    probes = probes or {}
    out = []
    for r in rows:
        spec, model = one.get(r["policy"]), models.get(r["policy"])
        if r["mode"] != "closed" or spec is None or model is None or r["mean_batch"] is None \
                or r["throughput_tok_s"] is None:
            continue
        if spec.speculative and r["tau"] is None:
            continue
        found = probes.get((r["mode"], r["load"]))
        if found:
            model = probed(model, found, head=spec.speculative and spec.draft.needs.head)
        row = row_prediction(r, spec, model, recs=runs[(r["mode"], r["load"], r["policy"])], prompts=prompts)
        out.append({**row, "probes": len(found or ())})
    return out


def row_prediction(row: dict, spec, model: StepCost, *, recs: list[dict], prompts: list[list[int]]) -> dict:
    """The model's figures for one row beside the run's (module docstring): tokens/s from the
    decode steps alone and with every request's prefill; ms over the run, part by part, the
    model's and the measured (None where the records kept no engine profile); and tokens/s with
    the measured prefill in the model's place."""
    requests = recs[0]["requests"]  # greedy: every round's requests emit the same tokens
    counted = [prefill_steps(rec) for rec in recs]
    steps = None if None in counted else median(counted)
    loop = model.closed_loop(spec, row["tau"], row["mean_batch"],
                             prompt_lens=[len(prompts[q["prompt_index"]]) for q in requests],
                             output_lens=[len(q["output_ids"]) for q in requests],
                             nodes=row.get("nodes_mix") or row.get("nodes"),
                             prefill_steps=steps)
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
            "prefill_steps": steps,
            "requests_prefilled": sum(1 for q in requests if q["output_ids"]), "prefill_saved_ms": r2(loop.prefill_saved_ms),
            "model_ms": {"prefill": r2(loop.prefill_ms), "catch_up": r2(loop.catch_up_ms),
                         "decode": r2(loop.decode_ms)},
            "measured_ms": {"prefill": r2(measured_prefill), "decode": r2(decode)},
            "with_measured_prefill_tok_s": r2(swapped), "step_parts": step_parts(loop.step.parts, recs, catch_up_ms=(
                loop.catch_up_ms * loop.step.parts.total_ms / loop.decode_ms if loop.decode_ms > 0 else 0.0)),
            "batch_pace": round(model.pace_of(spec, row["mean_batch"], row.get("nodes_mix") or row.get("nodes")), 3)}


def step_parts(parts, recs: list[dict], catch_up_ms: float = 0.0) -> dict | None:
    """A decode step of the row, part by part, ms, the model's (``parts``: ``StepParts`` at the
    row's mean batch) beside the engine's own clock (each round's profile of its one decode
    setting, per step, the median over the rounds): the target's forward and logits, the draft's
    extend and tree levels, and the rest of the step. ``catch_up_ms``: the model's draft catch-up
    over the prompts, a step's share (``LoopPrediction.catch_up_ms`` over its decode steps),
    added to its draft: the engine's draft clock holds the catch-up, run in each request's first
    speculative step. None where a record kept no profile or its policy ran more than one
    setting."""
    from workbench.engine.timings import target_ms

    measured = []
    for rec in recs:
        decode = [t for name, t in (rec.get("profile") or {}).items() if name != "prefill"]
        if len(decode) != 1 or not decode[0]["steps"]:
            return None
        t = decode[0]
        per = {k: v / t["steps"] for k, v in t["phases_ms"].items()}
        forward = target_ms(per)
        draft = per.get("draft_extend_ms", 0.0) + per.get("draft_tree_ms", 0.0)
        measured.append((forward, draft, t["wall_ms"] / t["steps"] - forward - draft))
    if not measured:
        return None
    r2 = lambda x: round(x, 2)  # noqa: E731
    return {"model": {"forward": r2(parts.verify_ms), "draft": r2(parts.draft_ms + catch_up_ms),
                      "rest": r2(parts.overhead_ms)},
            "measured": {k: r2(median(m[i] for m in measured)) for i, k in enumerate(("forward", "draft", "rest"))}}


def prefill_steps(record: dict) -> int | None:
    """How many prefill steps a run's requests were admitted in, from the engine's profile in its
    record (None: a record kept before runs kept their profile)."""
    profile = record.get("profile")
    if profile is None:
        return None
    return profile["prefill"]["steps"] if "prefill" in profile else None


def prefill_ms(record: dict) -> float | None:
    """The ms a run's prefill steps took, from the engine's profile in its record (None: a record
    kept before runs kept their profile)."""
    profile = record.get("profile")
    if profile is None:
        return None
    return profile["prefill"]["wall_ms"] if "prefill" in profile else 0.0
