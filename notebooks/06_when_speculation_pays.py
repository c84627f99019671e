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
# and puts them into Leviathan et al.'s formulas (2023): with α the chance that a draft is
# accepted and c the cost of a draft forward relative to a target forward, a chain of γ drafts
# emits on average `E[N] = (1 - α^(γ+1)) / (1 - α)` tokens per step, and the walltime speedup is
# `S = E[N] / (γ c + 1)`.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="auto")

# %% [markdown]
# ## Memory-bound or compute-bound?
#
# A forward over N tokens reads every weight once and does about `2 × parameters × N` floating
# point operations. Per byte of weights read that is a few FLOPs times N. A datacenter GPU does
# hundreds of FLOPs in the time it reads one byte (H100 SXM: about 990 TFLOP/s dense bf16 against
# 3.35 TB/s of HBM3, NVIDIA's datasheet), so until N reaches the hundreds the forward costs what
# reading the weights costs, whatever N is: it is **memory-bound**, and verifying a tree of 60
# tokens is nearly free. A CPU core does far fewer FLOPs per byte, so it becomes
# **compute-bound** after a few tokens.

# %%
import numpy as np
import plotly.graph_objects as go
from IPython.display import Markdown, display

params = sum(p.numel() for p in wb.target.parameters())
weight_bytes = params * wb.target.lm_head.weight.element_size()
print(f"{params / 1e6:.0f} M parameters: {weight_bytes / 1e6:.0f} MB of weights read by every forward")
for n in (1, 8, 64):
    print(f"N = {n:>2} tokens: {2 * params * n / 1e9:5.2f} GFLOP, "
          f"{2 * params * n / weight_bytes:5.1f} FLOP per byte of weights")

# %% [markdown]
# ## The verify cost curve, measured here
#
# `measure_verify_cost` times one target forward over N tree nodes after a committed prefix,
# exactly as the engine's verify runs it (N = 1 is a plain decode step).

# %%
from workbench.bench.cost import measure_draft_cost, measure_verify_cost, predicted_speedup

SIZES = (1, 2, 4, 8, 16, 32)
verify_ms = {r["tokens"]: r["ms"] for r in
             measure_verify_cost(wb.target, sizes=SIZES, prefix_len=128, repeats=2, warmup=1)}
n, ms = np.array(SIZES), np.array([verify_ms[s] for s in SIZES])

def verify_at(tokens):
    """Verify cost at any N, interpolated between the measured sizes."""
    return float(np.interp(tokens, n, ms))

fig = go.Figure([
    go.Scatter(x=n, y=ms, mode="lines+markers", name="measured"),
    go.Scatter(x=n, y=np.full(len(n), ms[0]), name="memory-bound (flat)", line=dict(dash="dash")),
    go.Scatter(x=n, y=ms[0] * n, name="compute-bound (N decode steps)", line=dict(dash="dot")),
])
fig.update_layout(title="One target forward over N tokens (prefix of 128)", height=380,
                  xaxis=dict(type="log", title="tokens in the forward (N)"),
                  yaxis=dict(type="log", title="ms"))
fig.show()

# %%
big = SIZES[-1]
r8, r_big = verify_ms[8] / verify_ms[1], verify_ms[big] / verify_ms[1]
per_node = (verify_ms[big] - verify_ms[1]) / (big - 1) / verify_ms[1]  # extra cost of one more token
regime = ("close to memory-bound" if per_node < 0.05 else
          "compute-bound within a few tokens" if per_node > 0.3 else "between the two regimes")
display(Markdown(
    f"**Takeaway.** Here a forward over 8 tokens costs {r8:.1f}× a decode step and one over {big} "
    f"tokens {r_big:.1f}×: this machine is {regime}. On a memory-bound GPU both ratios would be "
    f"close to 1. Every node added to the verify block costs about {max(per_node, 0):.0%} of a decode step"
    + (", so here a large verify block is nearly free." if per_node < 0.03 else
       ": on this machine the verify block has to stay small, since every draft that is not accepted "
       "costs real time.")))

# %% [markdown]
# ## α and c, measured
#
# A greedy chain (`SpecConfig.linear(γ)`, topk = 1) makes each step a run of Bernoulli trials:
# draft k is compared only if drafts 1..k-1 were accepted. With n accepted drafts in a step, the
# step saw n successes, plus one failure when n < γ; α is successes over trials. c is one draft
# forward (one row) over one target forward (one token), from `measure_draft_cost`.
# Speeds are measured as Spec-Bench does: same prompts, batch 1, tokens per second.

# %%
GAMMA = 3  # drafts per chain step
PROMPTS = ["Explain why the sky is blue in two sentences.", "Give three tips for writing clear emails."]
prompt_ids = [wb.encode(p) for p in PROMPTS]
wb.generate(prompt_ids[:1], SpecConfig.linear(GAMMA), SamplingParams(), max_new_tokens=4)  # warm-up

runs = {}
for name, spec in [("vanilla", SpecConfig("vanilla")), ("chain", SpecConfig.linear(GAMMA))]:
    tokens, seconds, lens = 0, 0.0, []
    for ids in prompt_ids:
        (r,), s = wb.generate([ids], spec, SamplingParams(), max_new_tokens=20)
        tokens, seconds, lens = tokens + len(r.output_ids), seconds + s, lens + r.accept_lengths
    runs[name] = dict(tok_s=tokens / seconds, lens=lens)

accepted = [a - 1 for a in runs["chain"]["lens"]]
alpha = sum(accepted) / (sum(accepted) + sum(a < GAMMA for a in accepted))
tau = float(np.mean(runs["chain"]["lens"]))
draft_ms = {r["rows"]: r["ms"] for r in
            measure_draft_cost(wb.target, wb.draft, rows=(1, 2, 4, 8), prefix_len=128, repeats=3, warmup=1)}
c = draft_ms[1] / verify_ms[1]
measured_speedup = runs["chain"]["tok_s"] / runs["vanilla"]["tok_s"]
print(f"alpha = {alpha:.3f}   tau (chain of {GAMMA}) = {tau:.2f}   c = {c:.3f}   "
      f"measured speedup = {measured_speedup:.2f}x  (vanilla {runs['vanilla']['tok_s']:.1f} tok/s)")

# %% [markdown]
# The formula's S assumes the verify forward costs one decode step whatever its size (the GPU
# case). With the curve measured above, the same chain costs
# `γ · draft + verify(γ + 1)` per step instead of `γ · draft + verify(1)`:
# `predicted_speedup(tau, verify_ms, draft_ms, decode_ms)` uses the measured costs.

# %%
from plotly.subplots import make_subplots

a = min(alpha, 0.999)  # the formula divides by 1 - alpha
gammas = np.arange(1, 9)
expected = (1 - a ** (gammas + 1)) / (1 - a)
s_formula = expected / (gammas * c + 1)
s_measured = [predicted_speedup(e, verify_at(g + 1), g * draft_ms[1], verify_ms[1])
              for e, g in zip(expected, gammas)]

fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per step E[N]", "speedup S"))
fig.add_scatter(x=gammas, y=expected, name="E[N], measured α", row=1, col=1)
fig.add_scatter(x=[GAMMA], y=[tau], mode="markers", marker=dict(size=12, symbol="x"),
                name=f"measured τ (γ = {GAMMA})", row=1, col=1)
fig.add_scatter(x=gammas, y=s_formula, name="S = E[N] / (γc + 1): verify costs one decode", row=1, col=2)
fig.add_scatter(x=gammas, y=s_measured, name="S with the measured verify curve", row=1, col=2)
fig.add_scatter(x=[GAMMA], y=[measured_speedup], mode="markers", marker=dict(size=12, symbol="x"),
                name="measured speedup", row=1, col=2)
fig.add_hline(y=1, line_dash="dot", row=1, col=2)
fig.update_xaxes(title="γ (drafts per step)")
fig.update_layout(height=400)
fig.show()

# %%
best_formula, best_measured = gammas[int(np.argmax(s_formula))], gammas[int(np.argmax(s_measured))]
verdict = ("c < α, so the formula promises a speedup" if c < alpha else
           "c ≥ α, so no γ can give a speedup, whatever the verify costs")
display(Markdown(
    f"**Takeaway.** Measured α = {alpha:.2f} and c = {c:.2f}: {verdict}. "
    f"The formula's best chain is γ = {best_formula} (S = {s_formula.max():.2f}); with the verify "
    f"curve of this machine the best is γ = {best_measured} (S = {max(s_measured):.2f}). "
    f"The chain of {GAMMA} emitted τ = {tau:.2f} tokens per step against E[N] = "
    f"{expected[GAMMA - 1]:.2f} from α (the i.i.d. model is "
    f"{'close' if abs(tau - expected[GAMMA - 1]) < 0.3 else 'rough'}), "
    f"and ran {measured_speedup:.2f}× as fast as plain decoding."))

# %% [markdown]
# ## A batch-size sweep: where the speedup vanishes
#
# With B requests decoding together, a plain step is one forward over B tokens and a chain step
# is γ draft forwards over B rows plus one verify over B(γ+1) tokens. The prediction below uses
# the costs measured above and the measured τ; the second curve is what a memory-bound device
# would give (verify over B(γ+1) tokens as cheap as over B).

# %%
batches = [b for b in (1, 2, 4, 8) if b * (GAMMA + 1) <= max(SIZES)]
here = [predicted_speedup(tau, verify_at(b * (GAMMA + 1)), GAMMA * draft_ms[b], verify_at(b)) for b in batches]
flat = [predicted_speedup(tau, verify_at(b), GAMMA * draft_ms[b], verify_at(b)) for b in batches]
fig = go.Figure([go.Scatter(x=batches, y=here, mode="lines+markers", name="this machine (measured costs)"),
                 go.Scatter(x=batches, y=flat, mode="lines+markers", name="if verify were memory-bound")])
fig.add_hline(y=1, line_dash="dot")
fig.update_layout(title=f"Predicted speedup of a chain of {GAMMA} vs batch size", height=360,
                  xaxis_title="batch size B", yaxis_title="speedup")
fig.show()

# %%
below = [b for b, s in zip(batches, here) if s < 1]
if not below:
    where = "it stays above 1 over this range"
elif below[0] == batches[0]:
    where = "speculation is slower than plain decoding at every batch size here"
else:
    where = f"from batch {below[0]} on, speculation is slower than plain decoding"
if here[-1] < here[0] - 0.02:
    trend = ("shrinks as the batch grows: a larger batch already fills the forward with useful tokens, "
             "so the extra verify tokens stop being free")
elif here[-1] > here[0] + 0.02:
    trend = ("grows with the batch over this range: the forward is still far from full, so the fixed "
             "costs of a step are shared by more requests")
else:
    trend = "hardly changes over this range"
display(Markdown(
    f"**Takeaway.** At batch 1 the prediction is {here[0]:.2f}× and at batch {batches[-1]} {here[-1]:.2f}×; "
    f"{where}. On this machine the speedup {trend}. If verify were memory-bound it would be "
    f"{flat[0]:.2f}× at batch 1 and {flat[-1]:.2f}× at batch {batches[-1]}: a GPU keeps the speedup "
    "until its forward turns compute-bound, then loses it the same way."))

# %% [markdown]
# ## A long context
#
# Every verify query attends the whole committed prefix, but the prefix's K/V is read once and
# shared by all nodes. The K/V of one token costs `2 × layers × kv_heads × head_dim` values;
# at some context length reading the K/V costs as much as reading the weights, and a decode step
# becomes memory-bound on the cache instead of the weights (the argument of MagicDec, Chen et
# al. 2024, for speculation at long contexts and large batches).

# %%
cfg = wb.target.config
kv_bytes = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * wb.target.lm_head.weight.element_size()
print(f"K/V per token: {kv_bytes / 1024:.1f} KiB; the cache outweighs the weights beyond "
      f"{weight_bytes / kv_bytes:,.0f} tokens (the model's context is {cfg.max_position_embeddings:,})")
CONTEXTS = (64, 512)
by_context = {P: {r["tokens"]: r["ms"] for r in
                  measure_verify_cost(wb.target, sizes=(1, GAMMA + 1), prefix_len=P, repeats=2, warmup=1)}
              for P in CONTEXTS}
fig = go.Figure([
    go.Bar(x=[str(P) for P in CONTEXTS], y=[by_context[P][1] for P in CONTEXTS], name="decode (1 token)"),
    go.Bar(x=[str(P) for P in CONTEXTS], y=[by_context[P][GAMMA + 1] for P in CONTEXTS],
           name=f"verify ({GAMMA + 1} tokens)"),
])
fig.update_layout(title="Forward cost vs committed context", barmode="group", height=360,
                  xaxis_title="committed tokens before the forward", yaxis_title="ms")
fig.show()

# %%
short, long_ = CONTEXTS[0], CONTEXTS[-1]
ratio = {P: by_context[P][GAMMA + 1] / by_context[P][1] for P in CONTEXTS}
growth = {n: by_context[long_][n] / by_context[short][n] for n in (1, GAMMA + 1)}
if ratio[long_] < ratio[short] - 0.1:
    trend = ("relatively cheaper: the prefix is read once and shared by all nodes, so the part of "
             "the cost that grows with the context is not paid once per node")
elif ratio[long_] > ratio[short] + 0.1:
    trend = "relatively dearer: here each node's attention over the prefix adds up"
else:
    trend = "about as costly, relative to a decode step: at these lengths the weights dominate both"
display(Markdown(
    f"**Takeaway.** At {long_} committed tokens a decode step costs {growth[1]:.2f}× what it costs at "
    f"{short}, and a verify over {GAMMA + 1} tokens {growth[GAMMA + 1]:.2f}×; verify costs "
    f"{ratio[short]:.2f}× a decode "
    f"step at {short} and {ratio[long_]:.2f}× at {long_}, so it gets {trend}. By bytes alone the cache "
    f"of this small model stays lighter than its weights up to {weight_bytes / kv_bytes:,.0f} tokens; "
    f"for a model with a larger cache per token, or at a large batch, the context dominates sooner."))
