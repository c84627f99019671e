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
# Every time below is the **median** of repeated runs, shown with its **range** (min–max): this
# machine may be shared, and one run can be off by a lot.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="auto")

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
# any verify size from it (notebook 7 uses the same function).

# %%
import numpy as np
import plotly.graph_objects as go
from IPython.display import Markdown, display

params = sum(p.numel() for p in wb.target.parameters())
bytes_per_param = wb.target.lm_head.weight.element_size()
weight_bytes = params * bytes_per_param
print(f"{params / 1e6:.0f} M parameters in {wb.dtype_name}: {weight_bytes / 1e6:.0f} MB of weights read by every forward")
for n in (1, 8, 64):
    print(f"N = {n:>2} tokens: {2 * params * n / 1e9:5.2f} GFLOP, "
          f"{2 * params * n / weight_bytes:5.1f} FLOP per byte of weights (2N/b = {2 * n / bytes_per_param:g})")

# %% [markdown]
# ## The verify cost curve, measured here
#
# `measure_verify_cost` times one target forward over $N$ tree nodes after a committed prefix,
# exactly as the engine's verify runs it ($N = 1$ is a plain decode step), from 1 to 256 tokens.
# It is run `RUNS` times; the curve is the median, the bars the range. The **elasticity** of a
# segment, $\log(t_2/t_1) / \log(N_2/N_1)$, says how the cost follows $N$: 0 is flat (memory-bound:
# reading the weights dominates), 1 is proportional (compute-bound: the arithmetic dominates).

# %%
from workbench.bench.cost import measure_draft_cost, measure_verify_cost
from workbench.metrics import predicted_speedup
from workbench.lessons.cost_curve import CostCurve
from workbench.timing import spread

RUNS = 3
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
verify_runs = [measure_verify_cost(wb.target, sizes=SIZES, prefix_len=128, repeats=1, warmup=1) for _ in range(RUNS)]
verify_spread = {n: spread(run[i]["ms"] for run in verify_runs) for i, n in enumerate(SIZES)}
verify = CostCurve(SIZES, tuple(verify_spread[n].median for n in SIZES))
n, ms = np.array(SIZES), np.array(verify.ms)

fig = go.Figure([
    go.Scatter(x=n, y=ms, mode="lines+markers", name=f"measured (median of {RUNS})",
               error_y=dict(type="data", symmetric=False, array=[verify_spread[k].high - verify_spread[k].median for k in SIZES],
                            arrayminus=[verify_spread[k].median - verify_spread[k].low for k in SIZES])),
    go.Scatter(x=n, y=np.full(len(n), ms[0]), name="memory-bound (flat)", line=dict(dash="dash")),
    go.Scatter(x=n, y=ms[0] * n, name="compute-bound (N decode steps)", line=dict(dash="dot")),
])
fig.update_layout(title="One target forward over N tokens (prefix of 128)", height=380,
                  xaxis=dict(type="log", title="tokens in the forward (N)"),
                  yaxis=dict(type="log", title="ms"))
fig.show()

# %%
from workbench.lessons.takeaways import BEND, bend, elasticity, regime

knee = bend(verify)
segments = ", ".join(f"{lo}→{hi}: {elasticity(verify, lo, hi):.2f}" for lo, hi in zip(SIZES, SIZES[1:]))
print(f"elasticity per segment: {segments}")
display(Markdown(
    f"**Takeaway.** Here a decode step takes {verify_spread[1].with_unit('ms')}. This machine is "
    f"{regime(verify, 8).sentence()}; and {regime(verify, SIZES[-1]).sentence()}. "
    + (f"The bend: from N = {knee} on, every segment has an elasticity of at least {BEND}, so each doubling "
       f"of the block costs at least {2 ** BEND:.2f}× more (the cost follows N); before it, the cost grows more "
       "slowly. "
       if knee else
       f"The cost never starts to follow N within {SIZES[-1]} tokens: no bend in the measured range. ")
    + "On a memory-bound GPU the curve would stay flat far longer (the expectation above)."))

# %% [markdown]
# ## α and c, measured
#
# A greedy chain (`SpecConfig.linear(γ)`, `topk = 1`) makes each step a run of Bernoulli trials:
# draft $k$ is compared only if drafts $1..k-1$ were accepted. With $n$ accepted drafts in a step,
# the step saw $n$ successes, plus one failure when $n < \gamma$; $\alpha$ is successes over
# trials (`workbench/lessons/chain_model.py`), counted on each step's **walk length** $n + 1$
# (`Setting.walk_lengths`). $\tau$ is the mean of the tokens each verify step emitted
# (`workbench/lessons/tau.py`): a last step cut at `max_new_tokens` counts what it appended. The
# two differ only at such a cut step, and α must not read it: all of its trials happened, so its
# emitted count would record a failure that never occurred. $c$ is one draft forward (one row)
# over one target decode step, from
# `measure_draft_cost`. Speeds are measured as Spec-Bench does: batch 1, tokens per second,
# `RUNS` times, by `measure_settings` (`workbench/lessons/settings.py`) on the prompts and length
# notebook 7 uses too, so the chain of 3 has the same τ there (its speedup moves with the noise of
# the timings, printed as a range in both).

# %%
from workbench.lessons.chain_model import chain_alpha, held_out_check
from workbench.lessons.settings import MAX_NEW_TOKENS, lesson_prompts, measure_settings

GAMMA = 3  # drafts per chain step
prompts = lesson_prompts(wb)
measured = measure_settings(wb, [SpecConfig("vanilla"), SpecConfig.linear(GAMMA)], prompts, RUNS)
vanilla, chain = measured.values()
speed = {"vanilla": vanilla.tok_s, "chain": chain.tok_s}
speedup = chain.speedup
steps = [w for lengths in chain.walk_lengths.values() for w in lengths]  # n + 1 per step, the walk's
alpha = chain_alpha(steps, GAMMA)
tau = chain.tau
draft_runs = [measure_draft_cost(wb.target, wb.draft, rows=(1, 2, 4, 8, 16, 32, 64), prefix_len=128, repeats=1,
                                 warmup=1) for _ in range(RUNS)]
draft_ms = {row["rows"]: spread(run[i]["ms"] for run in draft_runs).median for i, row in enumerate(draft_runs[0])}
c_spread = spread(run[0]["ms"] / verify_runs[k][0]["ms"] for k, run in enumerate(draft_runs))
c = c_spread.median
measured_speedup = speedup.median
print(f"{len(prompts)} Spec-Bench prompts ({', '.join(prompts)}), {MAX_NEW_TOKENS} new tokens each, {len(steps)} chain steps")
print(f"alpha = {alpha:.3f}   tau (chain of {GAMMA}) = {tau:.2f}   c = {c_spread}")
print(f"vanilla {speed['vanilla'].with_unit('tok/s')}; chain {speed['chain'].with_unit('tok/s')}; "
      f"speedup {speedup.with_unit('×')}")

# %% [markdown]
# The formula's $S$ assumes the verify forward costs one decode step whatever its size (the GPU
# expectation). With the curve measured above, the same chain costs
# $\gamma \cdot t_\text{draft} + t_\text{verify}(\gamma + 1)$ per step instead of
# $\gamma \cdot t_\text{draft} + t_\text{verify}(1)$:
# `predicted_speedup(tau, verify_ms, draft_ms, decode_ms)` $= \tau \cdot t_\text{verify}(1) / (\text{draft} + \text{verify})$
# uses the measured costs.

# %%
from plotly.subplots import make_subplots

from workbench.lessons.chain_model import expected_tokens

check = held_out_check(steps, GAMMA)  # α from the even-numbered steps, the mean walk of the odd-numbered ones
gammas = np.arange(1, 9)
expected = np.array([expected_tokens(alpha, int(g)) for g in gammas])
held_curve = [expected_tokens(check.alpha, int(g)) for g in gammas]
s_formula = expected / (gammas * c + 1)
s_measured = [predicted_speedup(e, verify.at(g + 1), g * draft_ms[1], verify.at(1))
              for e, g in zip(expected, gammas)]

fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per step E[N]", "speedup S"))
fig.add_scatter(x=gammas, y=held_curve, name="E[N], α fitted on half the steps", row=1, col=1)
fig.add_scatter(x=[GAMMA], y=[check.measured], mode="markers", marker=dict(size=12, symbol="x"),
                error_y=dict(type="data", array=[check.noise]),
                name=f"mean walk length of the other half (γ = {GAMMA}), ± 2 s.e.", row=1, col=1)
fig.add_scatter(x=gammas, y=s_formula, name="S = E[N] / (γc + 1): verify costs one decode", row=1, col=2)
fig.add_scatter(x=gammas, y=s_measured, name="S with the measured verify curve", row=1, col=2)
fig.add_scatter(x=[GAMMA], y=[measured_speedup], mode="markers", marker=dict(size=12, symbol="x"),
                error_y=dict(type="data", symmetric=False, array=[speedup.high - speedup.median],
                             arrayminus=[speedup.median - speedup.low]),
                name=f"measured speedup (median, range of {RUNS})", row=1, col=2)
fig.add_hline(y=1, line_dash="dot", row=1, col=2)
fig.update_xaxes(title="γ (drafts per step)")
fig.update_layout(height=400)
fig.show()

# %%
from workbench.lessons.takeaways import compare, versus

best_formula, best_measured = gammas[int(np.argmax(s_formula))], gammas[int(np.argmax(s_measured))]
verdict = ("c < α, so the formula promises a speedup" if c < alpha else
           "c ≥ α, so no γ can give a speedup, whatever the verify costs")
# where verify(γ + 1) measured inside the range of a decode step, the two S curves differ by noise only
noisy = [g for g in gammas if g + 1 in verify_spread and compare(verify_spread[g + 1], verify_spread[1]) != "above"]
noise = (f"At γ = {', '.join(map(str, noisy))} the verify over γ + 1 tokens did not measure above a decode step "
         f"(e.g. {noisy[0] + 1} tokens: {verify_spread[noisy[0] + 1].with_unit('ms')}, against "
         f"{verify_spread[1].with_unit('ms')} for 1): there the gap between the two S curves is level within "
         "noise, not a finding. " if noisy else "")
display(Markdown(
    f"**Takeaway.** Measured α = {alpha:.2f} and c = {c:.2f}: {verdict}. "
    f"The formula's best chain is γ = {best_formula} (S = {s_formula.max():.2f}); with the verify "
    f"curve of this machine the best is γ = {best_measured} (S = {max(s_measured):.2f}). {noise}"
    f"Fitted on {check.fit_steps} of the chain's steps, α = {check.alpha:.2f} predicts E[N] = {check.predicted:.2f} "
    f"for the other {check.held_steps}, whose walks kept {check.measured:.2f} tokens on average: the i.i.d. model "
    f"{check.verdict()}. The chain of {GAMMA} (τ = {tau:.2f} over all {len(steps)} steps) ran "
    f"{speedup.with_unit('×')} as fast as plain decoding; against that range the formula's "
    f"{s_formula[GAMMA - 1]:.2f}× is {versus(s_formula[GAMMA - 1], speedup)} and the measured-curve "
    f"{s_measured[GAMMA - 1]:.2f}× is {versus(s_measured[GAMMA - 1], speedup)}."))

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

TREE = SpecConfig("eagle2", 5, 4, 8)
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
# ## A long context
#
# Every verify query attends the whole committed prefix, but the prefix's K/V is read once and
# shared by all nodes. The K/V of one token costs $2 \times \text{layers} \times \text{kv heads} \times \text{head dim}$ values;
# at some context length reading the K/V costs as much as reading the weights, and a decode step
# becomes memory-bound on the cache instead of the weights (the argument of MagicDec,
# [Chen et al. 2024](https://arxiv.org/abs/2408.11049), for speculation at long contexts and large
# batches).

# %%
cfg = wb.target.config
kv_bytes = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * wb.target.lm_head.weight.element_size()
print(f"K/V per token: {kv_bytes / 1024:.1f} KiB; the cache outweighs the weights beyond "
      f"{weight_bytes / kv_bytes:,.0f} tokens (the model's context is {cfg.max_position_embeddings:,})")
CONTEXTS = (64, 512)
by_context = {}
for P in CONTEXTS:  # median of RUNS runs per context and size
    runs = [measure_verify_cost(wb.target, sizes=(1, GAMMA + 1), prefix_len=P, repeats=1, warmup=1) for _ in range(RUNS)]
    by_context[P] = {row["tokens"]: spread(run[i]["ms"] for run in runs) for i, row in enumerate(runs[0])}
fig = go.Figure([
    go.Bar(x=[str(P) for P in CONTEXTS], y=[by_context[P][n].median for P in CONTEXTS], name=name,
           error_y=dict(type="data", symmetric=False, array=[by_context[P][n].high - by_context[P][n].median
                                                             for P in CONTEXTS],
                        arrayminus=[by_context[P][n].median - by_context[P][n].low for P in CONTEXTS]))
    for n, name in [(1, "decode (1 token)"), (GAMMA + 1, f"verify ({GAMMA + 1} tokens)")]
])
fig.update_layout(title=f"Forward cost vs committed context (median and range of {RUNS} runs)",
                  barmode="group", height=360,
                  xaxis_title="committed tokens before the forward", yaxis_title="ms")
fig.show()

# %%
short, long_ = CONTEXTS[0], CONTEXTS[-1]
ratio = {P: by_context[P][GAMMA + 1].ratio(by_context[P][1]) for P in CONTEXTS}  # verify over decode, with range
growth = {n: by_context[long_][n].median / by_context[short][n].median for n in (1, GAMMA + 1)}
context_trend = {
    "below": ("relatively cheaper: the prefix is read once and shared by all nodes, so the part of the cost "
              "that grows with the context is not paid once per node"),
    "above": "relatively dearer: here each node's attention over the prefix adds up",
    "level within noise": "about as costly, relative to a decode step (level within noise)",
}[compare(ratio[long_], ratio[short])]
display(Markdown(
    f"**Takeaway.** At {long_} committed tokens a decode step costs {growth[1]:.2f}× what it costs at "
    f"{short}, and a verify over {GAMMA + 1} tokens {growth[GAMMA + 1]:.2f}× (medians); verify costs "
    f"{ratio[short].median:.2f}× a decode step at {short} (range {ratio[short].low:.2f}–{ratio[short].high:.2f}) "
    f"and {ratio[long_].median:.2f}× at {long_} (range {ratio[long_].low:.2f}–{ratio[long_].high:.2f}), so it "
    f"gets {context_trend}. By bytes alone the cache "
    f"of this small model stays lighter than its weights up to {weight_bytes / kv_bytes:,.0f} tokens; "
    f"for a model with a larger cache per token, or at a large batch, the context dominates sooner."))
