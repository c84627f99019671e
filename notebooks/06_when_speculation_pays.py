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
# # 6. When does speculation pay off?
#
# A plain decode step runs the whole target to produce one token. Speculative decoding lets a
# cheap draft propose several tokens and has the target check all of them in **one** forward.
# That wins only if (a) the verify forward over several tokens costs little more than a decode
# step, and (b) the drafts are right often enough. This notebook measures both on this machine
# and puts them into the formulas of [Leviathan et al. 2023](https://arxiv.org/abs/2211.17192)
# (also [Chen et al. 2023](https://arxiv.org/abs/2302.01318)): with $\alpha$ the chance that a draft
# is accepted and $c$ the cost of a draft forward relative to a target forward (notebook 0), a chain
# of $\gamma$ drafts emits on average
# $$\mathbb{E}[N] = \frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}$$
# tokens per step, and if verifying $\gamma + 1$ tokens costs one decode step the walltime speedup is
# $$S = \frac{\mathbb{E}[N]}{\gamma c + 1}.$$
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
# ridge is far lower; the curve below goes up to 256 tokens to find where this machine leaves the
# flat regime (the **bend**), and `regime` in `workbench/lessons/takeaways.py` names the regime of
# any verify size from it (notebook 7 uses the same function). Beside the curve, this machine's own
# **roofline** is measured (`workbench/measure/floor.py`, the same measurement as the bench report's):
# the memory floor (the weights' bytes over the read bandwidth, timed on a 512 MB sum) and the
# compute floor (the forward's FLOP over the peak rate, timed on a 1024 × 1024 matrix product),
# the larger of the two at each $N$: the least a forward of $N$ tokens can cost here, whatever the code.

# %%
import numpy as np
import plotly.graph_objects as go
import torch
from IPython.display import Markdown, display

params = sum(p.numel() for p in wb.target.parameters())
bytes_per_param = wb.target.lm_head.weight.element_size()
weight_bytes = params * bytes_per_param
from workbench.lessons.machine import cpu_model

THREADS = f"{cpu_model()}, {wb.dtype_name}, {torch.get_num_threads()} torch thread{'s' * (torch.get_num_threads() != 1)}"
print(f"{params / 1e6:.0f} M parameters in {wb.dtype_name}: {weight_bytes / 1e6:.0f} MB of weights read by every forward")
for n in (1, 8, 64):
    print(f"N = {n:>2} tokens: {2 * params * n / 1e9:5.2f} GFLOP, "
          f"{2 * params * n / weight_bytes:5.1f} FLOP per byte of weights (2N/b = {2 * n / bytes_per_param:g})")

# %% [markdown]
# ## The verify cost curve, measured here
#
# `verify_forwards` builds one target forward over $N$ tree nodes after a committed prefix of
# `PREFIX` tokens, exactly as the engine's verify runs it ($N = 1$ is a plain decode step), for
# $N$ from 1 to 256; `draft_forwards` does the same for the draft head over $R$ rows (a tree
# level of $R$ nodes). `time_forwards` times all of them in `ROUNDS` interleaved rounds, each
# round's value the median of `REPEATS` calls (`workbench/lessons/cost_curve.py`). The points are
# the medians over the rounds with their range; the line is their **non-decreasing fit**
# (`workbench.timing.monotone`): a verify of more tokens never costs less, so a dip between two
# sizes is noise and is pooled. Every cost below is read off that fit. The **elasticity** of a
# segment, $\log(t_2/t_1) / \log(N_2/N_1)$, says how the cost follows $N$: 0 is flat (memory-bound:
# reading the weights dominates), 1 is proportional (compute-bound: the arithmetic dominates). A
# regime or a bend is named from the fit, and each round's own fit is read the same way: where
# they disagree, the sentence says so.

# %%
from workbench.lessons.cost_curve import MeasuredCurve, curve_figure, draft_forwards, time_forwards, verify_forwards
from workbench.metrics import predicted_speedup

ROUNDS, REPEATS, PREFIX = 3, 3, 128
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ROWS = (1, 2, 4, 8, 16, 32, 64)  # draft rows: a tree level, or a batch of chains' level
forwards = {("verify", n): f for n, f in verify_forwards(wb.target, SIZES, PREFIX).items()}
forwards |= {("draft", r): f for r, f in draft_forwards(wb.target, wb.draft, ROWS, PREFIX).items()}
from workbench.lessons.cost_curve import with_plain_products

ORDER_SIZES = (1, 2, 4, 8, 16, 32)  # the few-token forwards, also with every product by F.linear (a section below)
ORDERED = not wb.linear_order.plain_everywhere  # False where this CPU's measurement kept F.linear everywhere
if ORDERED:
    plain = with_plain_products(wb.target, {n: forwards["verify", n] for n in ORDER_SIZES})
    forwards |= {("plain", n): f for n, f in plain.items()}
timed = time_forwards(forwards, ROUNDS, REPEATS)
measured_verify = MeasuredCurve.from_values({n: timed["verify", n] for n in SIZES})
measured_draft = MeasuredCurve.from_values({r: timed["draft", r] for r in ROWS})
verify = measured_verify.fit  # the cost of any verify block, read off the fit
draft_ms = dict(zip(ROWS, measured_draft.fit.ms))
verify_spread = measured_verify.spreads

from workbench.measure.floor import compute_floor, memory_floor, ridge_tokens, roofline_ms

mem_floor, comp_floor = memory_floor(wb.target), compute_floor(wb.target, PREFIX)
roof = {n: roofline_ms(mem_floor, comp_floor, n) for n in SIZES}
ridge = ridge_tokens(mem_floor, comp_floor)
curve_figure(measured_verify, f"One target forward over N tokens (prefix of {PREFIX}; {THREADS}; "
                              f"median and range of {ROUNDS} interleaved rounds)", roofline=roof).show()

# %%
from workbench.lessons.takeaways import bend, bend_sentence, elasticity, regime

knee = bend(verify)
segments = ", ".join(f"{lo}→{hi}: {elasticity(verify, lo, hi):.2f}" for lo, hi in zip(SIZES, SIZES[1:]))
print(f"elasticity per segment of the fit: {segments}")
display(Markdown(
    f"**Takeaway.** Here a decode step (N = 1, prefix {PREFIX}) takes {verify_spread[1].with_unit('ms')} "
    f"({THREADS}). This machine is {regime(verify, 8, measured_verify.round_fits).sentence()}; and "
    f"{regime(verify, SIZES[-1], measured_verify.round_fits).sentence()}. "
    + bend_sentence(verify, measured_verify.round_fits)
    + " On a memory-bound GPU the curve would stay flat far longer (the expectation above)."))
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
       "(docs/benchmarks.md, \"What a forward spends outside the products\")." if widest <= 16 else
       "So the gap is not widest at the few tokens speculation verifies here.")))

# %% [markdown]
# ## What the CPU's product path is worth
#
# Every forward above runs its few-row products (1 to 32 rows) by the implementation this CPU's
# measurement picked at start-up, per row count (`workbench/cpu_choices.py`: `F.linear`,
# `(W @ x^T)^T`, or a packed-weight GEMM; the `[linear]` line printed when the model loaded names
# it). The same interleaved rounds also timed the few-token forwards with every product by plain
# `F.linear` (`with_plain_products`): the same weights, the same outputs within fp32 rounding,
# only the path through the BLAS differs. How much a verify of a few tokens costs in decode steps,
# the number that decides whether speculation pays, is a property of that path as much as of
# the model: a chain of one draft verifies 2 tokens, and pays only if it emits more tokens per
# step than that verify costs in decode steps (its draft's cost aside).

# %%
from workbench.lessons.cost_curve import compare_orders, orders_figure

if ORDERED:
    order_rows = compare_orders({n: timed["verify", n] for n in ORDER_SIZES}, {n: timed["plain", n] for n in ORDER_SIZES})
    orders_figure(order_rows, f"One target forward over N tokens, two product paths (prefix {PREFIX}; {THREADS}; "
                              f"median and range of {ROUNDS} interleaved rounds)").show()
    by_n = {r.tokens: r for r in order_rows}
    steps = {n: (by_n[n].measured.median / by_n[1].measured.median, by_n[n].plain.median / by_n[1].plain.median)
             for n in (2, 4, 8)}
    display(Markdown(
        f"**Takeaway.** The order this CPU's measurement chose: {wb.linear_order.describe()}. Against `F.linear`, a decode step's forward "
        f"takes {by_n[1].measured.median:.1f} ms against {by_n[1].plain.median:.1f} ms ({by_n[1].reading}); a verify of 2 tokens "
        f"{by_n[2].measured.median:.1f} against {by_n[2].plain.median:.1f} ms ({by_n[2].reading}). In decode steps of its own "
        f"path, a verify of " + "; ".join(f"{n} tokens costs {a:.2f} with the measured order and {b:.2f} with `F.linear`"
                                          for n, (a, b) in steps.items())
        + f". So with `F.linear` a chain of one draft must emit more than {steps[2][1]:.2f} tokens per step to pay, "
        f"with the measured order more than {steps[2][0]:.2f}."))
else:
    display(Markdown(f"This CPU's measurement kept `F.linear` for every few-row product ({wb.linear_order.describe()}): "
                     "there is no other path to set beside it here."))

# %% [markdown]
# The whole-run consequence, from a stored run rather than measured here: `python -m
# experiments.beside_plain` runs every method twice on each question, one right after the other,
# with the measured order and with every product by `F.linear`, and writes the comparison into
# its report (`docs/benchmarks.md`, "Both orders in one run"). Its stored result,
# `docs/bench/head-cpu-fp32-beside-plain.json`, names its own machine and threads:

# %%
import json
from pathlib import Path

import workbench

BESIDE = json.loads((Path(workbench.__file__).resolve().parents[1] / "docs/bench/head-cpu-fp32-beside-plain.json").read_text())
bm = BESIDE["meta"]["machine"]
print(f"stored run: {bm['cpu']}, {bm['cores']} cores, {BESIDE['meta']['dtype']}, {bm['torch_threads']} torch threads, "
      f"{BESIDE['meta']['date']}; {bm['linear_order']}")
brows = BESIDE["beside_plain"]["methods"]
print(f"{'method':<14} {'tok/s measured':>15} {'tok/s F.linear':>15} {'x plain, measured':>18} {'x plain, F.linear':>18} "
      f"{'measured / F.linear per question':>34}")
for r in brows:
    q = r["per_question"]
    print(f"{r['method']:<14} {r['tokens_per_s']:>15.1f} {r['tokens_per_s_plain']:>15.1f} {r['x_vanilla']:>17.2f}x "
          f"{r['x_vanilla_plain']:>17.2f}x {q['low']:>24.2f}–{q['high']:.2f}")
spec_rows = [r for r in brows if r["method"] != "vanilla"]
losers = [f"`{r['method']}` {r['x_vanilla_plain']:.2f}x" for r in spec_rows if r["x_vanilla_plain"] < 1]
display(Markdown(
    f"**Takeaway (stored run, {bm['cpu']}, {bm['torch_threads']} threads).** Every method ran "
    f"{min(r['per_question']['low'] for r in brows):.2f}x to {max(r['per_question']['high'] for r in brows):.2f}x faster with the "
    f"measured order, question by question, and every output was the same tokens both ways "
    f"({sum(r['same_output'] for r in brows)} of {sum(r['questions'] for r in brows)}). Over plain decoding of the same path, "
    f"speculation gave {min(r['x_vanilla'] for r in spec_rows):.2f}x to {max(r['x_vanilla'] for r in spec_rows):.2f}x with the "
    f"measured order and {min(r['x_vanilla_plain'] for r in spec_rows):.2f}x to {max(r['x_vanilla_plain'] for r in spec_rows):.2f}x "
    f"with `F.linear`" + (f" (below 1x: {', '.join(losers)}; one pass each, no spread)" if losers else "")
    + ": the same drafts and the same τ, so the difference is the product path alone."))

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
# over one target decode step, per round of the cost curve above. Speeds are measured as
# Spec-Bench does: batch 1, tokens per second, plain decoding and the chain in `ROUNDS`
# interleaved rounds, by `measure_settings` (`workbench/lessons/settings.py`) on the prompts and
# length notebook 7 uses too: the chain of 3 there is this very setting, with the same τ, timed
# again in notebook 7's own rounds.

# %%
from workbench.lessons.chain_model import chain_alpha, held_out_check
from workbench.lessons.settings import MAX_NEW_TOKENS, lesson_prompts, measure_settings
from workbench.timing import spread

GAMMA = 3  # drafts per chain step
prompts = lesson_prompts(wb)
measured = measure_settings(wb, [SpecConfig("vanilla"), SpecConfig.linear(GAMMA)], prompts, ROUNDS)
vanilla, chain = measured.values()
speedup = chain.speedup
steps = [w for lengths in chain.walk_lengths.values() for w in lengths]  # n + 1 per step, the walk's
alpha = chain_alpha(steps, GAMMA)
tau = chain.tau
c_rounds = [measured_draft.ms(1, r) / measured_verify.ms(1, r) for r in range(ROUNDS)]  # one row / a decode step
c_spread = spread(c_rounds)
c = c_spread.median
print(f"{len(prompts)} Spec-Bench prompts ({', '.join(prompts)}), {MAX_NEW_TOKENS} new tokens each, {len(steps)} chain steps; "
      f"output equal to plain decoding on {chain.equal_to_plain} of {len(prompts)}")
print(f"alpha = {alpha:.3f}   tau (chain of {GAMMA}) = {tau:.2f}   c = {c_spread}")
print(f"vanilla {vanilla.tok_s.with_unit('tok/s')}; chain {chain.tok_s.with_unit('tok/s')}; "
      f"speedup {speedup.with_unit('×')}")

# %% [markdown]
# The formula's $S$ assumes the verify forward costs one decode step whatever its size (the GPU
# expectation). With the curve measured above, the same chain costs
# $\gamma \cdot t_\text{draft} + t_\text{verify}(\gamma + 1)$ per step instead of
# $\gamma \cdot t_\text{draft} + t_\text{verify}(1)$:
# `predicted_speedup(tau, verify_ms, draft_ms, decode_ms)` $= \tau \cdot t_\text{verify}(1) / (\text{draft} + \text{verify})$
# uses the measured costs. Both curves are computed once per round of the cost curve (that round's
# own fit and its own c), for α fixed at its measured value: the bars are the range over the rounds.

# %%
from plotly.subplots import make_subplots

from workbench.lessons.chain_model import expected_tokens
from workbench.lessons.figures import legend_below

check = held_out_check(steps, GAMMA)  # α from the even-numbered steps, the mean walk of the odd-numbered ones
gammas = [int(g) for g in np.arange(1, 9)]
expected = {g: expected_tokens(alpha, g) for g in gammas}
held_curve = [expected_tokens(check.alpha, g) for g in gammas]
s_formula = {g: spread(expected[g] / (g * cr + 1) for cr in c_rounds) for g in gammas}
s_measured = {g: spread(predicted_speedup(expected[g], fit.at(g + 1), g * measured_draft.round_fits[r].at(1), fit.at(1))
                        for r, fit in enumerate(measured_verify.round_fits)) for g in gammas}


def bars(spreads):
    """Asymmetric error bars from the median to the range's ends."""
    return dict(type="data", symmetric=False, array=[s.high - s.median for s in spreads],
                arrayminus=[s.median - s.low for s in spreads])


fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per step E[N]", "speedup S"))
fig.add_scatter(x=gammas, y=held_curve, name="E[N], α fitted on half the steps", row=1, col=1)
fig.add_scatter(x=[GAMMA], y=[check.measured], mode="markers", marker=dict(size=12, symbol="x"),
                error_y=dict(type="data", array=[check.noise]),
                name=f"mean walk length of the other half (γ = {GAMMA}), ± 2 s.e.", row=1, col=1)
fig.add_scatter(x=gammas, y=[s_formula[g].median for g in gammas], error_y=bars(s_formula.values()),
                name="S = E[N] / (γc + 1): verify costs one decode", row=1, col=2)
fig.add_scatter(x=gammas, y=[s_measured[g].median for g in gammas], error_y=bars(s_measured.values()),
                name="S with the measured verify curve", row=1, col=2)
fig.add_scatter(x=[GAMMA], y=[speedup.median], mode="markers", marker=dict(size=12, symbol="x"),
                error_y=bars([speedup]), name=f"measured speedup (median, range of {ROUNDS} rounds)", row=1, col=2)
fig.add_hline(y=1, line_dash="dot", row=1, col=2)
fig.update_xaxes(title="γ (drafts per step)")
fig.update_layout(height=460, margin=dict(t=90), title=dict(
    text=f"A chain of γ drafts: model and measurement ({THREADS}; ranges over {ROUNDS} rounds)",
    font=dict(size=14), x=0.01, xanchor="left", y=0.97))
legend_below(fig, rows=3)
fig.show()

# %%
from workbench.lessons.takeaways import best_sentence, compare, versus
from workbench.timing import verdict

named = lambda spreads: {f"γ = {g}": s for g, s in spreads.items()}  # noqa: E731
formula_best = verdict(named(s_formula))
measured_best = verdict(named(s_measured))
outcome = ("c < α, so the formula promises a speedup" if c < alpha else
           "c ≥ α, so no γ can give a speedup, whatever the verify costs")
level = [g for g in gammas if compare(s_formula[g], s_measured[g]) == "level within noise"]
gap = (f"At γ = {', '.join(map(str, level))} the two S curves are level within noise (their ranges over the rounds "
       "overlap): there the verify over γ + 1 tokens costs about a decode step. " if level else "")
display(Markdown(
    f"**Takeaway.** Measured α = {alpha:.2f} and c = {c:.2f}: {outcome}. By the formula, "
    f"{best_sentence(formula_best, 'chain')}; with the verify curve of this machine, "
    f"{best_sentence(measured_best, 'chain')}. {gap}"
    f"Fitted on {check.fit_steps} of the chain's steps, α = {check.alpha:.2f} predicts E[N] = {check.predicted:.2f} "
    f"for the other {check.held_steps}, whose walks kept {check.measured:.2f} tokens on average: the i.i.d. model "
    f"{check.verdict()}. The chain of {GAMMA} (τ = {tau:.2f} over all {len(steps)} steps, output equal to plain "
    f"decoding on {chain.equal_to_plain} of {len(prompts)} prompts) ran {speedup.with_unit('×')} as fast as plain "
    f"decoding ({THREADS}); against that range the formula's {s_formula[GAMMA].median:.2f}× is "
    f"{versus(s_formula[GAMMA].median, speedup)} and the measured-curve {s_measured[GAMMA].median:.2f}× is "
    f"{versus(s_measured[GAMMA].median, speedup)}."))

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
from workbench.metrics import Latency

latency = pd.DataFrame([{
    "setting": st.label, "TTFT (ms)": st.spread("ttft_ms").with_unit("ms"), "TPOT (ms)": st.spread("tpot_ms").with_unit("ms"),
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
    f"{chain.spread('ttft_ms').with_unit('ms')} with the chain ({ttft_gain.median:.2f}× as fast, range "
    f"{ttft_gain.low:.2f}–{ttft_gain.high:.2f}: the same prefill). "
    + (f"From the medians, the end-to-end speedup reaches 90 % of the TPOT speedup from answers of {n90} tokens "
       "on; for shorter answers (or longer prompts, whose prefill costs more) it stays further below. "
       if n90 > 1 else
       "From the medians, the end-to-end speedup is within 90 % of the TPOT speedup already at one token. ")
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
# continuation (notebook 9 measures that α for early exits of the same target).

# %%
from statistics import mean

from workbench.analysis.expectation import step_expectation
from workbench.analysis.oracle import early_exit_trees
from workbench.models.heads import default_draft_dir
from workbench.train.evaluate import answer_sequences, measure_head

TREE = SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)
EXITS = (24, 26, 27, 28, 29, wb.target.config.num_layers)
eng = wb.engine(TREE, SamplingParams(), trace=True)
eng.add_requests(list(prompts.values()), 48)
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

# %% [markdown]
# ## A batch-size sweep
#
# With $B$ requests decoding together, a plain step is one forward over $B$ tokens and a chain
# step is $\gamma$ draft forwards over $B$ rows plus one verify over $B(\gamma + 1)$ tokens.
# Up to $B = 64$ the verify block reaches 256 tokens, the end of the measured curve, past its bend
# if it has one; the takeaway says where the speedup goes:
# $$S(B) = \frac{\tau \cdot t_\text{verify}(B)}{\gamma\, t_\text{draft}(B) + t_\text{verify}\big(B(\gamma + 1)\big)}.$$
# The prediction below uses the costs measured above and the measured $\tau$; the second curve is
# what a memory-bound device would give (verify over $B(\gamma + 1)$ tokens as cheap as over $B$),
# an expectation for a GPU, not a measurement.

# %%
batches = [b for b in (1, 2, 4, 8, 16, 32, 64) if b * (GAMMA + 1) <= max(SIZES)]  # never extrapolate
here = [predicted_speedup(tau, verify.at(b * (GAMMA + 1)), GAMMA * draft_ms[b], verify.at(b)) for b in batches]
flat = [predicted_speedup(tau, verify.at(b), GAMMA * draft_ms[b], verify.at(b)) for b in batches]
fig = go.Figure([go.Scatter(x=batches, y=here, mode="lines+markers", name="this machine (measured costs)"),
                 go.Scatter(x=batches, y=flat, mode="lines+markers", name="if verify were memory-bound")])
fig.add_hline(y=1, line_dash="dot", annotation_text="plain decoding", annotation_position="bottom left")
past = next((b for b in batches if knee and b * (GAMMA + 1) >= knee), None)  # first batch past the bend
if past is not None:
    span = [min(here + flat), max(here + flat)]  # a trace, not add_vline: shapes misplace on a log axis
    fig.add_scatter(x=[past, past], y=span, mode="lines", line=dict(dash="dash", color="grey"),
                    name=f"from batch {past}: B(γ + 1) ≥ {knee}, past the bend")
fig.update_layout(title=f"Predicted speedup of a chain of {GAMMA} vs batch size", height=380,
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
    f"{flat[0]:.2f}× at batch 1 and {flat[-1]:.2f}× at batch {batches[-1]}."))

# %% [markdown]
# ## Measured under load
#
# The curve above is a *prediction* from single-forward costs, for a batch that stays fixed.
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
# reads the stored run, `docs/bench/load-cpu.json`, and re-measures nothing: its machine and
# threads are printed first, and they may differ from this notebook's.

# %%
import json
from pathlib import Path

import workbench
from workbench.timing import Spread
from workbench.viz.load import curves_figure

LOAD = json.loads((Path(workbench.__file__).resolve().parents[1] / "docs/bench/load-cpu.json").read_text())
m = LOAD["machine"]
print(f"stored run: {m['cpu']}, {m['cores']} cores, {LOAD['dtype']}, {LOAD['threads']} torch threads, "
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
def placed(s: Spread) -> str:
    return "clearly above off" if s.low > 1 else "clearly below off" if s.high < 1 else "level with off within noise"


loads = sorted(next(iter(closed.values())))
fixed = closed["eagle2:4/3/2"]
said = [f"at concurrency {c:g}, " + ", ".join(f"{p} is {placed(by_load[c])} ({by_load[c].median:.2f}×)"
                                           for p, by_load in closed.items()) for c in loads]
pred = {b: here[batches.index(b)] for b in loads if b in batches}
predicted = (f"The prediction above, for a chain of {GAMMA} at a fixed batch on this notebook's machine, "
             f"{trend(pred[loads[0]], pred[loads[-1]])} from {pred[loads[0]]:.2f}× at batch {loads[0]:g} to "
             f"{pred[loads[-1]]:.2f}× at batch {loads[-1]:g}; measured, the fixed tree "
             f"{trend(fixed[loads[0]].median, fixed[loads[-1]].median)} from {fixed[loads[0]].median:.2f}× to "
             f"{fixed[loads[-1]].median:.2f}×." if loads[0] in pred and loads[-1] in pred else "")
chosen = LOAD["settled"]["auto"]["batch"]
plain = [b for b, c in chosen.items() if c == "off"]
auto_said = (f"it decoded plainly at running batch {', '.join(plain)} and speculated at the others"
             if plain else "it speculated at every running batch size")
display(Markdown(
    f"**Takeaway (stored run, {m['cpu']}, {LOAD['threads']} threads).** Under load, {'; '.join(said)}. "
    f"{predicted} Auto's choice per running batch (the setting it ran most there) was "
    f"{', '.join(f'{b}: {c}' for b, c in chosen.items())}: {auto_said}, each step by the measured "
    "cost of the verify over the batch's tokens against the drafts it expected to keep. A range that "
    "crosses 1× is not a finding; the full table, TTFT and the open loop are in `docs/bench/load-cpu.md`."))

# %% [markdown]
# ## A long context
#
# Every verify query attends the whole committed prefix, but the prefix's K/V is read once and
# shared by all nodes. The K/V of one token costs $2 \times \text{layers} \times \text{kv heads} \times \text{head dim}$ values;
# at some context length reading the K/V costs as much as reading the weights, and a decode step
# becomes memory-bound on the cache instead of the weights (the argument of MagicDec,
# [Chen et al. 2024](https://arxiv.org/abs/2408.11049), for speculation at long contexts and large
# batches). Three contexts, the cost curve's prefix of `PREFIX` tokens, 1k and 4k, are timed in the
# same interleaved rounds; the shortest one's decode step is the cost curve's first point measured
# a second time, and the two must agree within their ranges. The speedups in the table are
# **predicted** from these costs with the τ measured above at the short context (a long prompt's
# own acceptance is not measured here).

# %%
cfg = wb.target.config
kv_bytes = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * wb.target.lm_head.weight.element_size()
print(f"K/V per token: {kv_bytes / 1024:.1f} KiB; the cache outweighs the weights beyond "
      f"{weight_bytes / kv_bytes:,.0f} tokens (the model's context is {cfg.max_position_embeddings:,})")
CONTEXTS = (PREFIX, 1024, 4096)
context_forwards = {(P, n): f for P in CONTEXTS for n, f in verify_forwards(wb.target, (1, GAMMA + 1), P).items()}
by_context = {key: spread(values) for key, values in time_forwards(context_forwards, ROUNDS, REPEATS).items()}
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
ratio = {P: by_context[P, GAMMA + 1].ratio(by_context[P, 1]) for P in CONTEXTS}  # verify over decode, with range
growth = {n: by_context[long_, n].median / by_context[short, n].median for n in (1, GAMMA + 1)}
context_trend = {
    "below": ("relatively cheaper: the prefix is read once and shared by all nodes, so the part of the cost "
              "that grows with the context is not paid once per node"),
    "above": "relatively dearer: here each node's attention over the prefix adds up",
    "level within noise": "about as costly, relative to a decode step (level within noise)",
}[compare(ratio[long_], ratio[short])]
again = compare(by_context[short, 1], verify_spread[1])
same = ("the two agree within their ranges" if again == "level within noise" else
        f"this one is {again} the curve's beyond both ranges: the machine's speed moved between the two "
        "measurements, so compare costs within one figure, not across figures")
context_speedup = {P: predicted_speedup(tau, by_context[P, GAMMA + 1].median, GAMMA * draft_ms[1], by_context[P, 1].median)
                   for P in CONTEXTS}
rows = [f"| {P:,} | {by_context[P, 1].median:.1f} ({by_context[P, 1].low:.1f}–{by_context[P, 1].high:.1f}) | "
        f"{by_context[P, GAMMA + 1].median:.1f} | {ratio[P].median:.2f} ({ratio[P].low:.2f}–{ratio[P].high:.2f}) | "
        f"{P * kv_bytes / weight_bytes:.2f} | {'weights' if P * kv_bytes < weight_bytes else 'K/V cache'} | "
        f"{context_speedup[P]:.2f}× |" for P in CONTEXTS]
display(Markdown(
    f"| committed tokens | decode ms (range) | verify of {GAMMA + 1} ms | verify / decode (range) | K/V bytes / weight "
    f"bytes | most bytes read | predicted speedup, chain of {GAMMA} (τ {tau:.2f}) |\n|---|---|---|---|---|---|---|\n"
    + "\n".join(rows) + f"\n\n({THREADS}; the draft's cost is taken at the short context.)\n\n"
    f"**Takeaway.** At {long_:,} committed tokens a decode step costs {growth[1]:.2f}× what it costs at "
    f"{short}, and a verify over {GAMMA + 1} tokens {growth[GAMMA + 1]:.2f}× (medians); verify costs "
    f"{ratio[short].median:.2f}× a decode step at {short} (range {ratio[short].low:.2f}–{ratio[short].high:.2f}) "
    f"and {ratio[long_].median:.2f}× at {long_:,} (range {ratio[long_].low:.2f}–{ratio[long_].high:.2f}), so it "
    f"gets {context_trend}; the predicted speedup of the chain {trend(context_speedup[short], context_speedup[long_])} "
    f"from {context_speedup[short]:.2f}× to {context_speedup[long_]:.2f}×. The decode step at {short} tokens, "
    f"{by_context[short, 1].with_unit('ms')} here, is the cost curve's first point measured again "
    f"({verify_spread[1].with_unit('ms')} there): {same}. By bytes alone the cache of this small model stays "
    f"lighter than its weights up to {weight_bytes / kv_bytes:,.0f} tokens; for a model with a larger cache per "
    "token, or at a large batch, the context dominates sooner."))
