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
# tokens on a tiny model whose law can be enumerated, for both rules with trees and chains that
# hold drafts down to depth 3 (that section counts how many steps accepted a draft there), and
# shows what a tempting shortcut breaks. Two production knobs that trade exactness for acceptance
# close the notebook, beside how vLLM lays out the same verify step and the two acceptance
# metrics it reports.

# %%
from workbench.lessons.start import start

wb = start(dtype="fp32")

# %% [markdown]
# ## p, q, min(p, q) and the residual at one real position
#
# $p$ is the target's law of the next token at temperature 1; $q$ is the head's law at the same
# position, computed as the engine's draft extend computes it (pairs $(f_t, x_{t+1})$, notebook 0).
# Each bar below is $p$ built from its two sources: $\min(p, q)$, what acceptance emits, and
# $(1 - \beta)\, r$, what the bonus after a rejection emits ($r$ is the normalised residual,
# $\beta$ the acceptance probability). The stack's height is $p$; $q$ is marked beside it.

# %%
import pandas as pd
import plotly.graph_objects as go
import torch
from IPython.display import Markdown, display

from workbench.engine.sampling import SamplingParams
from workbench.lessons.draft_law import draft_next_token_law
from workbench.lessons.exact_law import next_token_laws
from workbench.lessons.lossless import acceptance_parts, chain_rule_law, skip_residual_law
from workbench.viz.sampling import acceptance_stack_figure  # the app's builder: p as the stack it is made of

HOT = SamplingParams(temperature=1.0)
context = wb.encode("Write one sentence about the sea.") + wb.tokenizer(" The", add_special_tokens=False)["input_ids"]
p = next_token_laws(wb.target, [context], HOT)[0]
q = draft_next_token_law(wb.target, wb.draft, context, HOT)
parts = acceptance_parts(p, q)
shown = torch.topk(torch.maximum(p, q), 12).indices.tolist()  # the tokens where either law has mass
names = [repr(wb.token_text(t)) for t in shown]
after_rejection = (1 - parts.accept_prob) * parts.residual  # [V]: (1 − β) r
acceptance_stack_figure(names, parts.p[shown].tolist(), parts.q[shown].tolist(),
                        f"After {wb.token_text(context[-1])!r}: p = min(p, q) + (1 − β)·r, for the 12 tokens "
                        "with the most mass under p or q", beta=parts.accept_prob).show()

# %%
rest = 1 - float(p[shown].sum())
over = [names[i] for i, t in enumerate(shown) if q[t] > p[t]]
display(Markdown(
    f"**Takeaway.** At this position a sampled draft is accepted with probability "
    f"$\\beta = \\sum_y \\min(p, q) = {parts.accept_prob:.2f}$. Where the head is over-confident "
    f"($q > p$: {', '.join(over[:4]) or 'nowhere among these'}) acceptance must sometimes say no, and the "
    f"residual puts **no** mass there; it refills exactly the tokens the head under-weights. "
    f"Over the whole vocabulary the two parts add up to p within "
    f"{float((parts.overlap + after_rejection - parts.p).abs().max()):.1e}. "
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
       f"target-only rule, the head's top {len(children)} children": target_only_law(p, children),
       "shortcut: min(p, q) + (1 − β) p": skip_residual_law(p, q)}
pd.DataFrame([{"law of the emitted token": k, "max |law − p|": float((v - p).abs().max()),
               "total variation to p": 0.5 * float((v - p).abs().sum())} for k, v in gap.items()])

# %% [markdown]
# ## What a tree is worth before the coins fall, and a greedy reference
#
# The identity above says more than "lossless": under the target-only rule child $c_j$ is
# accepted with probability exactly $p(c_j)$, so the walk goes down the tree exactly as far as a
# token-by-token draw from $p$ would. A step's expected accept length over the coins is
# therefore
# $$E[\tau] = 1 + \sum_{\text{nodes } v} P(\text{path to } v), \qquad P(\text{path}) = \prod_{\text{edges}} p(\text{child} \mid \text{parent}),$$
# computed from the step's own tree and verify logits, without the coins' noise (the app shows it
# on every sampled step). The head's only part is **which** tokens the tree holds. A head that
# drafted from $p$ itself, through the engine's own procedure, gives a **greedy reference**:
# `perfect_head_trees` grows that tree level by level (top-k frontier by path score, then the
# rerank), scored by target forwards at the same contexts.
#
# It is a reference, not an upper bound. The frontier keeps only the top-k of the newest level,
# so the procedure never looks past a node it did not expand: with a top-1 frontier, a node at
# 0.3 whose best child scores 0.03 is expanded, and a node at 0.2 whose child would score 0.198
# is not. The next cell computes what each two-node chain is worth with the same expectation
# the engine uses.

# %%
from workbench.analysis.expectation import expectation

# tokens: 1 = the 0.3 node, 2 = the 0.2 node, 3 = the 0.3 node's best child, 4 = the 0.2 node's child
after = torch.zeros(5, 6)  # [node token, V]: the target's law after each token
after[0, [1, 2, 5]] = torch.tensor([0.3, 0.2, 0.5])
after[1, [3, 5]] = torch.tensor([0.1, 0.9])  # 0.3 × 0.1 = 0.03
after[2, [4, 5]] = torch.tensor([0.99, 0.01])  # 0.2 × 0.99 = 0.198
chains = {"greedy: the 0.3 node, then its best child": [0, 1, 3],
          "passed over: the 0.2 node, then its child": [0, 2, 4]}
worth_of = {name: expectation(toks, [-1, 0, 1], depths=[0, 1, 2], probs=after[toks], num_steps=2).accept_length
            for name, toks in chains.items()}
greedy_worth, better_worth = worth_of.values()
display(Markdown(
    f"**Counter-example.** With a top-1 frontier and two drafts, the greedy procedure keeps the chain worth "
    f"E[τ] = {greedy_worth:.3f}; the chain it never looks at is worth {better_worth:.3f}. A tree grown greedily "
    f"from p is a reference to compare heads with, not the best tree this budget holds."))

# %%
from statistics import mean

from workbench.analysis.expectation import step_expectation
from workbench.analysis.oracle import perfect_head_trees
from workbench.engine.config import SpecConfig

TREE = SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)
eng = wb.engine(TREE, HOT, trace=True)
eng.add_requests([wb.encode("Write a short story about a lighthouse keeper.")], 96)
worth, points, coins, drafted = [], [], [], []
while not eng.done:
    for rec in eng.step_records():
        if rec.kind == "spec":
            worth.append(step_expectation(rec, TREE.num_steps))  # the shipped head's tree, over the coins
            points.append((0, rec.kv.committed_before))  # (sequence, committed length L) of this step
            coins.append(len(rec.result.path))  # what the coins gave: accepted drafts + the bonus
            drafted.append(rec.tree.num_nodes - 1)  # drafts this step verified
(req,) = eng.requests
perfect = perfect_head_trees(wb.target, [req.prompt_ids + req.output_ids], points, TREE.num_steps, TREE.topk,
                             TREE.num_draft_tokens, HOT)
depths = [f"depth {d}" for d in range(1, TREE.num_steps + 1)]
fig = go.Figure()
for label, exp, colour in [("shipped head", worth, "#56B4E9"), ("greedy reference (drafts from p)", perfect, "black")]:
    fig.add_bar(x=depths, y=[mean(e.reach[d] for e in exp) for d in range(TREE.num_steps)], name=label,
                marker_color=colour)
fig.update_layout(title=f"P(the walk accepts a node at depth d), mean over {len(points)} steps, temperature 1",
                  barmode="group", height=380, yaxis_title="probability")
fig.show()

# %%
e_head, e_perfect = mean(e.accept_length for e in worth), mean(e.accept_length for e in perfect)
display(Markdown(
    f"**Takeaway.** Over {len(points)} steps the coins gave walks of {mean(coins):.2f} tokens on average "
    f"(accepted drafts + the bonus, as the expectation counts them); the expectation of the "
    f"same trees is {e_head:.2f} (the coins scatter around it), and the greedy reference, drafting from p "
    f"through the same procedure, would have grown trees worth {e_perfect:.2f} at the same contexts. The head "
    f"gets {(e_head - 1) / (e_perfect - 1):.0%} of the reference's gain over plain decoding at temperature 1. "
    f"The distance from {e_perfect:.2f} to {TREE.num_steps + 1} (every level accepted) is what even drafting "
    f"from p leaves to the target's uncertainty with this budget and this greedy procedure; a tree chosen "
    f"better than greedily could close some of it (the counter-example above). At depth 1 the head's "
    f"{TREE.topk} children hold {mean(e.reach[0] for e in worth):.2f} of the target's mass, the target's own "
    f"top {TREE.topk} {mean(e.reach[0] for e in perfect):.2f}. "
    f"(On 20 MT-bench turns: `python -m experiments.head_studies trees --temperature 1 --ceiling`, "
    f"docs/bench/head-training.md section 11.)"))

# %% [markdown]
# ## The same step in vLLM, and the two numbers it reports
#
# vLLM (its v1 engine) drafts a **chain** of $\gamma$ tokens per request (`num_speculative_tokens`;
# chains only: its one tree option, a fixed tree given as rank paths, left with its tree-attention
# backend in May 2026) and verifies the chain in the next forward. What follows was read in
# vllm-project/vllm at the commits named, file by file:
#
# * **Drafting is greedy.** The EAGLE proposer takes each draft as the argmax of the head's
#   logits (`vllm/v1/spec_decode/eagle.py` at f7eef1b), and the model runner hands the rejection
#   sampler no draft probabilities (`_sample` passes `None` as `draft_probs`,
#   `vllm/v1/worker/gpu_model_runner.py` at 4e17906). The draft is treated as one-hot, $q = \delta_x$:
#   Algorithm 1 then accepts $x$ with probability $\min(1, p(x)/1) = p(x)$ and draws the
#   "recovered" token from $p$ with $x$ removed, renormalised: the target-only rule above for a
#   node with one child. Exact, because a picked draft is a point mass, whatever the head thought.
# * **Layout.** A request's verify input is its last sampled token followed by its $\gamma$ drafts:
#   $1 + \gamma$ query tokens, packed with every other request's tokens into one flat, ragged
#   batch (a chain needs only the causal mask; no tree mask). The scheduler allocates KV slots
#   for those $1 + \gamma$ positions before the forward, **plus** `num_lookahead_tokens`
#   $= \gamma$ more for the EAGLE and draft-model methods (`allocate_slots(request, num_new_tokens,
#   num_lookahead_tokens=...)` in `vllm/v1/core/sched/scheduler.py` at b4622cf): room for the
#   $\gamma$ drafts the proposer writes right after this verify, before any scheduler step has
#   seen them. Our engine takes `num_draft_tokens` verify slots per request and, beside them, the
#   draft levels' scratch slots, freed once the tree is built (notebook 5).
# * **Rejection sampler** (`vllm/v1/sample/rejection_sampler.py` at 7f6fc1c). The target's logits at
#   the draft positions of all requests arrive flattened, `[total drafts, V]`, with cumulative
#   offsets per request. Greedy requests compare each draft with the argmax; sampled ones apply
#   Algorithm 1 ($\min(1, p/q)$, and a "recovered" token from $\max(0, p - q)$ at the first
#   rejection), with the one-hot $q$ above unless draft probabilities are passed; the bonus after
#   an all-accepted chain is sampled from the last position's logits. The output is `[B, γ + 1]`,
#   padded with −1 after the first rejection.
# * **Rollback.** The rejected drafts' KV rows were written by the forward. The scheduler lowers
#   the request's `num_computed_tokens` by the number rejected, so the next step writes over
#   those positions: nothing is copied. Our engine rolls back with a slot-table edit (page
#   size 1): the first slots the step wrote are kept, the others freed, and a tree's accepted node
#   verified further along has its rows copied to its kept slot first (notebook 5 says why).
#
# vLLM logs two acceptance metrics that are easy to confuse:
#
# * **mean acceptance length** $= 1 + \frac{\text{accepted drafts}}{\text{verify steps}}$, the bonus
#   included: the walk's mean, what our τ is unless the output ends inside a step (τ counts the
#   tokens a step emitted, and the step the end of the output cuts emitted fewer than its walk
#   accepted);
# * **draft acceptance rate** $= \frac{\text{accepted drafts}}{\text{drafted tokens}}$, a fraction of
#   what was verified. For a tree the denominator counts every verified node, siblings that can
#   never all be accepted included, so the rate is small even when τ is good.
#
# Both, from the sampled run above:

# %%
steps, accepted_total, drafted_total = len(coins), sum(c - 1 for c in coins), sum(drafted)
first_depth = sum(c >= 2 for c in coins) / steps  # steps whose walk accepted a depth-1 draft
pd.DataFrame([
    {"metric": "mean acceptance length (the walk's)", "formula": "1 + drafts the walk accepted / verify steps",
     "value": f"1 + {accepted_total} / {steps} = {1 + accepted_total / steps:.2f}"},
    {"metric": "draft acceptance rate", "formula": "accepted / drafted tokens",
     "value": f"{accepted_total} / {drafted_total} = {accepted_total / drafted_total:.1%}"},
    {"metric": "most tokens one verify can emit", "formula": "num_steps + 1",
     "value": f"{TREE.num_steps + 1} (the longest walk here: {max(coins)})"},
])

# %%
display(Markdown(
    f"**Takeaway.** The same {steps} steps give a mean acceptance length of {1 + accepted_total / steps:.2f} "
    f"and a draft acceptance rate of {accepted_total / drafted_total:.1%}: each step verified {drafted_total / steps:.0f} "
    f"drafts and kept {accepted_total / steps:.2f} of them. Two statements that often go wrong:\n\n"
    f"* The most tokens one verify can emit is **num_steps + 1 = {TREE.num_steps + 1}**, not num_draft_tokens + 1 = "
    f"{TREE.num_draft_tokens + 1}: the walk keeps one root-to-leaf path, at most {TREE.num_steps} drafts deep, plus "
    f"the bonus (the longest walk here kept {max(coins)}).\n"
    f"* **α is an acceptance rate**, the chance that a draft is accepted (Leviathan et al. define it as the "
    f"expected β above), not a mismatch rate. Here the walk got past depth 1 with rate "
    f"{first_depth:.2f} (one of its {TREE.topk} children accepted): an acceptance rate; the mismatch rate is "
    f"{1 - first_depth:.2f}. A formula such as "
    f"E[τ] = (1 − α^(γ+1)) / (1 − α) fed the mismatch rate instead predicts the wrong length."))

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

from workbench.lessons.exact_law import sample_sequences, sequence_law
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
# num_draft_tokens 37 keeps every candidate (4 + 16 + 16 drafts over 3 levels), so the tree holds depth 3;
# at 16 the rerank kept so few deep nodes that none of 4000 steps accepted a draft at depth 3
TREE_RULE = "target-only rule, tree eagle2:37/3/4"
RULES = {TREE_RULE: SpecConfig("eagle2", num_steps=3, topk=4, num_draft_tokens=37),
         "Algorithm 1, sampled chain of 3": SpecConfig.linear(3, "leviathan")}

rows, samples, depths_reached = [], {}, {}
for name, spec in RULES.items():
    # N copies of PROMPT in one batched engine: counts of (t1..t4), accepted drafts per request
    counts, accepted = sample_sequences(tiny, tiny_head, spec, PARAMS, PROMPT, LENGTH, N)
    samples[name], depths_reached[name] = (counts, accepted), max(accepted)
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
for name, (counts, _) in samples.items():
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
    f"How deep the test reaches: "
    + "; ".join(f"{r['rule']}: {r['steps accepting ≥ 2 drafts']} steps accepted 2 or more drafts, "
                f"{r['steps accepting 3']} all 3 (deepest accepted draft: depth {depths_reached[r['rule']]})"
                for r in rows)
    + ". Where a rule never accepts a depth, the test says nothing about its law there."))

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

# %% [markdown]
# ## Trading exactness for acceptance: the lossy threshold knobs
#
# SGLang's tree sampling has two knobs, `--speculative-accept-threshold-single` and
# `--speculative-accept-threshold-acc`, both 1.0 by default. At 1.0 the walk is the exact
# target-only rule above. Below 1 it accepts more, and the output **no longer follows the
# target's distribution**: the engine takes them as `SpecConfig(accept_threshold_single=...,
# accept_threshold_acc=...)` (command line: the same flag names; the app: two boxes marked
# "lossy" while below 1), and every description of such a config says "lossy".
#
# The rule, with one uniform coin $u$ per node and the children tried in order, $S_j$ the target
# mass of the first $j$ children: accept $c_j$ when $p(c_j) \ge$ `threshold_single`, or when
# $u \le S_j /$ `threshold_acc`. At both thresholds 1 the coin falls into an interval of width
# exactly $p(c_j)$ for each child, which is the exact rule; dividing by `threshold_acc` < 1
# widens every child's interval, and `threshold_single` < 1 accepts any child the target gives
# that much outright. The mass the children gain is taken from every other token.
# (`workbench/lessons/lossy.py` writes the law of the emitted token in closed form; the engine's
# walk tosses one coin per child with the equivalent probabilities, `accept.relaxed_accept_prob`.)
#
# On the tiny exact-law setup (the tree eagle2:37/3/4, the same prompt and seed as above), each setting
# below is measured twice: by sampling, with the chi-square test of $(t_1..t_4)$ against the
# target's exact law, and in closed form for $(t_1, t_2)$ (the first speculative step's root),
# which has no sampling noise.

# %%
from workbench.lessons.chi_square import chi_square_test
from workbench.lessons.lossy import drift_sentence, first_two_tokens_law

EXACT_TREE = RULES[TREE_RULE]
SETTINGS = {"exact (1, 1)": (1.0, 1.0), "acc 0.8": (1.0, 0.8), "acc 0.5": (1.0, 0.5),
            "single 0.4": (0.4, 1.0), "single 0.25": (0.25, 1.0)}
exact_two = exact.sum(dim=(2, 3))  # [V, V]: the target's law of (t1, t2)
drift, runs = [], {}
for label, (single, acc) in SETTINGS.items():
    spec = SpecConfig.from_knobs("eagle2", num_steps=EXACT_TREE.num_steps, topk=EXACT_TREE.topk,
                                 num_draft_tokens=EXACT_TREE.num_draft_tokens, accept_threshold_single=single,
                                 accept_threshold_acc=acc)
    counts, accepted = sample_sequences(tiny, tiny_head, spec, PARAMS, PROMPT, LENGTH, N)
    runs[label] = (counts, accepted)
    stat, dof, pvalue = chi_square_test(counts, exact)
    closed = first_two_tokens_law(tiny, tiny_head, PROMPT, PARAMS, EXACT_TREE.topk, single, acc)
    drift.append({"setting": label, "lossy": spec.lossy, "drafts accepted per step": mean(accepted),
                  "TV (t1, t2), closed form": 0.5 * float((closed - exact_two).abs().sum()),
                  "TV (t1..t4), sampled": total_variation(counts, exact),
                  "chi-square / dof": stat / dof, "chi-square p-value": pvalue})
drift_table = pd.DataFrame(drift)
drift_table.round(4)

# %%
from plotly.subplots import make_subplots

fig = make_subplots(rows=1, cols=2, subplot_titles=("drafts accepted per step", "TV to the target's law of (t1, t2)"))
fig.add_bar(x=drift_table["setting"], y=drift_table["drafts accepted per step"], marker_color="#009E73",
            name="drafts accepted per step (sampled)", row=1, col=1)
fig.add_bar(x=drift_table["setting"], y=drift_table["TV (t1, t2), closed form"], marker_color="#D55E00",
            name="total variation (closed form)", row=1, col=2)
fig.update_layout(title=f"Lossy thresholds on the tiny target: acceptance gained and distribution moved<br>"
                        f"({N} samples per setting; (1, 1) is the exact rule)", height=440, margin=dict(t=120),
                  legend=dict(orientation="h", y=-0.25))
fig.show()

# %%
same = int((runs["exact (1, 1)"][0] == samples[TREE_RULE][0]).all())
same_steps = sum(a == b for a, b in zip(runs["exact (1, 1)"][1], samples[TREE_RULE][1]))
display(Markdown(
    f"**Takeaway.** {drift_sentence(drift_table['setting'].tolist(), drift_table['drafts accepted per step'].tolist(), drift_table['TV (t1, t2), closed form'].tolist(), drift_table['chi-square p-value'].tolist(), LEVEL)} "
    f"At (1, 1) the knobs change nothing: the same seed gives the same accepted drafts in {same_steps} of {N} "
    f"requests as the exact run above, and {'the same' if same else 'different'} counts in the "
    f"{exact.numel()} cells (fp32). The sampled total variation of the exact setting, "
    f"{drift_table['TV (t1..t4), sampled'][0]:.3f}, is what {N} samples over {exact.numel()} cells read even "
    f"for a lossless rule: the sampled column is a noise floor plus drift, the closed-form column drift alone."))


# %% [markdown]
# ## Judging the chain as a block
#
# Algorithm 1 decides draft by draft: a draft that $q$ proposes too often is rejected with
# $1 - p/q$ and everything after it is lost, even when the next draft is one $q$ proposes too
# *rarely*, so that the pair together is no more likely under $q$ than under $p$. **Block
# verification** ([Sun et al. 2024](https://arxiv.org/abs/2403.10444), Algorithm 2; vLLM's model
# runner v2, vllm-project/vllm#46781) looks at the prefix as a whole. For the prefix
# $x_1..x_i$ it keeps a weight
# $w_i = \min\left(1,\ w_{i-1} \frac{p_i(x_i)}{q_i(x_i)}\right)$, $w_0 = 1$, and keeps the
# prefix with probability
# $h_i = \frac{r_i}{r_i + 1 - w_i}$, $r_i = \sum_x \max(0,\ w_i\, p_{i+1}(x) - q_{i+1}(x))$,
# ($h_n = w_n$); one coin per draft, and the **longest** prefix whose coin falls under its $h$
# is accepted, a low-ratio draft inside it included. The bonus comes from
# $\mathrm{norm}(\max(0,\ w_\tau p_{\tau+1} - q_{\tau+1}))$ after the kept prefix $\tau$
# (`accept.block_chain`; the command line's `--chain-rule block`, the benchmark's
# `linear:3+block`, the app's "chain rule").
#
# The two-token example below (`lessons/block_rule.two_token_pair`): at the first position
# $p = (0.5, 0.5)$ and $q = (0.8, 0.2)$, so $q$ proposes `a` too often; after `a`,
# $p = (0.9, 0.1)$ and $q = (0.6, 0.4)$, so it proposes `a` too rarely. Each row is a chain of two
# drafts the draft can propose, with its probability under $q$, each rule's law of the accepted
# count $k$, and block's weights and $h$: every number computed by the code.

# %%
from workbench.analysis.chain_rules import exact_expected_accepted, output_law, target_law
from workbench.lessons.block_rule import example_rows, two_token_pair

pair = two_token_pair()
pd.DataFrame(example_rows(pair)).round(4)

# %%
aa = example_rows(pair)[0]
e_token, e_block = (exact_expected_accepted(pair, 2, r) for r in ("leviathan", "block"))
gap = max(float((output_law(pair, 3, 2, r) - target_law(pair, 3)).abs().max()) for r in ("leviathan", "block"))
display(Markdown(
    f"**Takeaway.** On the chain `aa` the token-level rule accepts the first `a` with "
    f"$0.5/0.8 = {aa['w1']:.3f}$ and, once it is in, the second with 1: both drafts with "
    f"{aa['leviathan P(k=2)']:.4f}. Block carries the first draft's deficit in $w_1 = {aa['w1']:.3f}$ and lets the "
    f"second pay it: $w_2 = \\min(1, {aa['w1']:.3f} \\cdot 0.9/0.6) = {aa['w2']:.4f}$, so it keeps both with "
    f"{aa['block P(k=2)']:.4f}. Over the drafts and the coins the token-level rule accepts {e_token:.4f} drafts "
    f"per step and block {e_block:.4f}. Both stay exact: the law of the first three output tokens, enumerated "
    f"over every step, differs from the target's by at most {gap:.1e} under either rule."))

# %% [markdown]
# **On real questions.** SmolLM2 with the shipped head, a chain of 4 drawn from $q$ at
# temperature 1, on the three short Spec-Bench questions notebook 6 uses, 48 new tokens, four
# seeds per rule. Two figures: τ as measured, one value per seed (the rules draw different
# chains, so only non-overlapping ranges name a winner), and, on the very chains each run drew,
# every rule's expected accepted drafts over the coins (`analysis/chain_rules.py`, what the
# app tables for the step on screen): a paired comparison without the coins' noise.

# %%
from workbench.lessons.block_rule import expectation_sentence, gain_sentence, rule_runs
from workbench.lessons.settings import lesson_prompts

SEEDS = (0, 1, 2, 3)
rule_results = rule_runs(wb, list(lesson_prompts(wb).values()), num_steps=4, seeds=SEEDS, max_new=48)
pd.DataFrame([{"rule": r.rule, **{f"τ seed {s}": t for s, t in zip(SEEDS, r.taus)}, "steps": r.steps,
               **{f"E[accepted] {k}": v for k, v in r.expected.items()}} for r in rule_results]).round(3)

# %%
display(Markdown(f"**Takeaway.** {gain_sentence(rule_results)} Paired, {expectation_sentence(rule_results)}"))
