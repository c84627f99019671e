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
# # 4. Sampling without changing the distribution
#
# With temperature > 0 the output must be distributed **exactly** as the target's own samples:
# speculation may change the speed, never the text's law. Two rules do that.
#
# * **Algorithm 1** ([Leviathan et al. 2023](https://arxiv.org/abs/2211.17192), Algorithm 1;
#   [Chen et al. 2023](https://arxiv.org/abs/2302.01318)), for a chain whose drafts are *sampled*
#   from the draft's law $q$: accept draft $x$ with probability $\min\left(1, \frac{p(x)}{q(x)}\right)$;
#   at the first rejection draw the bonus from the **residual**
#   $r = \frac{\max(0,\, p - q)}{\sum_y \max(0,\, p(y) - q(y))}$; if every draft is accepted, draw it from $p$.
# * The **target-only rule** ([EAGLE-2](https://arxiv.org/abs/2406.16858), as in SGLang), for a
#   tree whose drafts are *picked* (top-k, deterministic): at a node with target law $p$, try the
#   children in order; accept child $c$ with probability $p(c)$ over the mass not yet rejected;
#   a rejected child gets $p(c) = 0$; if every child is rejected, draw the bonus from what is left;
#   at a leaf, from $p$.
#
# This notebook first looks at the pieces at one real position of SmolLM2 with the shipped head,
# then derives why each rule is exact, then checks the whole law of the first **four** generated
# tokens (drafts accepted up to depth 3) on a tiny model whose law can be enumerated, and shows
# what a tempting shortcut breaks.

# %%
from workbench.lessons.start import start

wb = start(dtype="fp32")

# %% [markdown]
# ## p, q, min(p, q) and the residual at one real position
#
# $p$ is the target's law of the next token at temperature 1; $q$ is the head's law at the same
# position, computed as the engine's draft extend computes it (pairs $(f_t, x_{t+1})$, notebook 0).

# %%
import pandas as pd
import plotly.graph_objects as go
import torch
from IPython.display import Markdown, display

from workbench.engine.sampling import SamplingParams
from workbench.lessons.draft_law import draft_next_token_law
from workbench.lessons.exact_law import next_token_laws
from workbench.lessons.lossless import acceptance_parts, chain_rule_law, skip_residual_law

HOT = SamplingParams(temperature=1.0)
context = wb.encode("Write one sentence about the sea.") + wb.tokenizer(" The", add_special_tokens=False)["input_ids"]
p = next_token_laws(wb.target, [context], HOT)[0]
q = draft_next_token_law(wb.target, wb.draft, context, HOT)
parts = acceptance_parts(p, q)
shown = torch.topk(torch.maximum(p, q), 12).indices.tolist()  # the tokens where either law has mass
names = [repr(wb.token_text(t)) for t in shown]
fig = go.Figure()
for label, values, colour in [("target p", parts.p, "black"), ("draft q", parts.q, "#56B4E9"),
                              ("min(p, q): emitted by acceptance", parts.overlap, "#009E73"),
                              ("residual r: the bonus after a rejection", parts.residual, "#D55E00")]:
    fig.add_bar(x=names, y=values[shown].tolist(), name=label, marker_color=colour)
fig.update_layout(title=f"After {wb.token_text(context[-1])!r}: the 12 tokens with the most mass under p or q",
                  barmode="group", height=420, xaxis_title="next token", yaxis_title="probability")
fig.show()

# %%
rest = 1 - float(p[shown].sum())
over = [names[i] for i, t in enumerate(shown) if q[t] > p[t]]
display(Markdown(
    f"**Takeaway.** At this position a sampled draft is accepted with probability "
    f"$\\beta = \\sum_y \\min(p, q) = {parts.accept_prob:.2f}$. Where the head is over-confident "
    f"($q > p$: {', '.join(over[:4]) or 'nowhere among these'}) acceptance must sometimes say no, and the "
    f"residual puts **no** mass there; it refills exactly the tokens the head under-weights. "
    f"(The 12 tokens shown hold {1 - rest:.0%} of p.)"))

# %% [markdown]
# ## Why Algorithm 1 is exact
#
# One position, draft $x \sim q$. Token $x$ is emitted **through acceptance** with probability
# $$q(x) \cdot \min\left(1, \frac{p(x)}{q(x)}\right) = \min\big(p(x), q(x)\big),$$
# so a draft is accepted with probability $\beta = \sum_y \min\big(p(y), q(y)\big)$. Since
# $p = \min(p, q) + \max(0, p - q)$ token by token, the residual's normaliser is
# $\sum_y \max\big(0, p(y) - q(y)\big) = 1 - \beta$, and $x$ is emitted **through a rejection** with
# probability $(1 - \beta)\, r(x) = \max\big(0, p(x) - q(x)\big)$. In total
# $$P(\text{emit } x) = \min\big(p(x), q(x)\big) + \max\big(0, p(x) - q(x)\big) = p(x).$$
# After an acceptance the next draft is checked against the target's law **given** $x$, so by
# induction over positions the whole sequence follows the target: the chain is exact to any depth.
#
# ## Why the target-only rule is exact (trees)
#
# A tree's children $c_1, \dots, c_m$ of a node are picked, not sampled: the draft is a point mass,
# $q = \delta_{c}$, and $\min(1, p(c)/q(c)) = p(c)$. Trying several children is sampling **without
# replacement** from $p$: after $c_1, \dots, c_{j-1}$ were rejected, the walk is still here with
# probability $1 - \sum_{i<j} p(c_i)$ (the product telescopes) and accepts $c_j$ with
# $\frac{p(c_j)}{1 - \sum_{i<j} p(c_i)}$, so
# $$P(\text{emit } c_j) = \Big(1 - \sum_{i<j} p(c_i)\Big) \cdot \frac{p(c_j)}{1 - \sum_{i<j} p(c_i)} = p(c_j).$$
# If every child is rejected (probability $1 - \sum_i p(c_i)$), the bonus is drawn from $p$
# without the children, renormalised by that same factor: every other token $x$ is emitted with
# $p(x)$. Again the next level is checked under the law given the accepted token.
#
# Both identities, on the real $p$ and $q$ above (`workbench/lessons/lossless.py` writes each
# rule's law in closed form):

# %%
from workbench.lessons.lossless import target_only_law

children = torch.topk(q, 4).indices.tolist()  # what a tree would try: the head's top 4
gap = {"Algorithm 1: min(p, q) + (1 − β) r": chain_rule_law(p, q),
       f"target-only rule, children {[wb.token_text(c) for c in children]}": target_only_law(p, children),
       "shortcut: min(p, q) + (1 − β) p": skip_residual_law(p, q)}
pd.DataFrame([{"law of the emitted token": k, "max |law − p|": float((v - p).abs().max()),
               "total variation to p": 0.5 * float((v - p).abs().sum())} for k, v in gap.items()])

# %% [markdown]
# ## What a tree is worth before the coins fall, and what no head can beat
#
# The identity above says more than "lossless": under the target-only rule child $c_j$ is
# accepted with probability exactly $p(c_j)$, so the walk goes down the tree exactly as far as a
# token-by-token draw from $p$ would. A step's expected accept length over the coins is
# therefore
# $$E[\tau] = 1 + \sum_{\text{nodes } v} P(\text{path to } v), \qquad P(\text{path}) = \prod_{\text{edges}} p(\text{child} \mid \text{parent}),$$
# computed from the step's own tree and verify logits, without the coins' noise (the app shows it
# on every sampled step). The head's only part is **which** tokens the tree holds. A head that
# drafted from $p$ itself would fill the same budget with the most probable paths:
# `perfect_head_trees` grows that tree with the engine's own procedure, scored by target forwards
# at the same contexts. Here both, step by step, on one sampled answer at SGLang's default tree
# (8 nodes, 5 levels, top 4):

# %%
from statistics import mean

from workbench.engine.config import SpecConfig
from workbench.engine.oracle import perfect_head_trees, step_expectation

TREE = SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)
eng = wb.engine(TREE, HOT, trace=True)
eng.add_requests([wb.encode("Write a short story about a lighthouse keeper.")], 96)
worth, points, coins = [], [], []
while not eng.done:
    for rec in eng.step_records():
        if rec.kind == "spec":
            worth.append(step_expectation(rec, TREE.num_steps))  # the shipped head's tree, over the coins
            points.append((0, rec.kv.committed_before))  # (sequence, committed length L) of this step
            coins.append(len(rec.result.path))  # what the coins gave: accepted drafts + the bonus
(req,) = eng.requests
perfect = perfect_head_trees(wb.target, [req.prompt_ids + req.output_ids], points, TREE.num_steps, TREE.topk,
                             TREE.num_draft_tokens, HOT)
depths = [f"depth {d}" for d in range(1, TREE.num_steps + 1)]
fig = go.Figure()
for label, exp, colour in [("shipped head", worth, "#56B4E9"), ("perfect head (drafts from p)", perfect, "black")]:
    fig.add_bar(x=depths, y=[mean(e.reach[d] for e in exp) for d in range(TREE.num_steps)], name=label,
                marker_color=colour)
fig.update_layout(title=f"P(the walk accepts a node at depth d), mean over {len(points)} steps, temperature 1",
                  barmode="group", height=380, yaxis_title="probability")
fig.show()

# %%
e_head, e_perfect = mean(e.accept_length for e in worth), mean(e.accept_length for e in perfect)
display(Markdown(
    f"**Takeaway.** Over {len(points)} steps the coins gave τ = {mean(coins):.2f}; the expectation of the "
    f"same trees is {e_head:.2f} (the coins scatter around it), and a perfect head would have drafted trees "
    f"worth {e_perfect:.2f} at the same contexts. The head wins {(e_head - 1) / (e_perfect - 1):.0%} of what "
    f"this budget allows at temperature 1: the rest is the head's to gain, while the distance from "
    f"{e_perfect:.2f} to {TREE.num_steps + 1} (every level accepted) is the target's own uncertainty, which "
    f"no head removes. At depth 1 the head's {TREE.topk} children hold {mean(e.reach[0] for e in worth):.2f} "
    f"of the target's mass, the target's own top {TREE.topk} {mean(e.reach[0] for e in perfect):.2f}. "
    f"(On 20 MT-bench turns: `python -m workbench.train.evaluate --temperature 1 --ceiling`, "
    f"docs/bench/head-training.md section 11.)"))

# %% [markdown]
# ## The exact law of four tokens, checked by sampling
#
# On SmolLM2 the law of even two tokens has $49152^2$ cells. A tiny random target over
# **8 tokens** makes the law of the first **four** generated tokens small enough to enumerate:
# $$P(t_1 t_2 t_3 t_4) = p(t_1 \mid \text{prompt}) \cdot p(t_2 \mid \text{prompt}, t_1) \cdots p(t_4 \mid \text{prompt}, t_1 t_2 t_3),$$
# $8^4 = 4096$ cells from plain forwards. The engine then decodes thousands of copies of the same
# prompt at once: $t_1$ comes from the prefill, $t_2 t_3 t_4$ from **one** speculative step, so a
# step that accepts 2 or 3 drafts puts the law at depth 2 and 3 to the test, not only the first
# token.

# %%
import tempfile

from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.lessons.exact_law import sequence_counts, sequence_law
from workbench.models.draft import random_head
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint

VOCAB, PROMPT, LENGTH, N = 8, [3, 5, 1, 6], 4, 4000
PARAMS = SamplingParams(temperature=1.0, seed=7)
tiny = load_target(make_tiny_checkpoint(tempfile.mkdtemp(), vocab_size=VOCAB, seed=0))
# A random head over 8 tokens is often right; at this scale its q is spread out, so
# Algorithm 1's min(1, p/q) and its residual have real work to do.
tiny_head = random_head(tiny, seed=1, std=0.1)
exact = sequence_law(tiny, PROMPT, PARAMS, LENGTH)  # [8, 8, 8, 8]
print(f"exact law of {LENGTH} tokens: {exact.numel()} cells, sums to {float(exact.sum()):.6f}")

# %%
from workbench.lessons.chi_square import chi_square_pvalue, total_variation

# topk = 4 of 8 tokens: each node offers half the vocabulary, so many steps accept 2 drafts or more
RULES = {"target-only rule, tree 3/4/16": SpecConfig("eagle2", num_steps=3, topk=4, num_draft_tokens=16),
         "Algorithm 1, sampled chain of 3": SpecConfig.linear(3, "leviathan")}


def sample(spec):
    """N requests of the same prompt in one batched engine: counts of (t1..t4), and how many
    drafts each request's single speculative step accepted."""
    eng = Engine(tiny, tiny_head, spec, PARAMS)
    eng.add_requests([PROMPT] * N, LENGTH)
    eng.run()
    counts = sequence_counts([r.output_ids for r in eng.requests], VOCAB, LENGTH)
    return counts, [r.accept_lengths[0] - 1 for r in eng.requests]


rows, samples = [], {}
for name, spec in RULES.items():
    counts, accepted = sample(spec)
    samples[name] = counts
    rows.append({"rule": name, "steps accepting ≥ 2 drafts": sum(a >= 2 for a in accepted),
                 "steps accepting 3": sum(a >= 3 for a in accepted),
                 "chi-square p-value (t1..t4)": chi_square_pvalue(counts, exact),
                 **{f"TV t{k}": total_variation(counts.sum(dim=[d for d in range(LENGTH) if d != k - 1]),
                                                exact.sum(dim=[d for d in range(LENGTH) if d != k - 1]))
                    for k in range(1, LENGTH + 1)}})
summary = pd.DataFrame(rows)
summary.round(4)

# %%
fig = go.Figure([go.Bar(x=list(range(VOCAB)), y=exact.sum(dim=(0, 1, 2)).tolist(), name="exact law",
                        marker_color="black")])
for name, counts in samples.items():
    fig.add_bar(x=list(range(VOCAB)), y=(counts.sum(dim=(0, 1, 2)) / N).tolist(), name=name)
fig.update_layout(title=f"The fourth generated token: exact law vs {N} samples per rule", barmode="group",
                  height=380, xaxis=dict(title="token", dtick=1), yaxis_title="probability")
fig.show()

# %%
from workbench.lessons.takeaways import lossless_verdict

LEVEL = 1e-3  # a lossless rule fails the test with this probability
display(Markdown(
    f"**Takeaway.** Both rules {lossless_verdict(summary['chi-square p-value (t1..t4)'].tolist(), LEVEL)}: "
    f"chi-square p-values {', '.join(f'{v:.2g}' for v in summary['chi-square p-value (t1..t4)'])} over the "
    f"{exact.numel()} cells of $(t_1, t_2, t_3, t_4)$, where only p < {LEVEL:g} would signal a difference. "
    f"The samples reached deep into the tree: "
    + "; ".join(f"{r['rule']}: {r['steps accepting ≥ 2 drafts']} steps accepted 2 or more drafts, "
                f"{r['steps accepting 3']} all 3" for r in rows) + "."))

# %% [markdown]
# ## What goes wrong if the residual is skipped
#
# A tempting shortcut: after a rejection, draw the bonus from the target's $p$ instead of the
# residual. Here it is, **wrong on purpose**, next to the rule the engine runs
# (`workbench/engine/accept.py`), both for the first token of a one-draft chain:

# %%
from workbench.engine.accept import leviathan_chain


def skip_residual(p, q, generator):
    """WRONG ON PURPOSE: Algorithm 1 with the bonus after a rejection drawn from p, not the residual."""
    x = int(torch.multinomial(q, 1, generator=generator))  # the draft, sampled from q
    if float(torch.rand((), generator=generator)) < min(1.0, float(p[x] / q[x])):
        return x  # accepted
    return int(torch.multinomial(p, 1, generator=generator))  # should be max(0, p - q), normalised


def engine_rule(p, q, generator):
    """The engine's Algorithm 1 on the same one-draft chain: the first token it emits."""
    x = int(torch.multinomial(q, 1, generator=generator))
    result = leviathan_chain([0, x], torch.stack([p, p]), q[None], generator)  # root, then draft x
    return x if result.num_accepted else result.bonus


# p and q of the tiny target and head after the prompt and one token: 8 tokens, so 20,000 draws
# estimate every probability well.
tiny_p = next_token_laws(tiny, [PROMPT + [0]], PARAMS)[0].float()
tiny_q = draft_next_token_law(tiny, tiny_head, PROMPT + [0], PARAMS).float()
DRAWS = 20_000
generator = torch.Generator().manual_seed(0)
draws = {}
for name, rule in [("engine rule (Algorithm 1)", engine_rule), ("WRONG: residual skipped", skip_residual)]:
    counts = torch.bincount(torch.tensor([rule(tiny_p, tiny_q, generator) for _ in range(DRAWS)]), minlength=VOCAB)
    draws[name] = counts
fig = go.Figure([go.Bar(x=list(range(VOCAB)), y=tiny_p.tolist(), name="target p", marker_color="black"),
                 go.Bar(x=list(range(VOCAB)), y=tiny_q.tolist(), name="draft q", marker_color="#56B4E9")])
for name, counts in draws.items():
    fig.add_bar(x=list(range(VOCAB)), y=(counts / DRAWS).tolist(), name=name)
fig.update_layout(title=f"First emitted token, {DRAWS} draws per rule", barmode="group", height=380,
                  xaxis=dict(title="token", dtick=1), yaxis_title="probability")
fig.show()

# %%
p_right, p_wrong = (chi_square_pvalue(c, tiny_p.double()) for c in draws.values())
p64, q64 = tiny_p.double(), tiny_q.double()
predicted, beta = skip_residual_law(p64, q64), acceptance_parts(p64, q64).accept_prob
over, under = int(torch.argmax(predicted - p64)), int(torch.argmin(predicted - p64))
display(Markdown(
    f"**Takeaway.** Against the target's law the engine's rule gets a chi-square p-value of {p_right:.2g}; "
    f"the shortcut gets {p_wrong:.2g} and a total variation of {total_variation(draws['WRONG: residual skipped'], tiny_p):.3f} "
    f"(its closed form $\\min(p, q) + (1 - \\beta)\\, p$ predicts "
    f"{0.5 * float((predicted - p64).abs().sum()):.3f}). Token {over} gets {float(predicted[over]):.3f} instead "
    f"of {float(p64[over]):.3f}: acceptance alone already emits min(p, q) = {float(torch.minimum(p64, q64)[over]):.3f} "
    f"of it, more than its share β·p = {beta * float(p64[over]):.3f}, and the resampling adds (1 − β)·p on top. "
    f"Token {under} gets only {float(predicted[under]):.3f} instead of {float(p64[under]):.3f}. The residual "
    "draws only what acceptance left short, max(0, p − q), so every token ends at exactly p."))
