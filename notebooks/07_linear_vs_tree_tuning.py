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
import pandas as pd
import plotly.graph_objects as go
from IPython.display import Markdown, display

from workbench.lessons.settings import CATEGORIES, MAX_NEW_TOKENS, label, lesson_prompts, measure_settings

prompts = lesson_prompts(wb)
print({c: len(ids) for c, ids in prompts.items()}, "prompt tokens: the shortest first turn of each category")

# %%
RUNS = 2
CONFIGS = [
    SpecConfig("vanilla"),
    *(SpecConfig.linear(s) for s in (1, 3)),  # chains: num_steps
    SpecConfig("eagle2", 3, 2, 4), SpecConfig("eagle2", 3, 2, 6),  # num_draft_tokens
    SpecConfig("eagle2", 3, 4, 6),  # topk
    SpecConfig("eagle2", 5, 4, 8),  # num_steps, topk and num_draft_tokens: SGLang's default
]
settings = measure_settings(wb, CONFIGS, prompts, RUNS)  # the helper notebook 6 measures its chain of 3 with
per_config = pd.DataFrame([{
    "config": name, "method": st.spec.method, "tau": st.tau, "tok/s": st.tok_s.median,
    "speedup": st.speedup.median, "speedup range": f"{st.speedup.low:.2f}–{st.speedup.high:.2f}",
} for name, st in settings.items()]).set_index("config")
per_config.round(2)

# %%
spec_only = per_config[per_config.method != "vanilla"]
from workbench.viz.compare import speedup_scatter  # names placed so that none overprints

points = [{"method": st.spec.method, "label": name, "tau": st.tau, "speedup": st.speedup.median,
           "low": st.speedup.low, "high": st.speedup.high}
          for name, st in settings.items() if st.spec.speculative]
speedup_scatter(points, f"τ and speedup over plain decoding ({wb.dtype_name}, batch 1, {MAX_NEW_TOKENS} new tokens; "
                        f"labels: linear:S, eagle2:D/S/K as the bench reads them; median and range of {RUNS} runs)").show()

# %%
best, top_tau = spec_only.speedup.idxmax(), spec_only.tau.idxmax()
best_linear = spec_only[spec_only.method == "linear"].speedup.idxmax()
best_tree = spec_only[spec_only.method == "eagle2"].speedup.idxmax()
if spec_only.tau.max() - spec_only.tau.min() < 0.05:
    why = ("τ hardly moved across the settings (the draft head is rarely right), so the setting with the "
           "cheapest step won. ")
elif best != top_tau:
    why = (f"The highest τ came from {top_tau} (τ = {spec_only.tau[top_tau]:.2f}), but it did not win: "
           "the winner balances τ against the cost of a step (see the closing cell for what a verify node "
           "costs here). ")
else:
    why = "The setting with the highest τ also won: its extra verify nodes were worth their cost. "
verdict = "faster than" if settings[best].speedup.median > 1 else "no faster than"
ahead = [n for n in spec_only.index if n != best and settings[n].speedup.high >= settings[best].speedup.low]
display(Markdown(
    f"**Takeaway.** The fastest speculative setting on this machine is **{best}**: "
    f"{settings[best].speedup.with_unit('×')} plain decoding ({verdict} it), τ = {spec_only.tau[best]:.2f}"
    + (f"; {', '.join(ahead)} overlap{'s' if len(ahead) == 1 else ''} its range, so the order among them is "
       "level within noise" if ahead else "") + f". Best chain: "
    f"{best_linear} ({spec_only.speedup[best_linear]:.2f}×); best tree: {best_tree} "
    f"({spec_only.speedup[best_tree]:.2f}×). " + why
    + f"The chain linear:3 is notebook 6's chain of 3, on the same prompts and {MAX_NEW_TOKENS} new tokens "
      "(both measured by `measure_settings`): its τ is the same number there."))

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
# timings above ran in the machine's fast dtype; the equality is checked in fp32, on the same
# prompts and settings.

# %%
from workbench.lessons.divergence import divergence
from workbench.lessons.start import load_quietly

wb32 = load_quietly("fp32")


def output32(spec, category):
    """The fp32 greedy output of one setting on one prompt."""
    (r,), _ = wb32.generate([prompts[category]], spec, SamplingParams(), MAX_NEW_TOKENS)
    return r.output_ids


plain32 = {c: output32(CONFIGS[0], c) for c in prompts}
pairs32 = [(spec, c) for spec in CONFIGS[1:] for c in prompts]
equal32 = sum(output32(spec, c) == plain32[c] for spec, c in pairs32)
print(f"fp32: {equal32} of {len(pairs32)} speculative outputs equal plain greedy decoding, token for token")
del wb32

# %%
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
    f"**Takeaway.** In fp32, {equal32} of {len(pairs32)} speculative outputs equal plain greedy decoding. In "
    f"{wb.dtype_name}, the timed runs above, {len(pairs32) - len(diverged)} of {len(pairs32)} do"
    + (f"; where one parts, the target's two best tokens there are {min(d.margin for *_, d in diverged):.3f} to "
       f"{max(d.margin for *_, d in diverged):.3f} logits apart: a near-tie that a differently batched "
       f"{wb.dtype_name} forward rounds the other way." if diverged and wb.dtype_name != "fp32" else ".")))

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
# not to the same tree. The table below is `workbench.engine.frameworks.framework_flags`, the same
# one the app's Compare tab and `python -m workbench.bench tune` print.

# %%
from workbench.engine.frameworks import framework_flags  # the one mapping, shared with the app and bench tune

def flags(spec):
    return {"here": spec.describe(), **framework_flags(spec)}

spec_of = {label(s): s for s in CONFIGS}
runner_up = ("fastest tree here", best_tree) if best == best_linear else ("fastest chain here", best_linear)
chosen = {"fastest here": spec_of[best], runner_up[0]: spec_of[runner_up[1]],
          "SGLang default": SpecConfig("eagle2", 5, 4, 8), "EAGLE paper default": SpecConfig("eagle2", 6, 10, 60)}
pd.DataFrame([{"setting": name, **flags(spec)} for name, spec in chosen.items()])

# %%
from workbench.bench.cost import measure_verify_cost
from workbench.lessons.cost_curve import CostCurve
from workbench.lessons.takeaways import regime

biggest = max(spec.num_draft_tokens for spec in CONFIGS)
verify = CostCurve.from_rows(measure_verify_cost(wb.target, sizes=(1, biggest), prefix_len=128, repeats=3, warmup=1))
here_regime = regime(verify, biggest)
display(Markdown(
    "**Takeaway.** The flags carry over one to one between this engine and SGLang; only EAGLE's own "
    "code is off by one in depth. The best setting is a property of the machine: for the verify blocks "
    f"measured here (up to {biggest} tokens) this machine is {here_regime.sentence()} (notebook 6's `regime`, "
    "measured again here), and the fastest setting is the one above. On a memory-bound GPU the verify block "
    "should be nearly free and the larger trees of the EAGLE paper should win: an *expectation*, not "
    "measured here (notebook 6 gives the arithmetic; the EAGLE-2 paper reports its speedups with 60-token "
    "trees on datacenter GPUs)."))
