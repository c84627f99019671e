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
# # 9. Dynamic vs static trees, and what the draft's confidence is worth
#
# EAGLE-2 changes one thing over EAGLE-1: the draft tree's **shape**. EAGLE-1 drafts a shape
# fixed in advance (its default: 25 rank paths such as "the top child of the root's second
# child"); EAGLE-2 grows the tree where the **path score** (the product of the draft's
# probabilities from the root) is highest, at every step anew. That rests on one observation:
# **the draft's confidence predicts how often the target accepts a token**.
#
# This notebook checks both claims on our own head and target, from step traces:
#
# 1. *calibration*: every verified draft node's probability and path score against whether the
#    target accepted it;
# 2. *dynamic vs static*: τ (tokens per target forward) of `eagle2` and `static` at the same
#    `num_draft_tokens`, drafting from the same head, scored against the same text;
# 3. *hindsight*: what τ each smaller budget would have given on the very same steps.
#
# Every sentence that states a result below is printed from the measurements. The headline
# (does the dynamic tree accept more per target forward than the static one at the same budget?)
# comes first, right after the runs, with a 95 % confidence interval on the τ difference,
# bootstrapped over prompts (`workbench/lessons/intervals.py`): steps of one answer are not
# independent, so the prompt, not the step, is the unit that is resampled.

# %%
from workbench.lessons.start import start

wb = start(dtype="fp32")  # fp32: both trees must be scored against the same text (see below)

# %%
import pandas as pd
from IPython.display import HTML, Markdown, display

from workbench.analysis.calibration import calibration_table
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons import smoke
from workbench.lessons.intervals import paired
from workbench.lessons.settings import all_categories, lesson_prompts
from workbench.metrics import traces_tau
from workbench.viz.best_tree import best_tree_figure, budget_taus
from workbench.viz.calibration import calibration_html, depth_figure, reliability_figure


def say(text: str) -> None:
    """A conclusion computed from the measurements, shown as text."""
    display(Markdown(text))


# %% [markdown]
# One Spec-Bench question of every category (the shortest first turn of each: 13 prompts, the
# three of notebooks 6 and 8 among them), 40 new tokens each, greedy. Two budgets: `num_draft_tokens` 8
# (8/5/4, the dynamic tree SGLang picks for a Llama target, against EAGLE-1's tree cut to its
# first 7 paths) and 32
# (dynamic 32/6/8 against EAGLE-1's 25 paths plus the next 6 breadth first). Static and dynamic
# draft from the same head.
#
# **The same text for both trees.** Greedy, the walk accepts a draft when it is the target's
# choice after the committed text, so a step is scored against the target's greedy continuation.
# When a run emits exactly what plain greedy decoding emits, every one of its steps was scored
# against that one continuation: it is the teacher-forced text, and τ of either tree counts
# positions of the same 40 tokens. The check below runs in fp32 and prints how many runs did
# (k of k); a prompt where some run left the plain output is left out of the comparison, and named.

# %%
prompts = lesson_prompts(wb, all_categories())
CATEGORIES = tuple(prompts)
MAX_NEW = smoke.new_tokens(40)  # 40 (fewer when the test suite runs the notebook at its smoke size)
BUDGETS = {8: SpecConfig.from_knobs("eagle2", num_steps=5, topk=4, num_draft_tokens=8),
           32: SpecConfig.from_knobs("eagle2", num_steps=6, topk=8, num_draft_tokens=32)}


def run(spec: SpecConfig, ids: list[int]) -> tuple[list[dict], list[int]]:
    """Every step trace of one greedy decode, and the output ids."""
    traces: list[dict] = []
    (req,), _ = wb.generate([ids], spec, SamplingParams(), MAX_NEW, trace_sink=traces.append)
    return traces, req.output_ids


runs = []  # one row per (budget, method, category): its traces
for d, dynamic in BUDGETS.items():
    for method, spec in (("dynamic", dynamic), ("static", SpecConfig.from_knobs("static", num_draft_tokens=d))):
        for category, ids in prompts.items():
            traces, out = run(spec, ids)
            runs.append({"D": d, "method": method, "category": category, "config": spec.describe(),
                         "traces": traces, "output": out})
plain = {c: run(SpecConfig("vanilla"), ids)[1] for c, ids in prompts.items()}  # the teacher-forced text
equal = [r["output"] == plain[r["category"]] for r in runs]
SAME_TEXT = [c for c in CATEGORIES if all(r["output"] == plain[c] for r in runs if r["category"] == c)]
print(f"{wb.dtype_name}: {sum(equal)} of {len(runs)} runs (4 configurations × {len(CATEGORIES)} prompts) emitted "
      f"exactly the plain greedy output; the comparison below uses the prompts where all four did: "
      f"{', '.join(SAME_TEXT) or 'none'}"
      + (f" (left out: {', '.join(c for c in CATEGORIES if c not in SAME_TEXT)})" if len(SAME_TEXT) < len(CATEGORIES)
         else ""))

# %% [markdown]
# ## The headline: dynamic against static, per prompt
#
# Per prompt and budget, τ of each tree (tokens per target forward, the prefill's token not
# counted) on the same text, and the mean over prompts of the difference dynamic − static with
# its bootstrap interval. An interval that contains 0 means these prompts do not separate the two
# trees on this head.

# %%
per_prompt_tau = {(r["D"], r["method"], r["category"]): traces_tau(r["traces"]) for r in runs if r["category"] in SAME_TEXT}
gap = {d: paired([per_prompt_tau[d, "dynamic", c] for c in SAME_TEXT], [per_prompt_tau[d, "static", c] for c in SAME_TEXT])
       for d in BUDGETS}
said = {"above": "the dynamic tree accepts more per target forward, beyond the interval",
        "below": "the static tree accepts more per target forward, beyond the interval",
        "level within noise": "the interval contains 0: on this head and these prompts the two trees do not separate"}
headline = "; ".join(f"at D = {d}, dynamic − static τ = {gap[d]}: {said[gap[d].side()]}" for d in BUDGETS)
say(f"**Headline.** {headline[0].upper()}{headline[1:]}.")

# %% [markdown]
# ## 1. Does the draft's confidence predict acceptance?
#
# Every **verified** node counts (candidates dropped at the rerank were never verified). A node
# was **tried** when its parent was accepted (the root always is): then the target's choice
# there decides it. The draft probability claims P(accept | tried); the path score, the product
# of those probabilities down the path, claims P(accept) among all verified nodes. On the
# diagonal, the draft is perfectly calibrated.
#
# The second figure has three bars per depth k. The first two count **nodes**, as the diagonal
# plot does: P(accept | tried) among the nodes at depth k whose parent was accepted, P(accept)
# among all verified nodes at depth k. The third counts **steps**: of the steps whose walk
# accepted a node at depth k − 1, the fraction that went on to accept one at depth k. A step
# counts once there however many siblings it tried at depth k, and also when its tree had no
# child to try: so the third bar is above the first where losing siblings pull P(accept | tried)
# down, and below it where trees stop before depth k. Pooled over both methods and budgets:

# %%
all_traces = [t for r in runs for t in r["traces"]]
cal = calibration_table(all_traces)
reliability_figure(cal, "Draft confidence against acceptance, both methods").show()
depth_figure(cal).show()
bins = pd.DataFrame([{"bin": f"{p['lo']:.1f}–{p['hi']:.1f}", "tried": p["count"], "accepted | tried": p["accepted"],
                      "P(accept | tried)": p["rate"], "verified": s["count"], "accepted": s["accepted"],
                      "P(accept)": s["rate"]} for p, s in zip(cal["prob_bins"], cal["score_bins"])])
print(bins.to_string(index=False))

# %%
s = cal["summary"]
filled = [b for b in cal["prob_bins"] if b["count"] >= 10]
rising = sum(b2["rate"] > b1["rate"] for b1, b2 in zip(filled, filled[1:]))
low, high = filled[0], filled[-1]
say(f"Over {s['steps']} steps and {s['nodes']} verified nodes ({s['tried']} tried, {s['accepted']} accepted): "
    f"acceptance rises from one well-filled probability bin to the next {rising} times out of {len(filled) - 1}; "
    f"drafts with probability {low['lo']:.1f}–{low['hi']:.1f} were accepted {low['rate']:.0%} of the times they "
    f"were tried, those with {high['lo']:.1f}–{high['hi']:.1f} {high['rate']:.0%}. "
    f"The count-weighted gap to the diagonal (ECE) is {s['ece_prob']:.3f} for the draft probability and "
    f"{s['ece_score']:.3f} for the path score: the head is "
    + ("over-confident" if sum(b['count'] * (b['mean_confidence'] - b['rate']) for b in filled) > 0
       else "under-confident")
    + " on balance, but its confidence orders the nodes"
    + (" well." if rising >= (len(filled) - 1) * 0.75 else " only roughly."))

# %% [markdown]
# ## 2. Dynamic against static at the same budget
#
# τ per budget, method and category (the prefill's token is not counted, as everywhere here), on
# the prompts whose four runs all emitted the plain greedy text. τ is tokens per target forward,
# not tokens per second: what a bigger verify block costs on this machine is notebook 6's
# subject, and `python -m workbench bench` times both trees (README).

# %%
compared = [r for r in runs if r["category"] in SAME_TEXT]
table = pd.DataFrame([{"D": r["D"], "method": r["method"], "category": r["category"], "tau": traces_tau(r["traces"])}
                      for r in compared])
wide = table.pivot_table(index=["D", "category"], columns="method", values="tau")
wide["dynamic / static"] = wide["dynamic"] / wide["static"]
pooled = {(d, m): traces_tau([t for r in compared if r["D"] == d and r["method"] == m for t in r["traces"]])
          for d in BUDGETS for m in ("dynamic", "static")}
print(wide.round(3).to_string())

# %%
from workbench.lessons.takeaways import compare_means


def lengths(d: int, method: str) -> list[int]:
    """Every accept length of one tree on the compared prompts."""
    return [t["accept_length"] for r in compared if r["D"] == d and r["method"] == method
            for t in r["traces"] if t["kind"] == "spec"]


verdicts = {d: compare_means(lengths(d, "dynamic"), lengths(d, "static")) for d in BUDGETS}
lines = []
for d in BUDGETS:
    ratio = pooled[(d, "dynamic")] / pooled[(d, "static")]
    wins = int((wide.loc[d, "dynamic / static"] > 1).sum())
    lines.append(f"at D = {d}, dynamic τ {pooled[(d, 'dynamic')]:.2f} against static {pooled[(d, 'static')]:.2f} "
                 f"(×{ratio:.2f}, pooled steps: {verdicts[d]}; per prompt: {gap[d].side()}), ahead in {wins} of {len(SAME_TEXT)} prompts")
say(f"Pooled over the {len(SAME_TEXT)} prompts, the same {MAX_NEW} tokens of text for both trees: "
    + "; ".join(lines) + " (noise: twice the standard error of the gap between the two mean accept lengths). "
    + ("The pooled comparison is unpaired: it counts the differences between prompts (an easy answer is easy "
       "for both trees, all through) as noise, and it treats steps of one answer as independent, which they are "
       "not. The headline's interval pairs the two trees prompt by prompt on the same text, so the differences "
       "between prompts cancel, and resamples whole prompts: it is the one to trust, "
       + "; ".join(f"D = {d}: {said[gap[d].side()]}" for d in BUDGETS) + "."))

# %% [markdown]
# Why did each tree's steps stop? The engine records one cause per step (`engine/stops.py`):
# *budget* (the draft proposed the target's token but the rerank dropped it), *frontier* (the
# stop node was not among the `topk` expanded at its level), *shape* (the static tree has no node
# there), *depth* (the last level), or the draft's own miss (*width*: ranked just outside `topk`;
# *draft*: not among its top 16). EAGLE-2's claim, in these words: the dynamic tree loses fewer
# steps to what it left undrafted than the static one does to its shape.

# %%
from workbench.lessons.takeaways import structure_sentence
from workbench.metrics import stop_counts

stops = {(d, m): stop_counts([t["stop"]["cause"] for r in compared if r["D"] == d and r["method"] == m
                              for t in r["traces"] if t["kind"] == "spec" and "stop" in t])
         for d in BUDGETS for m in ("dynamic", "static")}
print(pd.DataFrame(stops).fillna(0).astype(int).to_string())
say(" ".join(structure_sentence(d, stops[(d, "dynamic")], stops[(d, "static")]) for d in BUDGETS))

# %% [markdown]
# Where does each tree spend its budget? Nodes per depth, and accepted nodes per depth, summed
# over all steps at D = 32, and the nodes per step. The static shape is the same at every step;
# the dynamic one is grown anew at every step from the path scores. What that changes is read
# off the table below, not assumed.

# %%
rows = []
for r in compared:
    if r["D"] != 32:
        continue
    for t in r["traces"]:
        if t["kind"] != "spec":
            continue
        path = set(t["accept"]["path"])
        for n in t["tree"]["nodes"][1:]:
            rows.append({"method": r["method"], "depth": n["depth"], "accepted": n["node"] in path})
spend = pd.DataFrame(rows).groupby(["method", "depth"]).agg(nodes=("accepted", "size"), accepted=("accepted", "sum"))
n_steps = {m: sum(t["kind"] == "spec" for r in compared if r["D"] == 32 and r["method"] == m for t in r["traces"])
           for m in ("dynamic", "static")}
spend["nodes per step"] = [n / n_steps[m] for (m, _), n in spend["nodes"].items()]
print(spend.round(2).to_string())
deep = {m: spend.loc[m].index.max() for m in ("dynamic", "static")}
near = {m: spend.loc[m].loc[1, "nodes per step"] for m in deep}  # depth 1
far = {m: spend.loc[m].query("depth >= 3")["nodes per step"].sum() for m in deep}
got = {m: int(spend.loc[m].query("depth >= 3")["accepted"].sum()) for m in deep}
rate = {m: got[m] / max(1, int(spend.loc[m].query("depth >= 3")["nodes"].sum())) for m in deep}
say(f"At D = 32 the dynamic tree reached depth {deep['dynamic']} and the static one depth {deep['static']}. Per step "
    f"the dynamic tree put {near['dynamic']:.1f} of its {max(BUDGETS) - 1} drafts at depth 1 against {near['static']:.1f} for the "
    f"static one, and {far['dynamic']:.1f} at depth 3 or deeper against {far['static']:.1f}: it is "
    + ("wider" if near["dynamic"] > near["static"] else "narrower") + " near the root and "
    + ("holds fewer" if far["dynamic"] < far["static"] else "holds more") + " nodes deep. Over the steps "
    f"({n_steps['dynamic']} dynamic, {n_steps['static']} static), {got['dynamic']} of its nodes at depth 3 or deeper "
    f"were accepted against {got['static']} of the static tree's: {rate['dynamic']:.1%} of the nodes there against "
    f"{rate['static']:.1%}.")

# %% [markdown]
# ## 3. In hindsight: the best tree of each step
#
# The verify forward gave the target's next-token choice after every node, so the target's own
# greedy continuation can be followed down the tree until it leaves it (past that token the
# continuation is unknown: the target never ran on it). Rerunning the walk on only the
# best-scored D′ − 1 nodes gives the τ each smaller budget would have had on the same step.
# Averaged over the D = 32 steps of each method:

# %%
import plotly.graph_objects as go  # noqa: E402

from workbench.viz.style import METHOD, base_layout  # noqa: E402

fig = go.Figure(layout=base_layout("Mean τ on the same steps with the best-scored D′ − 1 nodes", 360))
hindsight = {}
for method in ("dynamic", "static"):
    steps = [t for r in compared if r["D"] == 32 and r["method"] == method for t in r["traces"] if t["kind"] == "spec"]
    curves = [budget_taus(t) for t in steps]
    hindsight[method] = [sum(c[i]["tau"] for c in curves) / len(curves) for i in range(len(curves[0]))]
    fig.add_scatter(x=list(range(2, 33)), y=hindsight[method], name=method,
                    line=dict(color=METHOD["eagle2" if method == "dynamic" else "static"]))
fig.update_xaxes(title="D′ (num_draft_tokens, root included)")
fig.update_yaxes(title="mean τ", rangemode="tozero")
fig.show()
half = {m: next(i + 2 for i, v in enumerate(h) if v >= 1 + 0.9 * (h[-1] - 1)) for m, h in hindsight.items()}
say(f"90 % of the gain over τ = 1 that D = 32 brings is reached with the best-scored {half['dynamic'] - 1} "
    f"dynamic nodes (D′ = {half['dynamic']}) and {half['static'] - 1} static ones (D′ = {half['static']}); "
    f"the other {32 - half['dynamic']} and {32 - half['static']} verified nodes add the last 10 %. "
    f"Mean τ at D′ = 8 on these steps: dynamic {hindsight['dynamic'][6]:.2f}, static {hindsight['static'][6]:.2f}.")

# %% [markdown]
# One step drawn: the tree, and the target's greedy continuation on it (where it was covered,
# where it left the tree).

# %%
longest = max((t for r in runs if r["D"] == 32 and r["method"] == "dynamic" for t in r["traces"]
               if t["kind"] == "spec"), key=lambda t: t["accept_length"])
best_tree_figure(longest).show()

# %% [markdown]
# The calibration table of section 1, bin by bin:

# %%
display(HTML(calibration_html(cal)))
