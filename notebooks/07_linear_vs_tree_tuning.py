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
# batch 1) and reports the accept length τ (tokens per target forward: the tokens each verify step
# emitted, so a last step cut at `max_new_tokens` counts what it appended) and the speedup in tokens
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
    SpecConfig("eagle2", 5, 4, 8),  # num_steps, topk, num_draft_tokens: what SGLang picks for a Llama target
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
# | `topk` | `--speculative-eagle-topk` | `top_k` | chain: 1; static tree: not carried over (below) |
# | `num_draft_tokens` (with the root) | `--speculative-num-draft-tokens` | `total_token` | `num_speculative_tokens + 1` |
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
# vLLM v1 verifies a chain by default and has an **experimental static tree**:
# `speculative_config["speculative_token_tree"]` lists the node paths of one fixed tree, e.g.
# `[(0,), (1,), (0, 0)]`, verified with its tree attention backend. Its EAGLE proposer
# (`vllm/v1/spec_decode/eagle.py` at f7eef1b) reads from that list only how many nodes each depth
# holds, and gives every node of a depth the same number of children, the top-k of its logits:
# the next depth's count divided by this one's (a list of 4 nodes at depth 1 and 3 at depth 2, as
# the 8-node export below, gives each depth-1 node 3 // 4 = 0 children: it is not grown as
# written). What vLLM lacks is the **dynamic** tree of
# EAGLE-2, reshaped at every step by the path scores. For a `topk > 1` setting the vLLM column
# below (`workbench.engine.frameworks.framework_flags`, the same mapping the app's Compare tab and
# `python -m workbench.bench tune` print) writes EAGLE-1's default static tree cut to the setting's
# `num_draft_tokens - 1` paths: it keeps the size of the verify block and nothing of `topk` or
# `num_steps`. For eagle2:4/3/2 (topk 2, 3 levels) that is `[(0,), (1,), (2,)]`, three children of
# the root and no deeper node: the nearest fixed tree of the same size, not the same tree.

# %%
from workbench.engine.frameworks import framework_flags  # the one mapping, shared with the app and bench tune

def flags(spec):
    return {"here": spec.describe(), **framework_flags(spec)}

spec_of = {label(s): s for s in CONFIGS}
runner_up = ("fastest tree here", best_tree) if best == best_linear else ("fastest chain here", best_linear)
chosen = {"fastest here": spec_of[best], runner_up[0]: spec_of[runner_up[1]],
          "SGLang's pick for a Llama target": SpecConfig("eagle2", 5, 4, 8),
          "EAGLE evaluation scripts' default": SpecConfig("eagle2", 6, 10, 60)}
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
    "should be nearly free and the larger trees of the EAGLE evaluation scripts (60 tokens) should win: "
    "an *expectation*, not measured here (notebook 6 gives the arithmetic)."))
