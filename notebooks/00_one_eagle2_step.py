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
# # 0. One EAGLE-2 step
#
# Speculative decoding lets a cheap **draft** guess several tokens ahead and has the **target**
# model check all the guesses in **one** forward; the output is exactly what the target alone
# would have produced ([Leviathan et al. 2023](https://arxiv.org/abs/2211.17192),
# [Chen et al. 2023](https://arxiv.org/abs/2302.01318)). In EAGLE
# ([Li et al. 2024](https://arxiv.org/abs/2401.15077)) the draft is a one-layer **head** that reads
# the target's own last hidden state; EAGLE-2 ([Li et al. 2024](https://arxiv.org/abs/2406.16858))
# grows the guesses as a **tree** shaped by the head's confidence. (EAGLE-3,
# [Li et al. 2025](https://arxiv.org/abs/2503.01840), trains the head on features from several
# layers; the step is the same.)
#
# This notebook follows **one real step** of the engine on SmolLM2-135M-Instruct with the shipped
# head, drawn with the same figure builders as the web app (`workbench/viz`):
#
# 1. **draft**: the head extends its cache with pairs $(f_t, x_{t+1})$ and grows a tree of candidates;
# 2. **build**: the best `num_draft_tokens - 1` candidates are kept, the root put in front, and a tree mask built;
# 3. **verify**: one target forward over all the nodes;
# 4. **accept**: the walk keeps the longest branch the target agrees with, plus one **bonus** token;
# 5. **commit**: the KV cache keeps the accepted branch and forgets the rest.
#
# No cost model yet: the words τ, α, γ and c are defined at the end, and notebook 6 measures them.

# %%
from workbench.lessons.start import start

wb = start(dtype="fp32")  # fp32, the reference precision (notebook 2 measures a verify row against a fresh forward)

# %%
import pandas as pd
from IPython.display import HTML, Markdown, display

from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.takeaways import plural

SPEC = SpecConfig("eagle2", num_steps=4, topk=3, num_draft_tokens=8)
PROMPT = "Write a Python function that adds two numbers."
eng = wb.engine(SPEC, SamplingParams(), trace=True)  # greedy: temperature 0
(req,) = eng.add_requests([wb.encode(PROMPT)], max_new_tokens=40)
(prefill,) = eng.step()  # the prompt's K/V in the target's cache, and the first token
print(f"{SPEC.describe()}; prompt of {len(req.prompt_ids)} tokens; the prefill chose "
      f"{wb.token_text(req.output_ids[0])!r}")

# %% [markdown]
# ## What the draft head reads: pairs $(f_t, x_{t+1})$
#
# The target's forward over token $x_t$ ends with a feature $f_t$ (its last hidden state, after the
# final norm; 576 numbers here), from which the target's `lm_head` predicts $x_{t+1}$. The head is
# fed the **pair** $(f_t, x_{t+1})$: the target's feature at position $t$ together with the token
# that actually came next. Knowing $x_{t+1}$ removes the uncertainty of sampling: the head does not
# have to guess which token the feature turned into, only what comes after it.
#
# After the prefill the pairs are every prompt position, the last one paired with the token the
# prefill just chose. The engine holds them until the next step's **draft extend** writes them into
# the head's cache:

# %%
features = req.pending_features  # [P, H]: f_t for t = 0..P-1
pairs = pd.DataFrame({
    "t": range(len(req.pending_tokens)),
    "x_t (fed to the target)": [repr(wb.token_text(x)) for x in req.prompt_ids],
    "f_t (first 3 of %d numbers)" % features.shape[1]: [[round(v, 2) for v in f[:3].tolist()] for f in features],
    "x_{t+1} (paired with f_t)": [repr(wb.token_text(x)) for x in req.pending_tokens],
})
display(pairs.tail(6))
print(f"{len(pairs)} pairs wait for the draft extend; the last pairs the final prompt feature with the "
      f"prefill's token {wb.token_text(req.pending_tokens[-1])!r}.")

# %% [markdown]
# ## The step
#
# One call runs all five phases and records what each did in a **trace** (a plain dict); every
# figure below is drawn from that trace by the app's builders. A step where the target rejects
# every draft teaches little, so the cell steps until one accepts at least two drafts.

# %%
for _ in range(12):
    (step,) = eng.step()
    if len(step["accept"]["path"]) >= 3 or eng.done:  # the root and at least two accepted drafts
        break
nodes = step["tree"]["nodes"]
if len(step["accept"]["path"]) < 3:
    print("no step accepted two drafts within 12 steps: showing the last one")
print(f"step {step['step']} (step 1 was the prefill): committed length before the step L = {step['L']}; "
      f"{len(step['draft']['candidates'])} candidates "
      f"grown over {SPEC.num_steps} draft levels; {len(nodes)} verify nodes (root included); "
      f"emitted {[wb.token_text(t) for t in step['emitted']]}")

# %% [markdown]
# ### Draft and build: the tree
#
# Level 1 holds the `topk` most likely tokens after the root. Each further level expands the
# **frontier**: the `topk` best nodes of the **newest** level by **path score** (the product of the
# head's probabilities from the root), each proposing `topk` children. Then the best
# `num_draft_tokens - 1` candidates of all levels are kept (the **rerank**; ▽ marks the dropped
# ones) and the root, the last token already emitted, is put in front. Colours and markers show
# what the walk did with each node.

# %%
from workbench.viz.tree import tree_figure

tree_figure(step).show()

# %% [markdown]
# ### Verify: the tree mask
#
# The verify forward feeds the nodes as queries. Each attends the whole committed prefix (one band
# on the left) and, among the nodes, only itself and its ancestors: a branch never sees another
# branch. Node $i$ sits at position $L + \mathrm{depth}(i)$, as if its branch were the only
# continuation.

# %%
from workbench.viz.mask import mask_figure

mask_figure(step).show()

# %% [markdown]
# ### Shifted by one: row $i$ predicts the token **after** node $i$
#
# The target's logits row $i$ is its distribution of the next token after node $i$'s branch, so it
# is compared with the **children** of node $i$, never with node $i$ itself.

# %%
from workbench.viz.logits import logits_rows

shifted = pd.DataFrame([{
    "row": r["node"], "after": repr(r["after"]),
    "target's top next tokens": ", ".join(f"{t['text']!r} {t['prob']:.2f}" for t in r["top"][:3]),
    "children (verdict)": ", ".join(f"{c['text']!r} ({c['verdict']})" for c in r["children"]) or "leaf",
} for r in logits_rows(step)])
shifted

# %% [markdown]
# ### Accept: the walk
#
# From the root the walk reads `retrieve_next_token` (first child) and `retrieve_next_sibling`
# (next sibling); a child equal to the target's choice is accepted and the walk descends. When no
# child matches, or at a leaf, it stops, and the target's choice there is the **bonus**.

# %%
from workbench.viz.walk import pointer_rows, walk_moves

display(pd.DataFrame(pointer_rows(step)))
moves = walk_moves(step)
for m in moves:
    if m["kind"] == "try":
        print(f"at node {m['node']} {m['at_text']!r}: {m['pointer']} -> node {m['child']} {m['text']!r}: "
              f"{'match' if m['match'] else 'miss'}")
    else:
        print(f"stop at node {m['node']} ({m['reason']}); bonus {m['bonus']['text']!r}")

# %% [markdown]
# ### Commit: the KV cache
#
# Verify wrote the K/V of every node into fresh slots. Commit keeps the first $n + 1$ of them for
# the root and the accepted nodes, appended to the request's table (their positions are
# $L, L+1, \dots$): an accepted node verified further along (a second child, or a node under one)
# has its rows copied there first (`moved` below). The others are freed: rollback is a table edit.
# The head's tree levels used scratch slots, freed as soon as the tree was built.

# %%
from workbench.viz.kv import kv_figure, kv_summary

kv_figure(step).show()
kv_summary(step)

# %% [markdown]
# ## The pairs for the next step
#
# The accepted branch becomes the next draft extend's input: the features verify computed for the
# root and each accepted node, paired with the token after it, ending with the bonus.

# %%
after = pd.DataFrame({
    "f_t of node": [f"{i} {nodes[i]['text']!r}" for i in step["accept"]["path"]],
    "x_{t+1}": [repr(wb.token_text(x)) for x in req.pending_tokens],
})
display(after)
n = len(step["accept"]["path"]) - 1  # drafts the walk accepted; accept_length counts what the step emitted
display(Markdown(
    f"**Takeaway.** One target forward over {len(nodes)} nodes accepted {n} draft{plural(n)} and added a "
    f"bonus: {step['accept_length']} token{plural(step['accept_length'])} for the price of one forward (plus {SPEC.num_steps} small "
    f"head forwards). The next step starts from the bonus {step['accept']['bonus']['text']!r} as its root "
    f"and from {len(after)} new pair{plural(len(after))} $(f_t, x_{{t+1}})$."))

# %% [markdown]
# ## Four words for what comes next
#
# * $\tau$, the **accept length**: tokens emitted per verify step, accepted drafts plus the bonus,
#   averaged over steps: $1 \le \tau \le$ `num_steps` $+ 1$. A step that the end of the output cuts
#   (a stop token, `max_new_tokens`) counts the tokens it appended, so the steps' counts add up to
#   the output less the prefill's token, which is not counted.
# * $\gamma$: the number of drafts per step of a **chain** (`topk = 1`, `num_steps` $= \gamma$).
# * $\alpha$, the **acceptance rate**: the chance that a draft is accepted given that the drafts
#   before it were. For a chain with i.i.d. acceptance,
#   $\mathbb{E}[\text{tokens per step}] = \frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}$.
# * $c$: the cost of one draft forward relative to one target decode step. A chain step costs
#   $\gamma c + 1$ decode steps if verifying $\gamma + 1$ tokens costs what decoding one does.
#
# The rest of this run, measured with these words:

# %%
eng.run()
tau = sum(req.accept_lengths) / len(req.accept_lengths)
display(Markdown(
    f"**Takeaway.** Over {len(req.accept_lengths)} steps this tree emitted τ = {tau:.2f} tokens per target "
    f"forward (at most {SPEC.num_steps + 1}); {req.provenance.count('accepted')} of the "
    f"{len(req.output_ids)} output tokens were drafts the target accepted. Notebooks 1 to 5 take each "
    "phase apart; notebook 6 asks when this pays, with α and c measured on this machine."))
