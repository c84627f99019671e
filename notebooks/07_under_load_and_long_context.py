# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 7. Speculation under load and at long context
#
# Notebook 6 asked when speculation pays for one request at a short context. A server decodes many
# requests together, and some of them carry long prompts. With $B$ requests in a step the verify
# forward runs over $B(\gamma + 1)$ tokens instead of $\gamma + 1$, and the flat, memory-bound
# regime that makes a few extra verify tokens nearly free runs out sooner; at a long context every
# forward also reads the K/V cache of the whole prefix. This notebook predicts both from the same
# step cost as notebook 6 (`step_cost_for`: measured once per machine, threads and dtype, and
# cached, so it is the same measurement), through `StepCost.predict(setting, τ, batch)`, and sets
# each prediction beside a measurement: a stored load run for the batch, forwards timed here for
# the context.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="fp32")

# %%
import numpy as np
import plotly.graph_objects as go
import torch
from IPython.display import Markdown, display

from workbench.lessons import smoke
from workbench.lessons.machine import cpu_model
from workbench.lessons.predictions import memory_bound, step_cost
from workbench.lessons.settings import MAX_NEW_TOKENS, lesson_prompts
from workbench.lessons.takeaways import bend
from workbench.metrics import tau as pooled_tau

THREADS = f"{cpu_model()}, {wb.dtype_name}, {torch.get_num_threads()} torch thread{'s' * (torch.get_num_threads() != 1)}"
GAMMA = 3  # drafts per chain step, as in notebook 6
cost = step_cost(wb)  # notebook 6's step cost: cached, or measured now
chain = SpecConfig.linear(GAMMA)
prompts = lesson_prompts(wb)
runs = [wb.generate([ids], chain, SamplingParams(), smoke.new_tokens(MAX_NEW_TOKENS))[0][0] for ids in prompts.values()]
tau = pooled_tau([a for r in runs for a in r.accept_lengths])  # greedy: notebook 6's τ for the same chain and prompts
print(f"step cost: {cost.source}; measured {cost.measured}")
print(f"chain of {GAMMA}: τ = {tau:.2f} on {len(prompts)} Spec-Bench prompts ({', '.join(prompts)})")

# %% [markdown]
# ## A batch-size sweep
#
# With $B$ requests decoding together, a plain step is one forward over $B$ tokens and a chain
# step a verify over $B(\gamma + 1)$ tokens, the draft forwards over $B$ rows a level and the
# step's overhead for $B$ requests: `StepCost.predict(chain, τ, batch=B)` charges all of it. The
# sweep stops where $B(\gamma + 1)$ reaches the step cost's largest measured verify (a prediction
# past it would extend a slope, not read a measurement); the takeaway says where the speedup goes
# and whether the block passes the bend of the verify curve (notebook 6). The second curve is the
# same model with a verify of any size costing one decode step and no overhead (`memory_bound`):
# what a memory-bound device would give, an expectation for a GPU, not a measurement.

# %%
largest = cost.verify_curve.sizes[-1]
batches = [b for b in (1, 2, 4, 8, 16, 32, 64) if b * (GAMMA + 1) <= largest]  # never extrapolate
here = [cost.predict(chain, tau, b).speedup for b in batches]
flat = [memory_bound(cost).predict(chain, tau, b).speedup for b in batches]
knee = bend(cost.verify_curve.fit)
fig = go.Figure([go.Scatter(x=batches, y=here, mode="lines+markers", name="this machine (the step cost)"),
                 go.Scatter(x=batches, y=flat, mode="lines+markers", name="if verify were memory-bound")])
fig.add_hline(y=1, line_dash="dot", annotation_text="plain decoding", annotation_position="bottom left")
past = next((b for b in batches if knee and b * (GAMMA + 1) >= knee), None)  # first batch past the bend
if past is not None:
    span = [min(here + flat), max(here + flat)]  # a trace, not add_vline: shapes misplace on a log axis
    fig.add_scatter(x=[past, past], y=span, mode="lines", line=dict(dash="dash", color="grey"),
                    name=f"from batch {past}: B(γ + 1) ≥ {knee}, past the bend")
fig.update_layout(title=f"Predicted speedup of a chain of {GAMMA} vs batch size ({THREADS})", height=380,
                  xaxis=dict(type="log", title="batch size B", tickvals=batches), yaxis_title="speedup")
fig.show()

# %%
from workbench.lessons.takeaways import batch_sentence, trend

peak = batches[int(np.argmax(here))]
if peak in (batches[0], batches[-1]):
    shape = (f"it {trend(here[0], here[-1])} from {here[0]:.2f}× at batch 1 to {here[-1]:.2f}× at batch "
             f"{batches[-1]}")
else:
    shape = (f"it goes from {here[0]:.2f}× at batch 1 up to {max(here):.2f}× at batch {peak}, then to "
             f"{here[-1]:.2f}× at batch {batches[-1]}")
if past is None:
    where = ("The verify block B(γ + 1) never reaches a bend of the measured cost curve, so this sweep stays in "
             "one regime and cannot show where the speedup goes once the forward turns compute-bound.")
else:
    after = trend(here[batches.index(past)], here[-1])
    where = (f"The verify block B(γ + 1) passes the bend of the cost curve (N = {knee}) from batch {past} on; "
             f"from there to batch {batches[-1]} the prediction {after} "
             f"({here[batches.index(past)]:.2f}× → {here[-1]:.2f}×)"
             + (": the extra verify tokens now cost their share." if after == "shrinks" else
                ": it does not fall past the bend here, so this sweep does not show the speedup lost to a "
                "compute-bound forward."))
display(Markdown(
    f"**Takeaway.** On this machine {shape}; {batch_sentence(batches, here)}. {where} If verify were "
    f"memory-bound at every size (the GPU expectation, not measured here) it would be "
    f"{flat[0]:.2f}× at batch 1 and {flat[-1]:.2f}× at batch {batches[-1]}. At batch 1 notebook 6 sets the same "
    "model's prediction beside the clock, its forwards timed again by probes at the pace of its own runs: its "
    "predicted speedup differs from this one by what the machine's pace did between the two measurements."))

# %% [markdown]
# ## Measured under load
#
# The sweep above is a *prediction* from the step cost, for a batch that stays fixed.
# `python -m workbench.bench load` measures the real thing: requests that arrive while others
# run, each policy deciding speculation per step from the running batch, in a **closed loop**
# (a concurrency of $c$: $c$ requests in flight, a new one starting as one finishes) and an
# **open loop** (Poisson arrivals at a rate), every policy timed in the same interleaved rounds,
# each output checked equal to plain decoding (`off`). The policies: `off`; a chain of one draft
# `linear:1` and a fixed small tree `eagle2:4/3/2`, each at every batch (the run stores whichever
# fixed settings it was given); `adaptive`, which moves among a chain of 1, 4/3/2 and 8/5/4 by
# the acceptance it sees; `auto`, which picks per running batch the setting whose predicted
# tokens per second (this machine's measured step costs, a prior acceptance, corrected by the
# steps' own clock) is highest (`docs/benchmarks.md`, "Speculation under load"). This section
# reads the latest stored run, on the AVX-512 EPYC, `docs/bench/load-cpu-avx512.json`, and re-measures nothing:
# its machine and threads are printed first, and they may differ from this notebook's. Beside each
# fixed setting's measured tokens/s against `off` stands the run's own prediction, as its report
# prints it: the one cost model at the τ and mean running batch the run recorded, with each
# request's prefill (`StepCost.closed_loop`; the prefills in as many steps as the run admitted its
# requests in, since the engine prefills every newcomer of a step in one forward), priced by the
# step cost of the run's own machine.
# (The same command on the AVX2 EPYC: `docs/bench/load-cpu-avx2.md`; on the AVX-512 EPYC with 4 in
# flight, `adaptive` and an open loop, an earlier run: `docs/bench/load-cpu.md`.)

# %%
import json
from pathlib import Path

import workbench
from workbench.cpu_choices import cpu_kind
from workbench.timing import Spread
from workbench.viz.load import curves_figure

LOAD_RECORD = "docs/bench/load-cpu-avx512.json"
LOAD = json.loads((Path(workbench.__file__).resolve().parents[1] / LOAD_RECORD).read_text())
m = LOAD["machine"]
run_cpu = f"{m['cpu']} with {cpu_kind(set(m['simd']))}"
print(f"stored run: {run_cpu}, {m['cores']} cores, {LOAD['dtype']}, {LOAD['threads']} torch threads, "
      f"torch {m['torch']}, {LOAD['date'][:10]}; `{LOAD['command']}`")
print(f"{LOAD['settings']['prompt_count']} {LOAD['settings']['prompts']} prompts, "
      f"{LOAD['settings']['max_new_tokens']} new tokens each, {LOAD['settings']['rounds']} rounds")
print("every output equal to off:", all(r["equal_to_off"] for r in LOAD["rows"]))
curves_figure(LOAD["rows"], "closed").show()


def against_off(mode: str) -> dict[str, dict[float, Spread]]:
    """Each policy's tokens/s over off's at each load of one loop: median over median, the range
    from the extremes (conservative)."""
    rows = [r for r in LOAD["rows"] if r["mode"] == mode]
    tok = {(r["policy"], r["load"]): Spread(**r["spreads"]["throughput_tok_s"]) for r in rows}
    return {p: {load: tok[(p, load)].ratio(tok[("off", load)]) for (q, load) in tok if q == p}
            for p in dict.fromkeys(r["policy"] for r in rows) if p != "off"}


closed = against_off("closed")
print("\ntokens/s against off, closed loop (median, range):")
for p, by_load in closed.items():
    print(f"  {p:13s} " + "   ".join(f"c={load:g}: {s.median:.2f}x ({s.low:.2f}-{s.high:.2f})" for load, s in by_load.items()))

# %%
from workbench.lessons.takeaways import gap, gaps_sentence


def placed(s: Spread) -> str:
    return "clearly above off" if s.low > 1 else "clearly below off" if s.high < 1 else "level with off within noise"


predicted = {(r["policy"], r["load"]): r["closed_loop_tok_s"] for r in LOAD["predicted"]["rows"]}
probes = LOAD["predicted"].get("probes") or {}
priced_at = (f"the run's own step cost ({LOAD['predicted']['priced_by']['head']})"
             + (", its prefill, verify and head forwards read from the probes timed between the run's rounds ("
                + ", ".join(f"{found['count']} at c={load.split()[-1]}" for load, found in probes.items()) + ")"
                if probes else "")
             + (", at c > 1 the batch's forwards at the pace of its own forward timed in each probe there"
                if any(found.get("batch") for found in probes.values()) else "")
             + ", each request's prefill included (in as many steps as the run admitted them in"
             + (", each prompt sharing a step saving what the probes timed)," if any(
                 (found.get("batch") or {}).get("prefill_joined") for found in probes.values()) else "),"))
rows = [r for r in LOAD["predicted"]["rows"] if r.get("measured_range")]
in_tok_s = sum(r["measured_range"][0] <= r["closed_loop_tok_s"] <= r["measured_range"][1] for r in rows)
pairs = {f"{p} at c={load:g}": (tok_s / predicted[("off", load)], closed[p][load])
         for (p, load), tok_s in predicted.items() if p != "off" and ("off", load) in predicted}
for name, (p, s) in pairs.items():
    print(f"{name}: {gap(p, s)}")
loads = sorted(next(iter(closed.values())))
said = [f"at concurrency {c:g}, " + ", ".join(f"{p} is {placed(by_load[c])} ({by_load[c].median:.2f}×)"
                                           for p, by_load in closed.items()) for c in loads]
chosen = LOAD["settled"]["auto"]["batch"]
plain = [b for b, c in chosen.items() if c == "off"]
auto_said = (f"it decoded plainly at running batch {', '.join(plain)} and speculated at the others"
             if plain else "it speculated at every running batch size")
against_best = "; ".join(f"at concurrency {v['load']:g}, {v['throughput_tok_s']}" for v in LOAD["verdicts"]
                         if v["mode"] == "closed")
display(Markdown(
    f"**Takeaway (stored run, {run_cpu}, {LOAD['threads']} threads).** Under load, {'; '.join(said)} (each "
    "policy's range against `off`'s alone). The run's report weighs every policy against the best by median "
    f"instead, in tokens/s: {against_best}; a policy clear of `off` can still be level with the best. "
    f"Predicted from {priced_at} at each row's recorded τ and mean running batch, as a speedup over "
    "the model's own `off` at the same load: "
    + (gaps_sentence(pairs) + f" (in tokens/s, as the run's report counts, {in_tok_s} of {len(rows)} rows, "
       "`off` included: a speedup cancels what the model gets wrong for every policy alike)." if pairs
       else "the run stored no fixed setting to predict.")
    + f" Auto's choice per running batch (the setting it ran most there) was "
    f"{', '.join(f'{b}: {c}' for b, c in chosen.items())}: {auto_said}, each step by the measured "
    "cost of the verify over the batch's tokens against the drafts it expected to keep. A range that "
    "crosses 1× is not a finding; the full table, TTFT and the gap part by part are in "
    f"`{LOAD_RECORD.replace('.json', '.md')}`."))

# %% [markdown]
# ## A long context
#
# Every verify query attends the whole committed prefix, but the prefix's K/V is read once and
# shared by all nodes. The K/V of one token costs $2 \times \text{layers} \times \text{kv heads} \times \text{head dim}$ values;
# at some context length reading the K/V costs as much as reading the weights, and a decode step
# becomes memory-bound on the cache instead of the weights (the argument of MagicDec,
# [Chen et al. 2024](https://arxiv.org/abs/2408.11049), for speculation at long contexts and large
# batches). Three contexts, the step cost's prefix of `PREFIX` tokens, 1k and 4k, are timed in the
# same interleaved rounds; the shortest one's decode step is the step cost's first point measured
# a second time, and the two should agree within their ranges. The speedups in the table are
# **predicted** by `StepCost.predict` on the step cost with its verify replaced by the forwards
# timed at each context (`at_context`; the draft and the overhead as measured at the short one;
# the verify read as the decode step's median plus each round's own difference between the two,
# `timing.paired_points`, as the benchmarks' probes read theirs),
# with the τ measured above at the short context (a long prompt's own acceptance is not measured
# here, so no speedup is measured beside these).

# %%
from workbench.lessons.cost_curve import time_forwards, verify_forwards
from workbench.lessons.predictions import at_context
from workbench.lessons.takeaways import compare
from workbench.measure.step_cost import PREFIX
from workbench.timing import paired_points, spread

ROUNDS, REPEATS = 5, 3
cfg = wb.target.config
weight_bytes = sum(p.numel() for p in wb.target.parameters()) * wb.target.lm_head.weight.element_size()
kv_bytes = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * wb.target.lm_head.weight.element_size()
print(f"K/V per token: {kv_bytes / 1024:.1f} KiB; the cache outweighs the weights beyond "
      f"{weight_bytes / kv_bytes:,.0f} tokens (the model's context is {cfg.max_position_embeddings:,})")
CONTEXTS = (PREFIX, 1024, 4096)
context_forwards = {(P, n): f for P in CONTEXTS for n, f in verify_forwards(wb.target, (1, GAMMA + 1), P).items()}
timed = time_forwards(context_forwards, ROUNDS, REPEATS)  # per (context, tokens): one value per round
by_context = {key: spread(values) for key, values in timed.items()}
fig = go.Figure([
    go.Bar(x=[str(P) for P in CONTEXTS], y=[by_context[P, n].median for P in CONTEXTS], name=name,
           error_y=dict(type="data", symmetric=False, array=[by_context[P, n].high - by_context[P, n].median
                                                             for P in CONTEXTS],
                        arrayminus=[by_context[P, n].median - by_context[P, n].low for P in CONTEXTS]))
    for n, name in [(1, "decode (1 token)"), (GAMMA + 1, f"verify ({GAMMA + 1} tokens)")]
])
fig.update_layout(title=f"Forward cost vs committed context ({THREADS}; median and range of {ROUNDS} interleaved rounds)",
                  barmode="group", height=360,
                  xaxis_title="committed tokens before the forward", yaxis_title="ms")
fig.show()

# %%
short, long_ = CONTEXTS[0], CONTEXTS[-1]
# verify over decode, each round's own ratio: both forwards timed within a second of each other
ratio = {P: spread([v / d for d, v in zip(timed[P, 1], timed[P, GAMMA + 1])]) for P in CONTEXTS}
# the verify of each context as the model reads it: the decode median plus each round's own difference
paired = {P: dict(paired_points([{1: d, GAMMA + 1: v} for d, v in zip(timed[P, 1], timed[P, GAMMA + 1])]))
          for P in CONTEXTS}
growth = {n: by_context[long_, n].median / by_context[short, n].median for n in (1, GAMMA + 1)}
context_trend = {
    "below": ("relatively cheaper: the prefix is read once and shared by all nodes, so the part of the cost "
              "that grows with the context is not paid once per node"),
    "above": "relatively dearer: here each node's attention over the prefix adds up",
    "level within noise": "about as costly, relative to a decode step (level within noise)",
}[compare(ratio[long_], ratio[short])]
lo, hi = cost.verify_curve.range_at(1)
step_decode = Spread(cost.verify_ms(1), lo, hi, 3)
again = compare(by_context[short, 1], step_decode)
same = ("the two agree within their ranges" if again == "level within noise" else
        f"this one is {again} the step cost's beyond both ranges: the machine's speed moved between the two "
        "measurements, so compare costs within one figure, not across figures")
context_speedup = {P: at_context(cost, paired[P]).predict(chain, tau).speedup for P in CONTEXTS}
sweep_at_one = cost.predict(chain, tau, 1).speedup  # the sweep's batch 1: the step cost's own forwards
rows = [f"| {P:,} | {by_context[P, 1].median:.1f} ({by_context[P, 1].low:.1f}–{by_context[P, 1].high:.1f}) | "
        f"{paired[P][GAMMA + 1]:.1f} | {ratio[P].median:.2f} ({ratio[P].low:.2f}–{ratio[P].high:.2f}) | "
        f"{P * kv_bytes / weight_bytes:.2f} | {'weights' if P * kv_bytes < weight_bytes else 'K/V cache'} | "
        f"{context_speedup[P]:.2f}× |" for P in CONTEXTS]
display(Markdown(
    f"| committed tokens | decode ms (range) | verify of {GAMMA + 1} ms (paired) | verify / decode, each round's (range) | K/V bytes / weight "
    f"bytes | most bytes read | predicted speedup, chain of {GAMMA} (τ {tau:.2f}) |\n|---|---|---|---|---|---|---|\n"
    + "\n".join(rows) + f"\n\n({THREADS}; the draft's cost and the step's overhead are the step cost's, at the short context.)\n\n"
    f"**Takeaway.** At {long_:,} committed tokens a decode step costs {growth[1]:.2f}× what it costs at "
    f"{short}, and a verify over {GAMMA + 1} tokens {growth[GAMMA + 1]:.2f}× (medians); verify costs "
    f"{ratio[short].median:.2f}× a decode step at {short} (range {ratio[short].low:.2f}–{ratio[short].high:.2f}) "
    f"and {ratio[long_].median:.2f}× at {long_:,} (range {ratio[long_].low:.2f}–{ratio[long_].high:.2f}), so it "
    f"gets {context_trend}; the predicted speedup of the chain is "
    + ", ".join(f"{context_speedup[P]:.2f}× at {P:,}" for P in CONTEXTS)
    + f" (predicted only: a long prompt's τ and speed are not measured here). At {short} tokens the sweep above "
    f"predicts {sweep_at_one:.2f}× from the same model with the step cost's forwards (a verify of {GAMMA + 1} tokens "
    f"{cost.verify_ms(GAMMA + 1) - cost.verify_ms(1):.1f} ms over its decode step, measured {cost.measured}); this "
    f"table's {context_speedup[short]:.2f}× reads the forwards timed here ({paired[short][GAMMA + 1] - paired[short][1]:.1f} "
    "ms over, each round's own difference): one model, two measurements of the same forwards. "
    f"The decode step at {short} tokens, {by_context[short, 1].with_unit('ms')} here, is the "
    f"step cost's first point measured again ({step_decode.with_unit('ms')} there): {same}. By bytes alone the cache "
    f"of this small model stays lighter than its weights up to {weight_bytes / kv_bytes:,.0f} tokens; for a model "
    "with a larger cache per token, or at a large batch, the context dominates sooner."))
