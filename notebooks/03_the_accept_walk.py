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
# # 3. The accept walk
#
# After verify, the walk starts at the root. It scans the children of the current node along
# `retrieve_next_token[i]` (first child, -1 if none) then `retrieve_next_sibling[c]` (next
# sibling, -1 if none). A child equal to the target's choice at the current node is accepted
# and the walk descends; when no child matches, or at a leaf, it stops. The target's choice at
# the last accepted node is the **bonus** token: every step emits at least 1 token (the bonus
# alone) and at most `num_steps + 1`.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="fp32")  # the real target, for the last part; fp32: its output tokens are compared for equality

# %% [markdown]
# ## The code
#
# The engine's greedy walk, printed from its source (`workbench/engine/accept.py`), with the
# generator that reads the two pointers: `_children` yields each child of a node, the first
# through `retrieve_next_token`, the others through `retrieve_next_sibling`.

# %%
import inspect

from workbench.engine import accept

print(inspect.getsource(accept._children))
print(inspect.getsource(accept.greedy_walk))

# %% [markdown]
# ## A chain
#
# Root `the`, drafts `cat, sat, on` (topk = 1). The target's argmax per row: after `the` comes
# `cat`, after `cat` comes `sat`, after `sat` comes `the`.

# %%
import pandas as pd
from IPython.display import Markdown, display

from workbench.engine.accept import greedy_walk
from workbench.engine.tree import Candidates, build_tree

words = ["the", "cat", "sat", "on", "mat"]  # token id = index here

def show(result, tokens, names):
    moves = pd.DataFrame([vars(m) for m in result.moves])[["node", "child", "via", "match"]]
    moves["child token"] = [names[tokens[c]] for c in moves.child]
    display(moves)
    emitted = result.num_accepted + 1
    print(f"path {result.path}: accepted {[names[tokens[i]] for i in result.path[1:]]}, "
          f"bonus {names[result.bonus]!r} -> {emitted} token{'s' * (emitted > 1)}, "
          f"correct drafts = {result.num_accepted}")

chain = [0, 1, 2, 3]  # the cat sat on
argmax = [1, 2, 0, 4]  # the->cat, cat->sat, sat->the, on->mat
show(greedy_walk(chain, [1, 2, 3, -1], [-1, -1, -1, -1], argmax), chain, words)
show(greedy_walk(chain, [1, 2, 3, -1], [-1, -1, -1, -1], [4, 4, 4, 4]), chain, words)

# %% [markdown]
# **Takeaway.** `sat` is accepted, `on` is not (the target wants `the` there), so the bonus is
# `the`: 3 tokens for one target forward. With no match at all the root's row still gives
# one token, exactly what a plain decode step would have produced.
#
# ## A tree
#
# Root 0 with children A (1) and B (2); C (3) and D (4) are children of A, E (5) of B. The target
# wants A after the root and D after A.

# %%
names = ["root", "A", "B", "C", "D", "E", "X"]  # token id = index here; X: the target's choice after D
cands = Candidates()
for name, parent in [("A", -1), ("B", -1), ("C", 0), ("D", 0), ("E", 1)]:
    cands.add(names.index(name), 0.5, score=0.5, parent=parent, depth=1 if parent == -1 else 2)
tree = build_tree(0, cands, [0, 1, 2, 3, 4], prefix_len=0)
print("retrieve_next_token  ", tree.retrieve_next_token)
print("retrieve_next_sibling", tree.retrieve_next_sibling)
assert tree.retrieve_next_token == [1, 3, 5, -1, -1, -1]
assert tree.retrieve_next_sibling == [-1, 2, -1, 4, -1, -1]
argmax = [1, 4, 0, 0, 6, 0]  # root->A, A->D, D->X (rows of B, C, E do not matter)
show(greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, argmax), tree.tokens, names)

# %% [markdown]
# **Takeaway.** The walk accepts A (the first child), tries C (miss) then its sibling D (hit); D is
# a leaf, so it stops and the bonus is the target's choice after D. Two drafts accepted, τ = 3.
# A chain of 3 drafts offers one guess per depth; this tree of 5 offers two at depths 1 and 2.
#
# ## A real step

# %%
import plotly.graph_objects as go

from workbench.viz.tree import tree_figure

PROMPT = "Write a short story about a robot who learns to paint."
TREE = SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)
traces = []
(tree_req,), _ = wb.generate([wb.encode(PROMPT)], TREE, SamplingParams(), max_new_tokens=32,
                             trace_sink=traces.append)
step = max((t for t in traces if t["kind"] == "spec"), key=lambda t: t["accept_length"])
nodes = step["tree"]["nodes"]
moves = pd.DataFrame(step["accept"]["moves"])
moves["child text"] = [repr(nodes[c]["text"]) for c in moves.child]
moves["target wants"] = [repr(step["verify"]["top"][n][0]["text"]) for n in moves.node]
display(moves)
tree_figure(step).show()

# %%
path_text = [repr(nodes[i]["text"]) for i in step["accept"]["path"]]
n = len(step["accept"]["path"]) - 1  # drafts the walk accepted (accept_length: the tokens the step emitted)
display(Markdown(
    f"**Takeaway.** In step {step['step']} the walk made {len(moves)} pointer moves and accepted "
    f"{n} draft{'s' * (n != 1)} along {' → '.join(path_text)}; the bonus "
    f"{step['accept']['bonus']['text']!r} is the target's choice after node {step['accept']['bonus']['after_node']}. "
    f"The step emitted {step['accept_length']} token{'s' * (step['accept_length'] > 1)} for one target forward."))

# %% [markdown]
# ## Chain vs tree, and the bounds on tokens per step
#
# The same prompt with a chain of the same depth (`num_steps = 5`, topk = 1, 6 verify rows) and
# the tree above (topk = 4, 8 verify rows), and plain greedy decoding to compare both outputs
# with. Output tokens are either accepted drafts or bonus tokens (the prefill's first token
# aside).

# %%
CHAIN = SpecConfig.linear(5)
(chain_req,), _ = wb.generate([wb.encode(PROMPT)], CHAIN, SamplingParams(), max_new_tokens=32)
(plain_req,), _ = wb.generate([wb.encode(PROMPT)], SpecConfig("vanilla"), SamplingParams(), max_new_tokens=32)
fig = go.Figure()
for name, r in [("chain", chain_req), ("tree", tree_req)]:
    fig.add_histogram(x=r.accept_lengths, name=name, xbins=dict(start=0.5, end=TREE.num_steps + 1.5, size=1))
fig.update_layout(title="Tokens emitted per step", barmode="group", height=340,
                  xaxis=dict(title="tokens the step emitted (n + 1; fewer at a step the output ends inside)",
                             dtick=1), yaxis_title="steps")
fig.show()
for r, spec in [(chain_req, CHAIN), (tree_req, TREE)]:
    assert 1 <= min(r.accept_lengths) and max(r.accept_lengths) <= spec.num_steps + 1


# %%
from workbench.metrics import requests_tau  # mean accept length over the verify steps

same = sum(r.output_ids == plain_req.output_ids for r in (chain_req, tree_req))
display(Markdown(
    f"**Takeaway.** Chain: τ = {requests_tau(chain_req):.2f} over {len(chain_req.accept_lengths)} steps; tree: "
    f"τ = {requests_tau(tree_req):.2f} over {len(tree_req.accept_lengths)} steps. Every step emitted between 1 and "
    f"num_steps + 1 = {TREE.num_steps + 1} tokens (longest: chain {max(chain_req.accept_lengths)}, tree "
    f"{max(tree_req.accept_lengths)}). Of the tree's output tokens, {tree_req.provenance.count('accepted')} are "
    f"accepted drafts and {tree_req.provenance.count('bonus')} bonus tokens. In {wb.dtype_name}, {same} of 2 "
    f"speculative outputs (chain, tree) equal plain greedy decoding's {len(plain_req.output_ids)} tokens"
    + (": the walk only ever emits the target's own choices." if same == 2 else
       ": a difference here is a near-tie the differently batched forwards rounded apart.")))
