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
# # 10. Where drafts come from
#
# The tree, the verify forward and the accept walk never ask where the draft tokens came from.
# The engine's draft sources sit behind one interface (`workbench/engine/drafts/`, one module
# each, listed in `registry.py`: `--draft` on the command line, the draft selector in the app);
# the first cell below counts them from that list:
#
# | source | what drafts | what it costs per step |
# |---|---|---|
# | the EAGLE head (`head`) | a one-layer network reading the target's last hidden state | one small layer and its LM head per tree level |
# | an n-gram lookup (`ngram`) | what followed earlier occurrences of the last tokens, in the request's own prompt and output | no forward at all |
# | an early exit (`exit:N`) | the target's own first N layers, its final norm and LM head | N of the target's layers and the full LM head per tree level |
# | a draft model (`model:DIR`) | a separate small model with the target's tokenizer, with its own KV cache | its own forward per tree level, and an extend over the tokens kept |
#
# A draft is worth its acceptance rate α (how often the target accepts a draft, once the drafts
# before it were accepted) against its cost c (one draft forward relative to a decode step), the
# trade-off notebook 6 puts into a formula. This notebook measures both for each source, on one engine, in fp32 so that every
# output can be compared token for token with plain decoding.

# %%
from workbench.engine.config import SpecConfig
from workbench.lessons.start import start

wb = start(dtype="fp32")  # fp32: every route's output is compared token for token with plain decoding

from workbench.engine.drafts.registry import SOURCES

print(f"{len(SOURCES)} draft sources registered: "
      + "; ".join(f"{kind} ({source.grammar}: {source.choice})" for kind, source in SOURCES.items()))

# %% [markdown]
# ## One engine, every route
#
# **The draft model's pair.** No real draft model ships for the default target: a draft model must
# share the target's tokenizer and be much cheaper than it, and SmolLM2-135M is the smallest model
# of its family. The `model:DIR` route below therefore runs the real target with a **random**
# one-layer draft model of the target's vocabulary, built here (`random_draft_model` in
# `workbench/lessons/draft_routes.py`, as the tests build theirs): the whole route runs (its own
# KV, an extend per step, the tree, the verify, the walk) and its output must still equal plain
# decoding, but its drafts are noise and its acceptance near zero. Its τ says what the route
# costs with a useless draft, not what a draft model is worth.
#
# Two prompts written for this notebook (the Spec-Bench questions are kept for evaluation): one
# that asks to rework a passage, so the answer repeats the prompt's words, and a short word problem.
# Each is decoded greedily with each source through the tree 8/5/4 (`num_draft_tokens`/`num_steps`/
# `topk`): what SGLang picks for a Llama target when no tree is given (notebook 8 sets each
# framework's defaults side by side).

# %%
import pandas as pd
from IPython.display import Markdown, display

from workbench.lessons.draft_routes import run_route

PROMPTS = {
    "rework a passage": "Rewrite this passage as a bulleted list, keeping its words: The library opens at nine. "
                        "Members may borrow six books at a time. Books are due back after three weeks. "
                        "Late books cost ten cents a day.",
    "word problem": "A shop sells pencils at 3 for 45 cents. How much do 12 pencils cost? Show the steps.",
}
MAX_NEW = 64
EXIT = 28  # the exit the benchmark below uses too; the sweep after it tries several
import tempfile

from workbench.lessons.draft_routes import random_draft_model

wb_model, model_source = random_draft_model(wb, tempfile.mkdtemp(prefix="random-draft-model-"))
ROUTES = {"head": (wb, None), "ngram": (wb, "ngram"), f"exit:{EXIT}": (wb, f"exit:{EXIT}"),
          "model (random)": (wb_model, model_source)}
ids = [wb.encode(p) for p in PROMPTS.values()]
vanilla = run_route(wb, SpecConfig("vanilla"), ids, MAX_NEW)
runs = {name: run_route(w, SpecConfig.from_knobs("eagle2", num_steps=5, topk=4, num_draft_tokens=8, draft=d), ids,
                        MAX_NEW)
        for name, (w, d) in ROUTES.items()}
rows = []
for name, run in runs.items():
    for k, task in enumerate(PROMPTS):
        steps = [t for t in run.traces[k] if t["kind"] != "prefill"]
        rows.append({"route": name, "prompt": task, "τ": sum(t["accept_length"] for t in steps) / len(steps),
                     "steps": len(steps), "= plain decoding": run.outputs[k] == vanilla.outputs[k]})
table = pd.DataFrame(rows)
equal = sum(run.equal(vanilla) for run in runs.values())
print(f"{equal} of {len(runs) * len(ids)} route × prompt outputs equal plain greedy decoding token for token (fp32)")
table.pivot(index="route", columns="prompt", values="τ").round(2)

# %% [markdown]
# ## The trees of one step
#
# The step of each route that accepted the most on the passage prompt. The n-gram tree holds
# only what followed the longest matching suffix earlier in the text: deep and narrow where the
# passage is being copied, a bare root where nothing matches (that step then decodes one token).

# %%
from workbench.viz.tree import WIDTH, tree_figure

for name, run in runs.items():
    steps = [t for t in run.traces[0] if t["kind"] == "spec"]
    best = max(steps, key=lambda t: t["accept_length"])
    tree_figure(best, compact=True, width=WIDTH, label=name).show()  # the page's width: whole token names

# %%
by_prompt = table.pivot(index="route", columns="prompt", values="τ")
lines = []
for task in PROMPTS:
    order = by_prompt[task].sort_values(ascending=False)
    lines.append(f"on the {task} prompt **{order.index[0]}** accepts the most (τ {order.iloc[0]:.2f}, then "
                 + ", ".join(f"{r} {t:.2f}" for r, t in order.iloc[1:].items()) + ")")
display(Markdown("**Takeaway.** Same tree budget, same verify, same walk: " + "; ".join(lines) + ". "
                 f"Every output equals plain decoding ({equal} of {len(runs) * len(ids)}): a draft changes only "
                 "how many tokens a step keeps, never which."))

# %% [markdown]
# ## Which draft wins which task
#
# τ is half the story; the other half is what a step costs. The table below is the benchmark's
# measurement on one question per Spec-Bench task, read from `workbench/assets/draft-sources.json`
# (the same file the app quotes beside τ); its command, machine and date are printed with it. It
# holds the routes it was run with; no draft model ships, so the stored run has none to time.

# %%
from workbench.app.draft_bench import load_draft_bench

bench = load_draft_bench()  # the shipped workbench/assets/draft-sources.json
meta = bench.meta
print(f"{meta['command']}\n{meta['date']}, {meta['cpu']}, {meta['dtype']}, {meta['max_new_tokens']} new tokens "
      "per answer, one question per task")
cells = [{"route": route.label, "task": task, "τ": tau, "× plain decoding": speed}
         for route in bench.routes for task, (tau, speed) in route.per_task.items()]
per_task = pd.DataFrame(cells)
per_task.pivot(index="task", columns="route", values="× plain decoding").round(2)

# %%
per_task.pivot(index="task", columns="route", values="τ").round(2)

# %%
speed = per_task.pivot(index="task", columns="route", values="× plain decoding")
NOISE = 0.15  # runs of this benchmark move by about ±10-20 % (docs/benchmarks.md): closer than this is a tie
lines = []
for task, row in speed.iterrows():
    order = row.sort_values(ascending=False)
    gap = order.iloc[0] / order.iloc[1] - 1
    verdict = (f"**{order.index[0]}** ({order.iloc[0]:.2f}x, {gap:.0%} ahead of {order.index[1]})" if gap > NOISE
               else f"{order.index[0]} and {order.index[1]}, level within noise ({order.iloc[0]:.2f}x and "
                    f"{order.iloc[1]:.2f}x)")
    lines.append(f"- {task}: {verdict}")
wins = speed.idxmax(axis=1).value_counts()
display(Markdown("**Takeaway.** The fastest route per task on this machine (one question each: a single "
                 "measurement, not an average):\n" + "\n".join(lines) + "\n\n"
                 f"Counted over the tasks: " + ", ".join(f"{r} fastest on {n}" for r, n in wins.items()) + "."))

# %% [markdown]
# ## How many layers should an early exit keep?
#
# More layers agree more with the target and cost more. For a chain of γ = 3 drafts from `exit:N`
# this measures, on the two prompts above, the acceptance rate α (fitted on the walks of every
# other step, as notebook 6 fits it; not notebook 6's top-1 agreement, which compares the
# exit's top token with the target's at every position of a fixed answer), the cost c of one
# draft forward against a decode step (medians of the engine's own phase timings: the steps'
# draft time over the γ forwards of a step), τ, the measured speedup over plain decoding, and
# the speedup the project's cost model predicts at that τ (`StepCost.predict` on this machine's
# step cost, notebook 6, with the exit's draft forward taken as N / L of a verify of as many tokens).

# %%
from workbench.lessons.draft_routes import exit_sweep

LAYERS = [6, 12, 18, 24, 28]
GAMMA = 3
from workbench.lessons.predictions import step_cost

cost = step_cost(wb)  # this machine's step cost (notebook 6): cached, or measured now
sweep_rows = exit_sweep(wb, LAYERS, ids, GAMMA, MAX_NEW, cost, vanilla=vanilla)
sweep = pd.DataFrame(sweep_rows).set_index("layers")
sweep.round(3)

# %%
from workbench.lessons.draft_routes import exit_sweep_figure
from workbench.lessons.takeaways import gaps_sentence
from workbench.timing import Spread

exit_sweep_figure(sweep_rows, GAMMA, wb.dtype_name, wb.target.config.num_layers).show()

# %%
best = sweep.speedup.idxmax()
paying = sweep[sweep.speedup > 1]
gain = sweep.alpha.iloc[-1] - sweep.alpha.iloc[0]
cost = sweep.c.iloc[-1] / sweep.c.iloc[0]
head_c = runs["head"].phase_ms("draft_extend_ms", "draft_tree_ms") / 5 / vanilla.phase_ms("decode_ms")
display(Markdown(
    f"**Takeaway.** From {LAYERS[0]} to {LAYERS[-1]} layers the acceptance rate rises from α {sweep.alpha.iloc[0]:.2f} "
    f"to {sweep.alpha.iloc[-1]:.2f} (+{gain:.2f}) while a draft forward grows from c {sweep.c.iloc[0]:.2f} to "
    f"{sweep.c.iloc[-1]:.2f} of a decode step ({cost:.1f}x). "
    + (f"The exit pays here from {paying.index.min()} layers on, best at {best} ({sweep.speedup.max():.2f}x). "
       if len(paying) else
       f"No exit pays on this machine: the best, {best} layers, runs at {sweep.speedup.max():.2f}x plain "
       f"decoding, because even the cheapest draft costs c {sweep.c.min():.2f} and a chain of {GAMMA} pays "
       f"{GAMMA} of them per step. ")
    + "Predicted by the step cost at each exit's measured τ (one run each, so a measured range is a point): "
    + gaps_sentence({f"exit:{n}": (r.speedup_predicted, Spread(r.speedup, r.speedup, r.speedup, 1))
                     for n, r in sweep.iterrows()})
    + f". The EAGLE head costs c {head_c:.2f} per level at the tree above: a draft must be cheap before it is good."))

# %% [markdown]
# ## Leviathan et al.'s Theorem 3.8, exit by exit
#
# [Leviathan et al. 2023](https://arxiv.org/abs/2211.17192), Theorem 3.8: with acceptance rate α,
# a draft forward costing c target forwards and a verify of γ + 1 tokens costing one, a chain of
# γ drafts improves the walltime by the factor
# $$\frac{1 - \alpha^{\gamma + 1}}{(1 - \alpha)(\gamma c + 1)},$$
# and its Corollary 3.9: some γ gives a factor above 1 **if and only if α > c** (γ = 1 then gives
# (1 + α)/(1 + c)). Each exit's α and c measured above go in (`improvement_factor`, `best_gamma`
# and `some_gamma_helps` in `workbench/lessons/chain_model.py`), beside its measured speedup.

# %%
from workbench.lessons.chain_model import best_gamma, improvement_factor, some_gamma_helps
from workbench.lessons.takeaways import theorem_sentence

theorem = pd.DataFrame([{
    "layers": n, "α": r.alpha, "c": r.c, f"factor at γ = {GAMMA}": improvement_factor(r.alpha, GAMMA, r.c),
    "best γ": best_gamma(r.alpha, r.c)[0], "its factor": best_gamma(r.alpha, r.c)[1],
    "α > c": some_gamma_helps(r.alpha, r.c), "measured speedup": r.speedup} for n, r in sweep.iterrows()]).set_index("layers")
display(theorem.round(3))
display(Markdown("**Takeaway.** " + "; ".join(theorem_sentence(n, r.alpha, r.c, GAMMA, r.speedup)
                                             for n, r in sweep.iterrows()) + ". The theorem prices the verify "
                 "of γ + 1 tokens at one decode step and nothing outside the forwards; where it and the clock part, "
                 "the step cost's prediction above says what the machine charges instead."))

# %% [markdown]
# **What c counts.** A chain of γ drafts from `exit:N` runs γ draft forwards
# per step (`ExitDraft` in `workbench/engine/drafts/exit.py`: the root, then one per further level),
# each through the target's first N layers, its final norm and its LM head over the whole
# vocabulary, followed by a log-softmax and a top-k over those logits and the bookkeeping of one
# tree level (its batch, its mask over the scratch slots). c is a step's draft time (the median
# over the steps) divided by γ and by a decode step's time: one such forward against one pass
# through all the layers and the LM head. A straight line through the sweep splits it into what
# each layer adds and what a forward pays whatever N is:

# %%
import numpy as np

from workbench.lessons.takeaways import c_passes_one

slope, intercept = np.polyfit(sweep.index, sweep.c, 1)  # c ≈ intercept + slope · N
cfg = wb.target.config
lm_share = wb.target.lm_head.weight.numel() / sum(p.numel() for p in wb.target.parameters())
print(f"c ≈ {intercept:.3f} + {slope:.4f} × layers (largest gap to the line: "
      f"{(sweep.c - (intercept + slope * sweep.index)).abs().max():.3f})")
full = round(float(intercept + slope * cfg.num_layers), 2)  # all layers, in decode steps, as the sentence prints it
display(Markdown(
    f"**Takeaway.** Each layer adds {slope:.3f} of a decode step to a draft forward ({cfg.num_layers} layers: "
    f"{slope * cfg.num_layers:.2f}), and {intercept:.2f} is paid at every forward whatever N: the LM head "
    f"({lm_share:.0%} of the weights, which a decode step reads too, once per token) and what only a draft "
    f"level does, the log-softmax and top-k over {cfg.vocab_size:,} logits and the level's bookkeeping. "
    f"So the fit puts a "
    f"{LAYERS[-1]}-layer draft forward at {intercept + slope * LAYERS[-1]:.2f} decode steps "
    f"({sweep.c[LAYERS[-1]]:.2f} measured) and one through all {cfg.num_layers} layers at "
    f"{intercept + slope * cfg.num_layers:.2f}, "
    + {1: "more than", 0: "as much as", -1: "less than"}[(full > 1) - (full < 1)] + " the decode step a draft "
    f"is meant to save, and the chain pays it {GAMMA} times per step. Measured, "
    + c_passes_one(list(sweep.index), list(sweep.c)) + "."))
