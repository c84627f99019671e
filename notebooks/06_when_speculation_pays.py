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
# # 6. When does speculation pay for one request?
#
# A plain decode step runs the whole target to produce one token. Speculative decoding lets a
# cheap draft propose several tokens and has the target check all of them in **one** forward.
# That wins only if (a) the verify forward over several tokens costs little more than a decode
# step, and (b) the drafts are right often enough. This notebook measures both on this machine,
# for one request at a time, and puts them into the formulas of
# [Leviathan et al. 2023](https://arxiv.org/abs/2211.17192) (also
# [Chen et al. 2023](https://arxiv.org/abs/2302.01318)): with $\alpha$ the chance that a draft
# is accepted and $c$ the cost of a draft forward relative to a target forward (notebook 0), a chain
# of $\gamma$ drafts emits on average
# $$\mathbb{E}[N] = \frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}$$
# tokens per step, and if verifying $\gamma + 1$ tokens costs one decode step the walltime speedup is
# $$S = \frac{\mathbb{E}[N]}{\gamma c + 1}.$$
# Notebook 7 asks the same question under load (a batch of requests) and at long contexts.
#
# **One cost model.** Every prediction below comes from the project's one cost model
# (`workbench/cost_model.py`): this machine's **step cost**, measured once per CPU, threads and
# dtype and cached (`step_cost_for` in `workbench/measure/step_cost.py`: the verify forward at 1
# to 64 tokens, the draft forward, and what a step spends outside the forwards), and
# `StepCost.predict(setting, τ, batch)`, which the `auto` policy, `bench tune`, the bench report
# and the app's Compare tab read too. Each prediction is printed beside the measurement it
# predicts, with the gap in words.
#
# **How the timings are taken.** Every timing runs in fp32, where every speculative output below
# is checked equal to plain decoding, token for token, and with the torch threads the first line
# names. Settings that are compared are timed in **interleaved rounds** (`workbench/timing.py`):
# each round times every one of them once, the first rotating from round to round, so a slow
# spell of a shared machine hits all of them alike. A time is the **median** over the rounds,
# shown with its **range** (min–max); a "best" is named only where its range is clear of every
# other's, and otherwise the settings are called level within noise.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="fp32")

# %% [markdown]
# ## Memory-bound or compute-bound?
#
# A forward over $N$ tokens reads every weight once ($P$ parameters of $b$ bytes each) and does
# about $2PN$ floating-point operations, so its **arithmetic intensity** is
# $$\frac{2PN}{bP} = \frac{2N}{b}\ \text{FLOP per byte of weights}:\quad N \text{ in bf16 } (b = 2),\quad N/2 \text{ in fp32 } (b = 4).$$
# A device is memory-bound while that intensity is below its **ridge point**, peak FLOP/s over
# memory bytes/s; then the forward costs what reading the weights costs, whatever $N$ is.
#
# *Expectation, not measured here:* an H100 SXM does about 990 TFLOP/s of dense bf16 against
# 3.35 TB/s of HBM3 ([NVIDIA's H100 datasheet](https://www.nvidia.com/en-us/data-center/h100/)), a
# ridge of about 295 FLOP per byte, so a bf16 forward stays memory-bound up to roughly
# $N \approx 295$ tokens (less in practice: attention, activations and kernel efficiency move the
# ridge). Verifying a tree of 60 tokens should then cost about one decode step. A CPU core's
# ridge is far lower; the step cost's verify curve below, up to 64 tokens, shows where this machine
# leaves the flat regime (the **bend**), and `regime` in `workbench/lessons/takeaways.py` names the
# regime of any verify size from it (notebooks 7 and 8 use the same function). Beside the curve, this machine's own
# **roofline** is measured (`workbench/measure/floor.py`, the same measurement as the bench report's):
# the memory floor (the weights' bytes over the read bandwidth, timed on a 512 MB sum) and the
# compute floor (the forward's FLOP over the peak rate, timed on a 1024 × 1024 matrix product),
# the larger of the two at each $N$: the least a forward of $N$ tokens can cost here, whatever the code.

# %%
import numpy as np
import plotly.graph_objects as go
import torch
from IPython.display import Markdown, display

from workbench.lessons.machine import cpu_model

params = sum(p.numel() for p in wb.target.parameters())
bytes_per_param = wb.target.lm_head.weight.element_size()
weight_bytes = params * bytes_per_param
THREADS = f"{cpu_model()}, {wb.dtype_name}, {torch.get_num_threads()} torch thread{'s' * (torch.get_num_threads() != 1)}"
print(f"{params / 1e6:.0f} M parameters in {wb.dtype_name}: {weight_bytes / 1e6:.0f} MB of weights read by every forward")
for n in (1, 8, 64):
    print(f"N = {n:>2} tokens: {2 * params * n / 1e9:5.2f} GFLOP, "
          f"{2 * params * n / weight_bytes:5.1f} FLOP per byte of weights (2N/b = {2 * n / bytes_per_param:g})")

# %% [markdown]
# ## This machine's step cost
#
# `step_cost` (`workbench/lessons/predictions.py`) asks `step_cost_for` for the cost of the
# loaded target with the shipped head at this notebook's threads: the one measurement every
# prediction below reads, taken once (three rounds, after a committed prefix of 128 tokens) and
# cached. Its verify curve is what a forward over $N$ tokens costs ($N = 1$ is a plain decode
# step): the points are the medians over the measurement's rounds with their range, and the line
# is their **non-decreasing fit** (`Curve.fit`), which the sentences naming a regime or a bend
# read; a prediction reads the medians as measured (`workbench/cost_model.py` says why). The
# **elasticity** of a segment, $\log(t_2/t_1) / \log(N_2/N_1)$, says how the cost follows $N$: 0 is
# flat (memory-bound: reading the weights dominates), 1 is proportional (compute-bound). The
# README's figures were measured with other torch threads than these notebooks: the sentence under
# the figure says which, with a decode step's cost at both where this machine has measured it.

# %%
from workbench.lessons.predictions import cached_at_threads, readme_record, record_threads, step_cost
from workbench.lessons.cost_curve import curve_figure
from workbench.lessons.takeaways import bend, bend_sentence, elasticity, regime, threads_sentence
from workbench.measure.floor import compute_floor, memory_floor, ridge_tokens, roofline_ms
from workbench.measure.step_cost import PREFIX, ROUNDS as COST_ROUNDS

cost = step_cost(wb)  # the shipped head's step cost at this notebook's threads: cached, or measured now
verify = cost.verify_curve.fit  # for the sentences that name a regime
SIZES = cost.verify_curve.sizes
here_threads, readme = torch.get_num_threads(), record_threads()
other = cached_at_threads(wb, wb.loaded_draft, readme)
print(f"step cost: {cost.source}; measured {cost.measured}")
print("verify ms: " + ", ".join(f"N={n}: {ms:.1f}" for n, ms in cost.verify))
print("draft ms:  " + ", ".join(f"R={r}: {ms:.2f}" for r, ms in cost.draft))
mem_floor, comp_floor = memory_floor(wb.target), compute_floor(wb.target, PREFIX)
roof = {n: roofline_ms(mem_floor, comp_floor, n) for n in SIZES}
ridge = ridge_tokens(mem_floor, comp_floor)
curve_figure(cost.verify_curve, f"One target forward over N tokens (the step cost: prefix of {PREFIX}; {THREADS}; "
                                f"median and range of {COST_ROUNDS} rounds)", roofline=roof, rounds=COST_ROUNDS).show()

# %%
knee = bend(verify)
segments = ", ".join(f"{lo}→{hi}: {elasticity(verify, lo, hi):.2f}" for lo, hi in zip(SIZES, SIZES[1:]))
print(f"elasticity per segment of the fit: {segments}")
decode = cost.verify_curve.range_at(1)
display(Markdown(
    f"**Takeaway.** Here a decode step (N = 1, prefix {PREFIX}) takes {cost.verify_ms(1):.1f} ms "
    f"({decode[0]:.1f}–{decode[1]:.1f} over the measurement's rounds; {THREADS}). This machine is "
    f"{regime(verify, 8).sentence()}; and {regime(verify, SIZES[-1]).sentence()}. " + bend_sentence(verify)
    + " On a memory-bound GPU the curve would stay flat far longer (the expectation above). "
    + threads_sentence(here_threads, readme, {here_threads: cost.verify_ms(1),
                                              readme: other.verify_ms(1) if other else None})
    + (f" (The step costs read: {cost.measured}" + (f"; {other.measured}" if other else "")
       + f". The README's threads: its record, `{readme_record()}`.)")))
bw, peak = mem_floor["read_gbs"], comp_floor["peak"]
over = {n: verify.at(n) / roof[n] for n in SIZES}
widest, closest = max(over, key=over.get), min(over, key=over.get)
display(Markdown(
    f"**The roofline here.** The {mem_floor['weights_mb']:.0f} MiB of weights at {bw['gbs']:.1f} GB/s "
    f"({bw['lo']:.1f}–{bw['hi']:.1f} over {bw['repeats']} reads) give a memory floor of {mem_floor['floor_ms']:.1f} ms; "
    f"{comp_floor['gflop_per_token']:.2f} GFLOP per token at {peak['gflops']:.0f} GFLOP/s ({peak['lo']:.0f}–{peak['hi']:.0f} "
    f"over {peak['repeats']} products) give {comp_floor['gflop_per_token'] / peak['gflops'] * 1e3:.1f} ms per token of compute. "
    f"The two floors meet at **{ridge} tokens**, this machine's ridge: past it no code can verify N tokens within the memory floor "
    f"of one decode step. The measured forward (the fit) is {over[1]:.1f}× its roofline at N = 1 and "
    f"{over[SIZES[-1]]:.1f}× at N = {SIZES[-1]}; the gap is widest at N = {widest} ({over[widest]:.1f}×) and narrowest at "
    f"N = {closest} ({over[closest]:.1f}×). "
    + ("So the engine is furthest from what this machine allows where speculation lives, at a few tokens, and what it pays "
       "there beyond the weights' bytes is the few-row products' path through the BLAS and the operators between them "
       "(docs/benchmarks.md, \"What a forward spends outside the products\"; what this CPU's product path is worth against "
       "`F.linear` is measured in \"The few-row linear order, measured per CPU\")." if widest <= 16 else
       "So the gap is not widest at the few tokens speculation verifies here.")))

# %% [markdown]
# ## α and c, measured
#
# A greedy chain (`SpecConfig.linear(γ)`, `topk = 1`) makes each step a run of Bernoulli trials:
# draft $k$ is compared only if drafts $1..k-1$ were accepted. With $n$ accepted drafts in a step,
# the step saw $n$ successes, plus one failure when $n < \gamma$; $\alpha$ is successes over
# trials (`workbench/lessons/chain_model.py`), counted on each step's **walk length** $n + 1$
# (`Setting.walk_lengths`). $\tau$ is the mean of the tokens each verify step emitted
# (`workbench/metrics.py`): a last step cut at `max_new_tokens` counts what it appended. The
# two differ only at such a cut step, and α must not read it: all of its trials happened, so its
# emitted count would record a failure that never occurred. $c$ is one draft forward (one row)
# over one target decode step, both read off the step cost above. Speeds are measured as
# Spec-Bench does: batch 1, tokens per second, plain decoding and the chain in `ROUNDS`
# interleaved rounds, by `measure_settings` (`workbench/lessons/settings.py`) on the prompts and
# length notebook 8 uses too: the chain of 3 there is this very setting, with the same τ, timed
# again in notebook 8's own rounds.

# %%
from workbench.lessons.chain_model import chain_alpha, held_out_check
from workbench.lessons.settings import MAX_NEW_TOKENS, lesson_prompts, measure_settings
from workbench.measure.probe import probed

ROUNDS = 3
GAMMA = 3  # drafts per chain step
prompts = lesson_prompts(wb)
probes = []  # the target's part timed again after each prompt in each round: the step cost read at these runs' pace
measured = measure_settings(wb, [SpecConfig("vanilla"), SpecConfig.linear(GAMMA)], prompts, ROUNDS, probes=probes,
                            probe_sizes=range(2, 10))  # every chain of the figure below: up to 9 verify tokens
vanilla, chain = measured.values()
run_cost = probed(cost, probes, head=True)  # its verify, prefill and head forwards the probes' medians
speedup = chain.speedup
steps = [w for lengths in chain.walk_lengths.values() for w in lengths]  # n + 1 per step, the walk's
alpha = chain_alpha(steps, GAMMA)
tau = chain.tau
c = cost.draft_ms(1) / cost.verify_ms(1)  # one draft row over a decode step, from the one step cost
print(f"{len(prompts)} Spec-Bench prompts ({', '.join(prompts)}), {MAX_NEW_TOKENS} new tokens each, {len(steps)} chain steps; "
      f"output equal to plain decoding on {chain.equal_to_plain} of {len(prompts)}")
print(f"alpha = {alpha:.3f}   tau (chain of {GAMMA}) = {tau:.2f}   c = {c:.3f} (step cost: draft {cost.draft_ms(1):.2f} ms "
      f"/ decode {cost.verify_ms(1):.1f} ms)")
print(f"vanilla {vanilla.tok_s.with_unit('tok/s')}; chain {chain.tok_s.with_unit('tok/s')}; "
      f"speedup {speedup.with_unit('×')}")

# %% [markdown]
# The formula's $S$ assumes the verify forward costs one decode step whatever its size (the GPU
# expectation) and nothing outside the forwards. Both predictions below are `StepCost.predict`
# for a chain of γ at τ = E[N](α): one on `memory_bound(run_cost)`, the step cost with its verify
# flat at a decode step and no overhead (Leviathan's assumption, through the same model), and one on
# the step cost as measured, which charges the chain what the engine runs: a verify over γ + 1
# tokens, the draft extend over the tokens kept and γ − 1 more draft levels, and the step's overhead.
# Both read the step cost at the pace of the runs above (`run_cost`): in each of their rounds a probe
# after each prompt timed the target's verifies and the head's forwards again
# (`workbench/measure/probe.py`), and those medians stand in the cached curves' place, the overhead kept. The cached curves were timed
# at another moment, and these two cores drift by a fifth from one minute to the next. Both curves
# are a decode step's speedup; the measured one is in tokens per second over whole answers, whose
# prefill speculation does not shorten, so the point beside it prices those very answers: each one's
# prefill, the draft's catch-up over its prompt and its decode steps at the τ measured on it
# (`lessons.predictions.answers_speedup`).

# %%
from plotly.subplots import make_subplots

from workbench.lessons.chain_model import expected_tokens, some_gamma_helps
from workbench.lessons.figures import legend_below
from workbench.lessons.predictions import answers_speedup, memory_bound

check = held_out_check(steps, GAMMA)  # α from the even-numbered steps, the mean walk of the odd-numbered ones
gammas = list(range(1, 9))
expected = {g: expected_tokens(alpha, g) for g in gammas}
held_curve = [expected_tokens(check.alpha, g) for g in gammas]
flat_cost = memory_bound(run_cost)
s_formula = {g: flat_cost.predict(SpecConfig.linear(g), expected[g]).speedup for g in gammas}
s_measured = {g: run_cost.predict(SpecConfig.linear(g), expected[g]).speedup for g in gammas}
at_answers = answers_speedup(run_cost, chain.spec, [len(ids) for ids in prompts.values()],
                             [len(chain.outputs[c]) for c in prompts],
                             [chain.tau_of(c) for c in prompts])  # each answer's prefill and τ, as tokens/s count them

fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per step E[N]", "speedup S"))
fig.add_scatter(x=gammas, y=held_curve, name="E[N], α fitted on half the steps", row=1, col=1)
fig.add_scatter(x=[GAMMA], y=[check.measured], mode="markers", marker=dict(size=12, symbol="x"),
                error_y=dict(type="data", array=[check.noise]),
                name=f"mean walk length of the other half (γ = {GAMMA}), ± 2 s.e.", row=1, col=1)
fig.add_scatter(x=gammas, y=list(s_formula.values()), name="predicted, verify flat at a decode step", row=1, col=2)
fig.add_scatter(x=gammas, y=list(s_measured.values()), name="predicted, the step cost as measured", row=1, col=2)
fig.add_scatter(x=[GAMMA], y=[at_answers], mode="markers", marker=dict(size=10, symbol="circle-open"),
                name=f"predicted for these answers at each one's measured τ, prefill included (γ = {GAMMA})", row=1, col=2)
fig.add_scatter(x=[GAMMA], y=[speedup.median], mode="markers", marker=dict(size=12, symbol="x"),
                error_y=dict(type="data", symmetric=False, array=[speedup.high - speedup.median],
                             arrayminus=[speedup.median - speedup.low]),
                name=f"measured speedup (median, range of {ROUNDS} rounds)", row=1, col=2)
fig.add_hline(y=1, line_dash="dot", row=1, col=2)
fig.update_xaxes(title="γ (drafts per step)")
fig.update_layout(height=460, margin=dict(t=90), title=dict(
    text=f"A chain of γ drafts: model and measurement ({THREADS})", font=dict(size=14), x=0.01, xanchor="left", y=0.97))
legend_below(fig, rows=3)
fig.show()

# %%
from workbench.lessons.takeaways import gap

best_flat, best_here = max(s_formula, key=s_formula.get), max(s_measured, key=s_measured.get)
outcome = ("c < α, so the formula promises a speedup for some γ (Leviathan et al.'s Corollary 3.9)"
           if some_gamma_helps(alpha, c) else "c ≥ α, so no γ can give a speedup, whatever the verify costs")
at_tau = run_cost.predict(chain.spec, tau)  # the measured τ, not E[N](α): the cost model alone against the clock
display(Markdown(
    f"**Takeaway.** Measured α = {alpha:.2f} and c = {c:.2f}: {outcome}. With the verify flat at a decode step the "
    f"model's best chain is γ = {best_flat} ({s_formula[best_flat]:.2f}×); with this machine's step cost, γ = "
    f"{best_here} ({s_measured[best_here]:.2f}×). "
    f"Fitted on {check.fit_steps} of the chain's steps, α = {check.alpha:.2f} predicts E[N] = {check.predicted:.2f} "
    f"for the other {check.held_steps}, whose walks kept {check.measured:.2f} tokens on average: the i.i.d. model "
    f"{check.verdict()}. The chain of {GAMMA} (τ = {tau:.2f} over all {len(steps)} steps, output equal to plain "
    f"decoding on {chain.equal_to_plain} of {len(prompts)} prompts), from the step cost at each answer's measured τ, "
    f"its prefill and the draft's catch-up over its prompt priced as the measured tokens per second count them: "
    f"{gap(at_answers, speedup)} (the decode steps alone at the pooled τ: {at_tau.speedup:.2f}×); the formula's S, "
    "with the verify "
    "flat at a decode step and no prefill: "
    f"{gap(flat_cost.predict(chain.spec, tau).speedup, speedup)} ({THREADS}; the step cost read at these runs' "
    f"pace: {run_cost.measured})."))

# %% [markdown]
# ## Per output token, or end to end?
#
# Serving frameworks report two latencies. **TPOT** (time per output token) is the time of every
# token after the first; the **end-to-end** latency adds the time to the first token (**TTFT**),
# which is the prefill: one target forward over the whole prompt, the same in plain and
# speculative decoding (the draft head's own pass over the prompt runs in the first speculative
# step, so it counts in TPOT). Speculation shortens TPOT only, so its end-to-end speedup for an
# answer of $n$ tokens,
# $$\frac{\text{TTFT}_\text{plain} + (n - 1)\,\text{TPOT}_\text{plain}}{\text{TTFT}_\text{spec} + (n - 1)\,\text{TPOT}_\text{spec}},$$
# starts near 1 and approaches the TPOT speedup as the answer grows (`workbench/lessons/latency.py`).
# Both come from the runs above (`measure_settings` clocks each request's first token and its end).

# %%
import pandas as pd

from workbench.lessons.latency import latency_figure, length_for
from workbench.lessons.takeaways import compare, same_work_sentence, versus
from workbench.metrics import Latency

latency = pd.DataFrame([{
    "setting": st.label, "TTFT (ms)": st.spread("ttft_ms").with_unit("ms"), "TPOT (ms)": st.spread("tpot_ms").with_unit("ms"),
    "TPOT predicted (ms)": round(run_cost.predict(st.spec, st.tau).tpot_ms, 1),
    "end to end (ms)": st.spread("e2e_ms").with_unit("ms"), "tokens/s": st.tok_s.with_unit("tok/s"),
} for st in measured.values()]).set_index("setting")
display(latency)
tpot_gain = chain.faster_than(vanilla, "tpot_ms")  # per round: plain's TPOT over the chain's
e2e_gain = chain.faster_than(vanilla, "e2e_ms")
ttft_gain = chain.faster_than(vanilla, "ttft_ms")
plain_lat = Latency(vanilla.spread("ttft_ms").median, vanilla.spread("tpot_ms").median)
chain_lat = Latency(chain.spread("ttft_ms").median, chain.spread("tpot_ms").median)
latency_figure(plain_lat, chain_lat, MAX_NEW_TOKENS, e2e_gain, tpot_gain,
               f"A chain of {GAMMA} ({THREADS}, batch 1)").show()

# %%
n90 = length_for(plain_lat, chain_lat, 0.9)
agree = {"level within noise": "level within noise: at this length the prefill is too small a share to show",
         "below": "smaller, beyond the noise: the prefill, which speculation does not shorten, is part of every request",
         "above": "larger, beyond the noise"}[compare(e2e_gain, tpot_gain)]
display(Markdown(
    f"**Takeaway.** Per output token the chain of {GAMMA} is {tpot_gain.with_unit('×')} as fast as plain decoding; "
    f"end to end, over answers of {MAX_NEW_TOKENS} tokens, {e2e_gain.with_unit('×')}: {agree}. The first token "
    f"takes {vanilla.spread('ttft_ms').with_unit('ms')} in plain decoding and "
    f"{chain.spread('ttft_ms').with_unit('ms')} with the chain (plain over chain "
    f"{same_work_sentence(ttft_gain, 'prefill')}). "
    + (f"From the medians, the end-to-end speedup reaches 90 % of the TPOT speedup from answers of {n90} tokens "
       "on; for shorter answers (or longer prompts, whose prefill costs more) it stays further below. "
       if n90 > 1 else
       "From the medians, the end-to-end speedup is within 90 % of the TPOT speedup already at one token. ")
    + f"The step cost's TPOT, a step over the tokens it emits: plain decoding "
      f"{gap(run_cost.predict(vanilla.spec).tpot_ms, vanilla.spread('tpot_ms'), 'ms', 1)}; the chain "
      f"{gap(run_cost.predict(chain.spec, tau).tpot_ms, chain.spread('tpot_ms'), 'ms', 1)} (read at the runs' "
      "pace, as above). "
    + f"The speedup in tokens per second quoted above, {speedup.with_unit('×')}, is a third measure: the mean over "
      "the prompts of each answer's tokens per second (Spec-Bench's), where these two are ratios of the mean "
      "milliseconds, so a prompt whose answer stops early weighs differently in each; against the TPOT "
      f"speedup's range it is {versus(speedup.median, tpot_gain)}."))

# %% [markdown]
# ## Does acceptance decay over a long output?
#
# The head was trained on short answers; does it keep up deep into a long one? The same chain of
# 3 decodes answers of `LONG` tokens to the shortest first turn of every Spec-Bench category,
# all in one batch (greedy: each request's walk compares its own drafts with its own target
# argmaxes, so τ does not depend on the batch; nothing here is timed). Each verify step is placed
# at its output position; the **walk length** $n + 1$ is used, not what the step emitted, so the
# step cut at `max_new_tokens` does not fake a decay at the very end
# (`workbench/lessons/position.py`). The interval of the slope is bootstrapped over prompts: a
# resample draws whole answers, since steps of one answer are not independent.

# %%
from workbench.lessons.position import PER, by_bin, position_figure, steps_by_position, trend
from workbench.lessons.settings import all_categories

LONG, BIN = 192, 32
long_prompts = lesson_prompts(wb, all_categories())
long_runs, _ = wb.generate(list(long_prompts.values()), SpecConfig.linear(GAMMA), SamplingParams(), LONG)
per_prompt = {c: steps_by_position(r.accept_lengths, r.drafts_accepted) for c, r in zip(long_prompts, long_runs)}
rows = by_bin(per_prompt, BIN)
decay = trend(per_prompt)
print(f"{len(long_runs)} answers, {sum(len(r.output_ids) for r in long_runs)} tokens, "
      f"{sum(map(len, per_prompt.values()))} chain steps; answers that stopped before {LONG} tokens: "
      f"{sum(r.finish_reason == 'stop' for r in long_runs)}")
print(pd.DataFrame(rows).round(2).to_string(index=False))
position_figure(rows, decay, f"Tokens kept per step of a chain of {GAMMA} along the answer "
                             f"({len(long_runs)} Spec-Bench prompts, bins of {BIN} positions)").show()

# %%
first, last = rows[0], rows[-1]
direction = {"below": "decays", "above": "grows", "level within noise": "neither decays nor grows beyond the noise"}
display(Markdown(
    f"**Takeaway.** Along answers of up to {LONG} tokens, the chain's walk length {direction[decay.slope.side()]}: "
    f"the straight-line fit changes by {decay.slope.estimate:+.2f} tokens per step every {PER} output tokens "
    f"({decay.slope.level:.0%} interval {decay.slope.low:+.2f} to {decay.slope.high:+.2f} over {decay.slope.n} "
    f"prompts). Positions {first['from']}–{first['to']} keep {first['mean walk']:.2f} tokens per step "
    f"({first['steps']} steps of {first['prompts']} prompts), positions {last['from']}–{last['to']} "
    f"{last['mean walk']:.2f} ({last['steps']} steps of {last['prompts']} prompts)."))

# %% [markdown]
# ## How good must the draft be?
#
# α above belongs to the shipped head. What would a better draft buy? The engine can draft with
# the target itself cut short: its first $n$ layers, then its final norm and lm_head (an *early
# exit*, as self-speculative decoding drafts; `early_exit_trees` in `workbench/analysis/oracle.py`).
# Fewer layers make a worse draft; all of them agree with the target on every token. Each exit
# drafts the tree the head drafts, at the same contexts, with the same procedure and budget
# (8/5/4, the tree SGLang picks for a Llama target when none is given), and the whole target
# verifies it: greedy, a tree is worth exactly the tokens its step emits. Its **top-1 agreement**
# is how often its most likely token is the target's, at every position of the answers
# (teacher-forced); the head's is measured the same way, as
# `python -m workbench.train evaluate --agreement` does. It is not the acceptance rate α of a
# chain, which counts a draft only once the drafts before it were accepted, on the draft's own
# continuation (notebook 10 measures that α for early exits of the same target).

# %%
from statistics import mean

from workbench.analysis.expectation import step_expectation
from workbench.analysis.oracle import early_exit_trees
from workbench.lessons import smoke
from workbench.models.heads import default_draft_dir
from workbench.train.evaluate import answer_sequences, measure_head

TREE = SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)
EXITS = (24, 26, 27, 28, 29, wb.target.config.num_layers)
ANSWER_TOKENS = smoke.new_tokens(48)  # 48 (fewer when the test suite runs the notebook at its smoke size)
eng = wb.engine(TREE, SamplingParams(), trace=True)
eng.add_requests(list(prompts.values()), ANSWER_TOKENS)
head_worth, points = [], []
while not eng.done:
    for rec in eng.step_records():
        if rec.kind == "spec":
            head_worth.append(step_expectation(rec, TREE.num_steps).accept_length)
            points.append((rec.request, rec.kv.committed_before))  # the context and root of this step's tree
answers = [(r.prompt_ids, r.output_ids) for r in eng.requests]
exits = [early_exit_trees(wb.target, [p + o for p, o in answers], [len(p) for p, _ in answers], points, n,
                          TREE.num_steps, TREE.topk, TREE.num_draft_tokens, SamplingParams()) for n in EXITS]
head_agreement = measure_head(default_draft_dir(), wb.target,
                              answer_sequences(wb.target, *map(list, zip(*answers))))["top1"]
exit_worth = [mean(x.accept_length for x in e.expectations) for e in exits]
for e, w in zip(exits, exit_worth):
    print(f"target cut after {e.num_layers:>2} layers: top-1 agreement {e.agreement:.3f}, "
          f"tree worth {w:.2f} tokens per step")
print(f"the head: top-1 agreement {head_agreement:.3f}, tree worth {mean(head_worth):.2f} ({len(points)} steps)")

fig = go.Figure([
    go.Scatter(x=[e.agreement for e in exits], y=exit_worth, mode="lines+markers+text", name="early exits",
               text=[f"{e.num_layers} layers" for e in exits],
               textposition=["top left" if i % 2 else "bottom right" for i in range(len(exits))]),  # neighbours apart
    go.Scatter(x=[head_agreement], y=[mean(head_worth)], mode="markers", marker=dict(size=14, symbol="star"),
               name="the shipped head"),
])
fig.add_hline(y=TREE.num_steps + 1, line_dash="dot", annotation_text="every level accepted")
fig.update_layout(title=f"What a draft's top-1 agreement buys at the {TREE.num_draft_tokens}/{TREE.num_steps}/{TREE.topk} tree",
                  height=400, xaxis=dict(title="top-1 agreement: its top token is the target's (teacher-forced)",
                                         range=[0, 1.08]),
                  yaxis_title="tokens per step")
fig.show()

# %%
lo, hi = exits[1], exits[-2]
per_tenth = (exit_worth[-2] - exit_worth[1]) / max(hi.agreement - lo.agreement, 1e-9) / 10
curve = sorted(zip((e.agreement for e in exits), exit_worth))
as_exit = float(np.interp(head_agreement, *zip(*curve)))  # an exit of the head's agreement, read off the curve
than_exit = "more than" if mean(head_worth) > as_exit else "no more than"
whole = (f"Even the whole target as the draft is worth {exit_worth[-1]:.2f}, not {TREE.num_steps + 1}: it ranks its "
         f"tree by its own confidence, and {TREE.num_draft_tokens - 1} drafted tokens cannot hold every second guess "
         "and the whole spine."
         if exit_worth[-1] < TREE.num_steps + 1 - 1e-6 else
         f"The whole target as the draft takes every level ({TREE.num_steps + 1} tokens per step).")
display(Markdown(
    f"**Takeaway.** From the exit after {lo.num_layers} layers to the one after {hi.num_layers}, top-1 agreement "
    f"goes {lo.agreement:.2f} → {hi.agreement:.2f} and the tree's worth {exit_worth[1]:.2f} → {exit_worth[-2]:.2f}: "
    f"about {per_tenth:.2f} tokens per step for each 0.1 of top-1 agreement. "
    f"The head's top-1 agreement is {head_agreement:.2f} and its trees are worth {mean(head_worth):.2f}, "
    f"{than_exit} the {as_exit:.2f} an exit of that agreement would be worth (read off the curve). "
    f"{whole} These are {len(points)} steps of {len(answers)} short answers; "
    "`docs/bench/head-training.md` §13 has the same measurement on 20 MT-bench questions at both trees."))
