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
# # 7. Linear vs tree, and tuning
#
# Three knobs shape each step: `num_steps` (draft levels, the tree depth), `topk` (the width) and
# `num_draft_tokens` (the verify block, root included). `topk = 1` is the linear chain. This
# notebook sweeps them on a few Spec-Bench questions (one per category, first turn, greedy,
# batch 1) and reports the accept length τ (tokens per target forward, from the accept lengths the
# walk decided, so a last step cut at `max_new_tokens` does not bias it) and the speedup in tokens
# per second over plain decoding on this machine, as Spec-Bench measures it. Every setting runs
# `RUNS` times; tokens per second are the median of the runs, with their range.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="auto")

# %%
import json
from pathlib import Path

import pandas as pd
import plotly.express as px
from IPython.display import Markdown, display

import workbench

ROOT = Path(workbench.__file__).resolve().parent.parent
QUESTIONS = next(p for p in (ROOT / "workbench/data/spec_bench_questions.jsonl",
                             ROOT.parent / "shared/data/spec_bench_questions.jsonl") if p.exists())
CATEGORIES = ("coding", "translation", "math_reasoning")
questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
prompts = {}
for category in CATEGORIES:  # the shortest question of each category keeps the prefill cheap
    q = min((q for q in questions if q["category"] == category), key=lambda q: len(q["turns"][0]))
    prompts[category] = wb.encode(q["turns"][0])
print({c: len(ids) for c, ids in prompts.items()}, "prompt tokens, from", QUESTIONS.name)

# %%
from workbench.lessons.tau import tau
from workbench.lessons.timing import spread

MAX_NEW, RUNS = 20, 2
CONFIGS = [
    SpecConfig("vanilla"),
    *(SpecConfig.linear(s) for s in (1, 3)),  # chains: num_steps
    SpecConfig("eagle2", 3, 2, 4), SpecConfig("eagle2", 3, 2, 6),  # num_draft_tokens
    SpecConfig("eagle2", 3, 4, 6),  # topk
    SpecConfig("eagle2", 5, 4, 8),  # num_steps, topk and num_draft_tokens: SGLang's default
]

def label(spec):
    """Short name: method num_steps/topk/num_draft_tokens."""
    return "vanilla" if not spec.speculative else f"{spec.method} {spec.num_steps}/{spec.topk}/{spec.num_draft_tokens}"

wb.generate([prompts[CATEGORIES[0]]], CONFIGS[-1], SamplingParams(), max_new_tokens=4)  # warm-up

rows, outputs = [], {}
for run in range(RUNS):  # settings interleaved, so a slow spell of the machine hits all of them
    for spec in CONFIGS:
        for category, ids in prompts.items():
            (r,), seconds = wb.generate([ids], spec, SamplingParams(), max_new_tokens=MAX_NEW)
            outputs.setdefault((spec, category), r.output_ids)
            knobs = (spec.num_steps, spec.topk, spec.num_draft_tokens) if spec.speculative else (None,) * 3
            rows.append({"run": run, "config": label(spec), "method": spec.method, "num_steps": knobs[0],
                         "topk": knobs[1], "num_draft_tokens": knobs[2], "category": category,
                         "tokens": len(r.output_ids), "seconds": seconds,
                         "tau": tau(r) if spec.speculative else 1.0,
                         "same as vanilla": r.output_ids == outputs[CONFIGS[0], category]})
runs = pd.DataFrame(rows)
runs["tok/s"] = runs.tokens / runs.seconds
# one speed per setting and run: the mean over the categories, as Spec-Bench averages over questions
speed = runs.groupby(["config", "run"], sort=False)["tok/s"].mean().unstack()  # [config, run]
speedup = speed / speed.loc["vanilla"]  # per run: both measured under the same conditions
per_config = runs[runs.run == 0].groupby("config", sort=False).agg(
    method=("method", "first"), num_steps=("num_steps", "first"), topk=("topk", "first"),
    num_draft_tokens=("num_draft_tokens", "first"), tau=("tau", "mean"), same=("same as vanilla", "sum"))
per_config["tok_s"] = speed.median(axis=1)
per_config["speedup"] = speedup.median(axis=1)
per_config["speedup range"] = [f"{spread(row).low:.2f}–{spread(row).high:.2f}" for _, row in speedup.iterrows()]
per_config.round(2)

# %%
shown = per_config[per_config.method != "vanilla"].reset_index()
shown["above"] = speedup.drop("vanilla").max(axis=1).values - shown.speedup
shown["below"] = shown.speedup - speedup.drop("vanilla").min(axis=1).values
fig = px.scatter(shown, x="tau", y="speedup", color="method", text="config", height=460,
                 error_y="above", error_y_minus="below",
                 title=f"τ and speedup over plain decoding ({wb.dtype_name}, batch 1, {MAX_NEW} new tokens; "
                       f"labels: num_steps/topk/num_draft_tokens; median and range of {RUNS} runs)")
fig.update_traces(textposition="top center", textfont_size=9)
fig.add_hline(y=1, line_dash="dot")
fig.show()

# %%
spec_only = per_config[per_config.method != "vanilla"]
best, top_tau = spec_only.speedup.idxmax(), spec_only.tau.idxmax()
best_linear = spec_only[spec_only.method == "linear"].speedup.idxmax()
best_tree = spec_only[spec_only.method == "eagle2"].speedup.idxmax()
if spec_only.tau.max() - spec_only.tau.min() < 0.05:
    why = ("τ hardly moved across the settings (the draft head is rarely right), so the setting with the "
           "cheapest step won. ")
elif best != top_tau:
    why = (f"The highest τ came from {top_tau} (τ = {spec_only.tau[top_tau]:.2f}), but every extra verify node "
           "costs compute here (notebook 6): the winner balances τ against the cost of a step. ")
else:
    why = "The setting with the highest τ also won: its extra verify nodes were worth their cost. "
verdict = "faster than" if spec_only.speedup[best] > 1 else "no faster than"
same = runs[runs.method != "vanilla"]["same as vanilla"]
display(Markdown(
    f"**Takeaway.** The fastest speculative setting on this machine is **{best}**: "
    f"{spec_only.speedup[best]:.2f}× plain decoding ({verdict} it), τ = {spec_only.tau[best]:.2f}. Best chain: "
    f"{best_linear} ({spec_only.speedup[best_linear]:.2f}×); best tree: {best_tree} "
    f"({spec_only.speedup[best_tree]:.2f}×). " + why
    + f"{int(same.sum())} of {len(same)} speculative outputs equal plain greedy decoding "
      "(greedy speculation is lossless; in bf16 a near-tie can flip between differently batched forwards)."))

# %%
fig = px.bar(runs[(runs.method != "vanilla") & (runs.run == 0)], x="config", y="tau", color="category", barmode="group",
             height=400, title="τ per category")
fig.update_xaxes(tickangle=30)
fig.show()
by_category = runs[runs.method != "vanilla"].groupby("category").tau.mean().sort_values()
gap = by_category.iloc[-1] - by_category.iloc[0]
display(Markdown(
    f"**Takeaway.** Averaged over the settings, τ is lowest on {by_category.index[0]} "
    f"({by_category.iloc[0]:.2f}) and highest on {by_category.index[-1]} ({by_category.iloc[-1]:.2f})"
    + (": how predictable the answer is matters as much as the tree's shape." if gap >= 0.3 else
       ": with one short answer per category the difference is small here.")))


# %% [markdown]
# ## The same settings in SGLang, EAGLE and vLLM
#
# | here | SGLang | EAGLE repository | vLLM (v1) |
# |---|---|---|---|
# | `num_steps` | `--speculative-num-steps` | `depth = num_steps - 1` | chain: `num_speculative_tokens`; static tree: its depth |
# | `topk` | `--speculative-eagle-topk` | `top_k` | chain: 1; static tree: the branching written in `speculative_token_tree` |
# | `num_draft_tokens` (with the root) | `--speculative-num-draft-tokens` | `total_token` | `num_speculative_tokens + 1` |
#
# EAGLE's `depth` counts the draft levels after the first, so it is one less than `num_steps`:
# its paper default `depth=5, top_k=10, total_token=60` is `num_steps=6` here and in SGLang
# ([EAGLE-2](https://arxiv.org/abs/2406.16858); the EAGLE repository's `ea_model.py`).
# vLLM v1 verifies a chain by default and has an **experimental static tree**:
# `speculative_config["speculative_token_tree"]` lists the node paths of one fixed tree, e.g.
# `[(0,), (1,), (0, 0)]` = the top-2 children of the root and the top child of the first, verified
# with its tree attention backend. What vLLM lacks is the **dynamic** tree of EAGLE-2, reshaped at
# every step by the path scores; a `topk > 1` setting here maps to a static tree of the same size,
# not to the same tree.

# %%
def flags(spec):
    row = {"here": spec.describe(),
           "SGLang": f"--speculative-algorithm EAGLE --speculative-num-steps {spec.num_steps} "
                     f"--speculative-eagle-topk {spec.topk} --speculative-num-draft-tokens {spec.num_draft_tokens}",
           "EAGLE": f"depth={spec.num_steps - 1}, top_k={spec.topk}, total_token={spec.num_draft_tokens}"}
    head = 'speculative_config={"method": "eagle", "model": "<EAGLE head>", '
    row["vLLM"] = (head + f'"num_speculative_tokens": {spec.num_steps}}}' if spec.topk == 1 else
                   head + f'"num_speculative_tokens": {spec.num_draft_tokens - 1}, "speculative_token_tree": '
                   f'"<{spec.num_draft_tokens - 1} node paths>"}} (experimental; a static tree, not the dynamic one)')
    return row

spec_of = {label(s): s for s in CONFIGS}
runner_up = ("fastest tree here", best_tree) if best == best_linear else ("fastest chain here", best_linear)
chosen = {"fastest here": spec_of[best], runner_up[0]: spec_of[runner_up[1]],
          "SGLang default": SpecConfig("eagle2", 5, 4, 8), "EAGLE paper default": SpecConfig("eagle2", 6, 10, 60)}
pd.set_option("display.max_colwidth", None)  # show the whole flag strings
pd.DataFrame([{"setting": name, **flags(spec)} for name, spec in chosen.items()])

# %% [markdown]
# **Takeaway.** The flags carry over one to one between this engine and SGLang; only EAGLE's own
# code is off by one in depth. The best setting is a property of the machine. On a compute-bound
# CPU every verify node costs, and the fastest setting is the small one measured above. On a
# memory-bound GPU the verify block should be nearly free and the larger trees of the EAGLE paper
# should win: an *expectation*, not measured here (notebook 6 gives the arithmetic; the EAGLE-2
# paper reports its speedups with 60-token trees on datacenter GPUs).
