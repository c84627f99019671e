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
# # 8. Linear vs tree, and tuning
#
# Three knobs shape each step: `num_steps` (draft levels, the tree depth), `topk` (the width) and
# `num_draft_tokens` (the verify block, root included). `topk = 1` is the linear chain. This
# notebook sweeps them on a few Spec-Bench questions (one per category, first turn, greedy,
# batch 1) and reports the accept length τ (tokens per target forward: the tokens each verify step
# emitted, so a last step cut at `max_new_tokens` counts what it appended) and the speedup in tokens
# per second over plain decoding on this machine, as Spec-Bench measures it. Beside each measured
# speedup stands the one the project's cost model predicts for the same answers, each at the τ
# measured on it (this machine's step cost, notebook 6, its prefill, verifies and head forwards read at
# these runs' pace from a probe after each prompt in each round), with the gap in words: each
# answer's prefill, the draft's catch-up over its prompt and its decode steps
# (`lessons.predictions.answers_speedup`), since the measured tokens per second count the prefill
# too, and a mean of each answer's rate weighs the fast answers most; beside it, the decode steps'
# speedup alone at the setting's pooled τ (`StepCost.predict`).
#
# **How the timings are taken.** Every run is in fp32, where every speculative output is checked
# equal to plain greedy decoding, token for token, with the torch threads the first line names.
# The settings are timed in `ROUNDS` **interleaved rounds** (`workbench/timing.py`, through
# `measure_settings`): each round runs every setting on every prompt, the first setting rotating
# from round to round, so a slow spell of a shared machine hits all of them alike. A speedup is
# the median over the rounds with its range; a "fastest" is named only where its range is clear
# of every other's (`workbench.timing.verdict`), else the settings are level within noise.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="fp32")

# %%
import pandas as pd
import plotly.graph_objects as go
import torch
from IPython.display import Markdown, display

from workbench.lessons.machine import cpu_model
from workbench.lessons.settings import CATEGORIES, MAX_NEW_TOKENS, label, lesson_prompts, measure_settings

prompts = lesson_prompts(wb)
THREADS = f"{cpu_model()}, {wb.dtype_name}, {torch.get_num_threads()} torch thread{'s' * (torch.get_num_threads() != 1)}"
print({c: len(ids) for c, ids in prompts.items()}, "prompt tokens: the shortest first turn of each category")

# %%
ROUNDS = 3
SAMPLED = SamplingParams(temperature=1.0)
CONFIGS = [
    SpecConfig("vanilla"),
    *(SpecConfig.linear(s) for s in (1, 3)),  # chains: num_steps
    SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=4), SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6),  # num_draft_tokens
    SpecConfig("eagle2", num_steps=3, topk=4, num_draft_tokens=6),  # topk
    SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8),  # num_steps, topk, num_draft_tokens: what SGLang picks for a Llama target
]
TEMPERATURE = [(SpecConfig("vanilla"), SAMPLED), (SpecConfig.linear(3), SAMPLED)]  # the chain of 3 sampling at T = 1
probes = []  # the target's part timed again after each prompt in each round (notebook 6): at these runs' pace
measured = measure_settings(wb, CONFIGS + TEMPERATURE, prompts, ROUNDS, probes=probes)  # notebook 6's helper
settings = {name: st for name, st in measured.items() if st.sampling.greedy}
from workbench.lessons.predictions import answers_speedup, step_cost
from workbench.measure.probe import probed

cost = step_cost(wb)  # this machine's step cost (notebook 6): cached, or measured now
run_cost = probed(cost, probes, head=True)  # its verifies and head forwards at these runs' pace
per_config = pd.DataFrame([{
    "config": name, "method": st.spec.method, "tau": st.tau, "tok/s": st.tok_s.median,
    "speedup": st.speedup.median, "speedup range": f"{st.speedup.low:.2f}–{st.speedup.high:.2f}",
    "predicted": answers_speedup(run_cost, st.spec, [len(prompts[c]) for c in prompts],
                                 [len(st.outputs[c]) for c in prompts], [st.tau_of(c) for c in prompts]),
    "decode steps alone": run_cost.predict(st.spec, st.tau).speedup, "equal to plain": f"{st.equal_to_plain} of {len(prompts)}",
} for name, st in settings.items()]).set_index("config")
per_config.round(2)

# %%
spec_only = per_config[per_config.method != "vanilla"]
from workbench.viz.compare import speedup_scatter  # names placed so that none overprints

points = [{"method": st.spec.method, "label": name, "tau": st.tau, "speedup": st.speedup.median,
           "low": st.speedup.low, "high": st.speedup.high}
          for name, st in settings.items() if st.spec.speculative]
speedup_scatter(points, f"τ and speedup over plain decoding ({THREADS}, batch 1, {MAX_NEW_TOKENS} new tokens; "
                        f"labels: linear:S, eagle2:D/S/K as the bench reads them; median and range of {ROUNDS} "
                        "interleaved rounds)").show()

# %%
from workbench.lessons.takeaways import best_sentence, gaps_sentence
from workbench.timing import verdict

best, top_tau = spec_only.speedup.idxmax(), spec_only.tau.idxmax()
fastest = verdict({n: settings[n].speedup for n in spec_only.index})
best_linear = spec_only[spec_only.method == "linear"].speedup.idxmax()
best_tree = spec_only[spec_only.method == "eagle2"].speedup.idxmax()
level_with_best = [n for n in fastest.level if n != best]
if spec_only.tau.max() - spec_only.tau.min() < 0.05:
    why = "τ hardly moved across the settings (the draft head is rarely right). "
elif top_tau in fastest.level:
    why = (f"The highest τ, {top_tau}'s {spec_only.tau[top_tau]:.2f}, has a speedup range that overlaps the top "
           "one: these rounds do not show its extra drafts and verify nodes costing more than the tokens they add. ")
else:
    why = (f"The highest τ came from {top_tau} (τ = {spec_only.tau[top_tau]:.2f}), and its speedup range is "
           "clear below the top: its extra drafts and verify nodes cost more than the tokens they added. ")
display(Markdown(
    f"**Takeaway.** By median speedup {best} leads ({settings[best].speedup.with_unit('×')} plain decoding, "
    f"τ = {spec_only.tau[best]:.2f}); {best_sentence(fastest, 'setting')}. Highest median among the chains: "
    f"{best_linear} ({spec_only.speedup[best_linear]:.2f}×); among the trees: {best_tree} "
    f"({spec_only.speedup[best_tree]:.2f}×). " + why
    + f"Predicted by the step cost for the same answers, each at its measured τ with its prefill ({run_cost.measured}): "
    + gaps_sentence({n: (per_config.predicted[n], settings[n].speedup) for n in spec_only.index}) + ". "
    + f"The chain linear:3 is notebook 6's chain of 3, on the same prompts and {MAX_NEW_TOKENS} new tokens "
      "(both measured by `measure_settings`): its τ is the same number there, and its speedup is the same "
      f"measurement taken again in this notebook's own rounds, so the two differ by the noise of each ({THREADS})."))

# %%
fig = go.Figure()
for category in CATEGORIES:
    fig.add_bar(x=list(spec_only.index), y=[settings[n].tau_of(category) for n in spec_only.index], name=category)
fig.update_layout(barmode="group", height=400, title="τ per category", yaxis_title="τ",
                  legend_title_text="category")
fig.update_xaxes(tickangle=30)
fig.show()
by_category = pd.Series({c: sum(settings[n].tau_of(c) for n in spec_only.index) / len(spec_only)
                         for c in CATEGORIES}).sort_values()
gap = by_category.iloc[-1] - by_category.iloc[0]
by_setting = pd.Series({n: sum(settings[n].tau_of(c) for c in CATEGORIES) / len(CATEGORIES) for n in spec_only.index})
setting_gap = by_setting.max() - by_setting.min()
display(Markdown(
    f"**Takeaway.** Averaged over the settings, τ is lowest on {by_category.index[0]} "
    f"({by_category.iloc[0]:.2f}) and highest on {by_category.index[-1]} ({by_category.iloc[-1]:.2f}): the prompt "
    f"moves τ by {gap:.2f}, the setting (averaged over the prompts) by {setting_gap:.2f}, so here "
    + ("the prompt matters more than the tree's shape" if gap > setting_gap else "the tree's shape matters more")
    + f", on one short answer per category ({MAX_NEW_TOKENS} tokens)."))

# %% [markdown]
# ## Lossless, shown
#
# Greedy speculation emits exactly what plain greedy decoding emits, in exact arithmetic. The
# timed runs above are in fp32, and each one's output (first round) is compared with plain
# decoding's, token for token; where one parted, the table below would show where and by what
# logit margin the target's two best tokens stood there.

# %%
from workbench.lessons.divergence import divergence

pairs32 = [(name, c) for name in spec_only.index for c in CATEGORIES]
equal32 = sum(settings[name].equal_to_plain for name in spec_only.index)
print(f"{wb.dtype_name}: {equal32} of {len(pairs32)} speculative outputs equal plain greedy decoding, token for token")
plain = settings["vanilla"].outputs
diverged = [(name, c, divergence(wb.target, prompts[c], plain[c], settings[name].outputs[c]))
            for name in spec_only.index for c in CATEGORIES]
diverged = [(name, c, d) for name, c, d in diverged if d is not None]
if diverged:
    display(pd.DataFrame([{
        "setting": name, "prompt": c, "first differing position": d.position,
        "plain": repr(wb.token_text(d.plain)) if d.plain is not None else "(ended)",
        "speculative": repr(wb.token_text(d.other)) if d.other is not None else "(ended)",
        "target's top-2": f"{wb.token_text(d.top[0])!r} / {wb.token_text(d.top[1])!r}",
        "top-2 logit margin": round(d.margin, 3)} for name, c, d in diverged]))
display(Markdown(
    f"**Takeaway.** In {wb.dtype_name}, the dtype of every timing above, {equal32} of {len(pairs32)} speculative "
    "outputs equal plain greedy decoding token for token"
    + (f"; where one parts, the target's two best tokens there are {min(d.margin for *_, d in diverged):.3f} to "
       f"{max(d.margin for *_, d in diverged):.3f} logits apart: a near-tie that a differently batched "
       "forward rounds the other way." if diverged else ".")))

# %% [markdown]
# ## Greedy or sampled: temperature 0 against 1
#
# The same chain of 3 on the same prompts, sampling at temperature 1 (a draft is kept with a
# probability set by the target's distribution, and a miss draws the bonus from what is left:
# the lossless sampling rules of `workbench/engine/accept.py`), against plain decoding sampling
# at temperature 1: every speedup is
# over plain decoding at the same temperature, in the same rounds. Each round draws another sample
# (seed + round), so τ at T = 1 has a range over the rounds, as the timings do.

# %%
greedy_chain, sampled_chain = measured["linear:3"], measured["linear:3 T=1"]
temperature = pd.DataFrame([{
    "setting": st.label, "temperature": st.sampling.temperature, "τ (median, range over rounds)": str(st.tau_spread),
    "speedup over plain at the same T": st.speedup.with_unit("×")} for st in (greedy_chain, sampled_chain)])
display(temperature)
from workbench.lessons.takeaways import compare  # noqa: E402

tau_call = compare(sampled_chain.tau_spread, greedy_chain.tau_spread)
speed_call = compare(sampled_chain.speedup, greedy_chain.speedup)
display(Markdown(
    f"**Takeaway.** Sampling at T = 1, the chain of 3 keeps τ = {sampled_chain.tau_spread} against "
    f"{greedy_chain.tau:.2f} greedy: {tau_call} (τ at T = 1 over its {ROUNDS} samples against the one greedy "
    f"value). Its speedup over plain sampling is {sampled_chain.speedup.with_unit('×')}, against "
    f"{greedy_chain.speedup.with_unit('×')} greedy: {speed_call}. "
    + ("At T = 1 a draft is kept with a probability set by the target's distribution instead of whenever it "
       "is the target's argmax: on these prompts that costs acceptance."
       if tau_call == "below" else
       "The two τ are not separated on these prompts and samples; more prompts or rounds would be needed to "
       "tell whether sampling costs acceptance here.")))

# %% [markdown]
# ## Widen before deepen, at low acceptance
#
# With a few more verify nodes to spend, is it better to widen the tree (more candidates at the
# same depth) or to deepen it (one more level at the same budget)? The timings above cannot say:
# their settings change more than one knob at a time, on three prompts. The traces can: the first
# S levels of a tree of more levels are the levels a tree of S levels grows, and the verify of a
# big tree gives the target's choice after every node, so one traced big tree
# (`workbench/lessons/hindsight.py`) says, step by step, how many tokens a tree of budget D′ and
# S levels (the same `topk`) would have kept on the very same steps. Widening goes D′ → D′ + 2 at
# the same S, deepening S → S + 1 at the same D′. Nothing here is timed: τ only, on one prompt of
# every Spec-Bench category, split by the base tree's τ into the lower and the upper half. A step
# where one of the three trees compared would keep a node the big tree never verified is left out
# (the table counts them as `unknown`); a cell of the figure is left empty where some step's tree
# of that size is unknown.

# %%
from workbench.lessons.hindsight import gains, grid_figure, shape_grid
from workbench.lessons.intervals import paired
from workbench.lessons.settings import all_categories

BIG = SpecConfig("eagle2", num_steps=4, topk=4, num_draft_tokens=24)  # 4 levels, topk 4, 24 verify tokens: covers every smaller tree below
BUDGETS, DEPTHS = (4, 6, 8), (2, 3, 4)
BASE, WIDEN, DEEPEN = (4, 2), (6, 2), (4, 3)  # (D′, S)
every = lesson_prompts(wb, all_categories())
traced = {}
for category, ids in every.items():
    traces = []
    wb.generate([ids], BIG, SamplingParams(), MAX_NEW_TOKENS, trace_sink=traces.append)
    traced[category] = traces
gain = gains(traced, BASE, WIDEN, DEEPEN)
order = sorted(gain, key=lambda c: gain[c]["base"])
halves = {"lower": order[: len(order) // 2], "upper": order[len(order) // 2:]}
grids = {f"{half} half of τ at D′ {BASE[0]}, S {BASE[1]} ({len(cs)} prompts)": shape_grid(
    [t for c in cs for t in traced[c]], BUDGETS, DEPTHS) for half, cs in halves.items()}
grid_figure(grids, BUDGETS, DEPTHS, f"Mean τ per step a tree of budget D′ and S levels (topk {BIG.topk}) would have "
            f"kept, on the steps of one {BIG.name} run per prompt ({MAX_NEW_TOKENS} new tokens)").show()
print(pd.DataFrame(gain).T.loc[order].round(2).to_string())

# %%
choice = {}
for half, cs in halves.items():
    choice[half] = paired([gain[c]["widen"] for c in cs], [gain[c]["deepen"] for c in cs])
said = {"above": "widening gains more, beyond the interval", "below": "deepening gains more, beyond the interval",
        "level within noise": "the interval contains 0: neither is ahead on these prompts"}
display(Markdown(
    f"**Takeaway.** From D′ = {BASE[0]}, S = {BASE[1]}: widening to D′ = {WIDEN[0]} against deepening to "
    f"S = {DEEPEN[1]}, mean gain in τ widen − deepen per prompt, " + "; ".join(
        f"on the {half} half of the prompts by τ (mean τ {sum(gain[c]['base'] for c in halves[half]) / len(halves[half]):.2f}): "
        f"{choice[half]}, {said[choice[half].side()]}" for half in halves) + ". "
    + ("Where acceptance is low, widening pays before deepening: a deeper level is reached only through an "
       "accepted parent, a wider one is tried at once."
       if choice["lower"].side() == "above" else
       "The widen-before-deepen rule is not borne out beyond the noise at low acceptance on these prompts.")))

# %% [markdown]
# The same question from the other side: why did the base tree's own steps stop? Each step's
# record names one cause (`engine/stops.py`). A stop at the last level (*depth*) is one that a
# deeper tree could continue; a stop for *budget*, *frontier* or *width* (the target's token ranked
# just outside `topk`) is one that a wider tree could catch; the rest the draft missed outright.
# The base tree is run itself here, on the same prompts, traced.

# %%
from workbench.lessons.takeaways import widen_or_deepen_sentence
from workbench.metrics import stop_counts

BASE_SPEC = SpecConfig.from_knobs("eagle2", num_draft_tokens=BASE[0], num_steps=BASE[1], topk=BIG.topk)
base_causes = {}
for category, ids in every.items():
    traces = []
    wb.generate([ids], BASE_SPEC, SamplingParams(), MAX_NEW_TOKENS, trace_sink=traces.append)
    base_causes[category] = [t["stop"]["cause"] for t in traces if t["kind"] == "spec" and "stop" in t]
by_half = {half: stop_counts([c for cat in cs for c in base_causes[cat]]) for half, cs in halves.items()}
print(pd.DataFrame(by_half).fillna(0).astype(int).to_string())
display(Markdown(" ".join(widen_or_deepen_sentence(f"`{BASE_SPEC.describe()}` on the {half} half", counts)
                          for half, counts in by_half.items())))

# %% [markdown]
# ## The same settings in SGLang, EAGLE and vLLM
#
# | here | SGLang | EAGLE repository | vLLM (v1) |
# |---|---|---|---|
# | `num_steps` | `--speculative-num-steps` | `depth = num_steps - 1` | `num_speculative_tokens` (a chain; a tree's depth) |
# | `topk` | `--speculative-eagle-topk` | `top_k` | 1: vLLM verifies chains only (below) |
# | `num_draft_tokens` (with the root) | `--speculative-num-draft-tokens` | `total_token` | `num_speculative_tokens + 1` (a chain) |
#
# EAGLE's `depth` counts the draft levels after the first, so it is one less than `num_steps`.
# The defaults quoted here, each read in the file and at the commit named:
#
# * SafeAILab/EAGLE, the evaluation scripts `eagle/evaluation/gen_ea_answer_*.py` (vicuna,
#   llama2chat, llama3chat, mix): `--total-token 60 --depth 5 --top-k 10`, at the EAGLE-2 release
#   (commit bfeb532, 2024-06-27) and still at cb7e084 (2026-02-19); `num_steps=6` here, the
#   60/6/10 below.
# * SafeAILab/EAGLE, `EaModel.from_pretrained` in `eagle/model/ea_model.py`: `total_token=59,
#   depth=5, top_k=10` at bfeb532 (59/6/10 here), and `total_token=60, depth=7, top_k=10` from
#   f2f2366 (EAGLE-3, 2025-03-19) through cb7e084 (60/8/10 here).
# * sgl-project/sglang: with none of the three flags given, `auto_choose_speculative_params` in
#   `python/sglang/srt/server_args.py` picks `num_steps=5, topk=4, num_draft_tokens=8` for a
#   `LlamaForCausalLM` target, as SmolLM2 is; its documentation,
#   `docs/advanced_features/speculative_decoding.md` at 067ad4d, gives the same ("Auto", 5, 4 and
#   8 for Llama and Grok, other values for many other models).
#
# vLLM verifies **chains only**. It had an experimental static tree,
# `speculative_config["speculative_token_tree"]`, the node paths of one fixed tree, verified with a
# tree-attention backend, and removed that backend in May 2026, with no plans
# to support it in the short to medium term. Even before, its EAGLE proposer
# (`vllm/v1/spec_decode/eagle.py` at f7eef1b) read from the list only how many nodes each depth
# holds and gave every node of a depth the same number of children, the next depth's count
# divided by this one's: for a list of 4 nodes at depth 1 and 3 at depth 2 (8/5/4's static shape)
# or the 60-node one that is 0, so those trees were never grown as written. For a `topk > 1`
# setting the vLLM column below (`workbench.engine.frameworks.framework_flags`, the same mapping
# the app's Compare tab and `python -m workbench.bench tune` print) writes a chain as deep as the
# tree (`num_steps` tokens, at most `num_draft_tokens - 1`) and says why; every exported setting is
# checked against the engine's own rule. SGLang keeps its tree flags, one to one with ours.

# %%
from workbench.engine.frameworks import framework_flags  # the one mapping, shared with the app and bench tune

def flags(spec):
    return {"here": spec.describe(), **framework_flags(spec)}

spec_of = {label(s): s for s in CONFIGS}
runner_up = (("highest median speedup among the trees here", best_tree) if best == best_linear else
             ("highest median speedup among the chains here", best_linear))
chosen = {"highest median speedup here" + ("" if fastest.winner else " (level within noise with others)"): spec_of[best],
          runner_up[0]: spec_of[runner_up[1]],
          "SGLang's pick for a Llama target": SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8),
          "EAGLE evaluation scripts' default": SpecConfig("eagle2", num_steps=6, topk=10, num_draft_tokens=60)}
pd.DataFrame([{"setting": name, **flags(spec)} for name, spec in chosen.items()])

# %%
from workbench.lessons.takeaways import regime

biggest = max(spec.num_draft_tokens for spec in CONFIGS)
here_regime = regime(cost.verify_curve.fit, biggest)
print("verify cost (the step cost), median over its rounds: "
      + "; ".join(f"N = {n}: {ms:.1f} ms" for n, ms in cost.verify if n <= biggest))
display(Markdown(
    "**Takeaway.** The flags carry over one to one between this engine and SGLang; only EAGLE's own "
    "code is off by one in depth. What a setting costs is a property of the machine: for the verify blocks "
    f"tried here (up to {biggest} tokens, {THREADS}, read off the non-decreasing fit of the step cost's verify "
    f"curve) this machine is {here_regime.sentence()} (notebook 6's `regime`). On a memory-bound "
    "GPU the verify block should be nearly free and the larger trees of the EAGLE evaluation scripts (60 "
    "tokens) should win: an *expectation*, not measured here (notebook 6 gives the arithmetic, notebook 7 the "
    "same model under load)."))
