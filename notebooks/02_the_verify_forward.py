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
# # 2. The verify forward
#
# One target forward checks the whole draft tree. Its **queries** are the tree's nodes (root
# first); its **keys/values** are the committed prefix, read from the KV cache, plus the nodes
# themselves. A node may attend the whole prefix, itself and its ancestors, never a sibling
# branch: the **tree mask**. Node $i$ sits at position $L + \mathrm{depth}(i)$, as if its branch were
# the only continuation: that position is what rotary embeddings (RoPE) see, so depth, not
# the node's index in the block, sets the angle its query and key are rotated by. Logits row i is
# the target's distribution of the token **after** node i.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="fp32")

# %% [markdown]
# ## The tree mask on a small example
#
# Root `the`; depth 1: `mat`, `rug`; children of `mat`: `and`, `on`; child of `rug`: `soft`.
# `build_tree` derives the mask and positions from the parents alone.

# %%
import plotly.graph_objects as go
import pandas as pd
from IPython.display import Markdown, display

from workbench.engine.tree import Candidates, build_tree
from workbench.lessons.takeaways import plural

words = ["the", "mat", "rug", "and", "on", "soft"]  # token id = index here
cands = Candidates()
for word, prob, parent, level in [("mat", .5, -1, 1), ("rug", .3, -1, 1), ("and", .4, 0, 2),
                                  ("on", .3, 0, 2), ("soft", .6, 1, 2)]:
    cands.add(words.index(word), prob, score=prob * (1.0 if parent == -1 else cands.scores[parent]), parent=parent, depth=level)
L = 10
tree = build_tree(words.index("the"), cands, [0, 1, 2, 3, 4], prefix_len=L)
rows = ["".join(str(int(v)) for v in row) for row in tree.mask]
print("mask rows:", dict(zip(words, rows)))
print("positions:", tree.positions, "= L +", [p - L for p in tree.positions])
assert rows == ["100000", "110000", "101000", "110100", "110010", "101001"]

# %% [markdown]
# ## Tree mask beside a causal mask
#
# A plain causal mask over the same six tokens in the same order would let each see every
# earlier one, and would give them positions `L, L+1, ..., L+5`, as if they were one sentence.
# Red cells are what the causal mask allows and the tree mask forbids; the axis labels carry the
# position RoPE rotates each token by under each mask.

# %%
from plotly.subplots import make_subplots


def mask_pair(tree_mask: list[list[int]], labels: list[str], tree_positions: list[int], L: int):
    """Tree mask and causal mask side by side; cells only the causal one allows in red."""
    n = len(labels)
    causal = [[int(k <= q) for k in range(n)] for q in range(n)]
    extra = [[2 if causal[q][k] and not tree_mask[q][k] else causal[q][k] for k in range(n)] for q in range(n)]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.18,
                        subplot_titles=("tree mask (positions L + depth)", "causal mask (positions L + index)"))
    scale = [[0, "white"], [0.5, "seagreen"], [1, "indianred"]]
    for col, (z, positions) in enumerate([(tree_mask, tree_positions), (extra, [L + i for i in range(n)])], 1):
        ticks = [f"{w} @{p}" for w, p in zip(labels, positions)]
        fig.add_heatmap(z=z, x=labels, y=ticks, zmin=0, zmax=2, colorscale=scale, showscale=False,
                        xgap=1, ygap=1, row=1, col=col)
    fig.update_yaxes(autorange="reversed", title_text="query @ position", row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=2)
    fig.update_xaxes(title_text="key")
    for name, color in [("may attend (both masks)", "seagreen"), ("causal only: another branch", "indianred")]:
        fig.add_scatter(x=[None], y=[None], mode="markers", marker=dict(symbol="square", size=12, color=color),
                        name=name)
    fig.update_layout(title=f"The same {n} tokens under each mask", height=440, width=880, plot_bgcolor="white",
                      margin=dict(t=90), legend=dict(orientation="h", yanchor="top", y=-0.2))
    return fig


mask_pair(tree.mask.int().tolist(), words, tree.positions, L).show()

# %% [markdown]
# **Takeaway.** `soft` sees `the` and `rug` only: not `mat` or `and`, which are another branch.
# `and` and `on` are siblings and do not see each other. Both depth-2 branches sit at position
# `L + 2`: positions follow depth, not node index. Under the causal mask `soft` would sit at
# `L + 5` and read `mat`, `and` and `on`, words of a sentence no one wrote.
#
# ## A real verify step
#
# One EAGLE-2 step of the engine on the real target (the first step after the prefill).

# %%
from workbench.viz.mask import mask_figure

SPEC = SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)
eng = wb.engine(SPEC, SamplingParams(), trace=True)
(req,) = eng.add_requests([wb.encode("What are the three primary colors?")], max_new_tokens=32)
eng.step()  # prefill: the prompt's K/V, and the first token (the root of the next step)
(step,) = eng.step()
nodes = pd.DataFrame(step["tree"]["nodes"])
L = step["L"]
nodes["position - L"] = nodes.position - L
nodes["parent text"] = [repr(nodes.text[p]) if p >= 0 else "" for p in nodes.parent]
display(nodes[["node", "text", "parent", "parent text", "depth", "position", "position - L"]])
mask_figure(step).show()
assert (nodes.position == L + nodes.depth).all()

# %% [markdown]
# ## Keys and values: the prefix is read, not prefilled again
#
# The verify forward feeds only the `N` tree nodes to the target. `build_meta` describes what
# they attend: the request's committed slots (the prefix, never masked) then the `N` new slots
# (under the tree mask). `visibility` is what the attention reference computes from it.

# %%
import torch

from workbench.attention.meta import build_meta
from workbench.attention.reference import visibility

prefix_slots = eng.table.slots(req.rid)[:L]  # committed before the step (kept slots were appended after)
written = step["kv"]["target"]["written"]
meta = build_meta([len(written)], [prefix_slots], extra_slots=[written], masks=[torch.tensor(step["tree"]["mask"], dtype=torch.bool)])
vis = visibility(meta, 0, torch.device("cpu"))  # [N, L + N]
print(f"queries: {vis.shape[0]} nodes; keys/values: {L} prefix + {len(written)} nodes = {vis.shape[1]}")
print(f"every node sees the whole prefix: {bool(vis[:, :L].all())}; "
      f"the node columns are the tree mask: {vis[:, L:].int().tolist() == step['tree']['mask']}")

# %% [markdown]
# If the verify forward is right, row i equals what a plain forward over the committed text
# followed by the path from the root to node i predicts. Check it, node by node, with fresh
# forwards that recompute everything from scratch:

# %%
from workbench.lessons.ancestors import branch_tokens
from workbench.lessons.exact_law import next_token_laws
from workbench.lessons.takeaways import within

committed = (req.prompt_ids + req.output_ids)[:L]
branches = [committed + branch_tokens(step, i) for i in range(len(nodes))]  # prefix + root..node i
fresh = next_token_laws(wb.target, branches, SamplingParams(temperature=1.0))  # [N, V], new caches
worst, same_top = 0.0, 0
for i, top in enumerate(step["verify"]["top"]):
    same_top += int(fresh[i].argmax()) == top[0]["token"]
    worst = max(worst, max(abs(float(fresh[i, t["token"]]) - t["prob"]) for t in top))
display(Markdown(
    f"**Takeaway.** For all {len(nodes)} nodes, the verify row and a fresh forward over "
    f"{L} + depth + 1 tokens agree: the same top token for {same_top} of {len(nodes)}, and the top-5 "
    f"probabilities {within(worst)}"
    + ("" if worst == 0 else " (fp32 rounds two differently batched computations apart: numbers are compared "
                             "within a tolerance, tokens for equality)")
    + f". The verify forward computed {len(nodes)} tokens, the fresh forwards "
      f"{sum(L + d + 1 for d in nodes.depth)}: the history is read from the cache, not prefilled again."))

# %% [markdown]
# ### One row under each mask
#
# The deepest node whose row differs between the two masks, read three ways: its verify row (tree
# mask, position `L + depth`), a fresh forward over the committed text and its own branch (what
# the tree mask promises), and a fresh forward over the committed text followed by **all** the
# nodes up to it in block order (what a causal mask over the block would compute, positions
# `L + index`).

# %%
block = [n["token"] for n in step["tree"]["nodes"]]
tree_rows = step["tree"]["mask"]
differs = [i for i in range(len(nodes)) if tree_rows[i][: i + 1] != [1] * (i + 1)]
row = max(differs, key=lambda i: (nodes.depth[i], i)) if differs else len(nodes) - 1
causal_law = next_token_laws(wb.target, [committed + block[: row + 1]], SamplingParams(temperature=1.0))[0]
verify_top = step["verify"]["top"][row][0]
reads = pd.DataFrame([
    {"read": "verify row (tree mask)", "position of the node": L + int(nodes.depth[row]),
     "tokens it attends": L + int(nodes.depth[row]) + 1, "top next token": repr(verify_top["text"])},
    {"read": "fresh forward over prefix + its branch", "position of the node": L + int(nodes.depth[row]),
     "tokens it attends": L + int(nodes.depth[row]) + 1, "top next token": repr(wb.token_text(int(fresh[row].argmax())))},
    {"read": "fresh forward over prefix + the block so far (causal)", "position of the node": L + row,
     "tokens it attends": L + row + 1, "top next token": repr(wb.token_text(int(causal_law.argmax())))},
])
display(reads)
tree_ok = int(fresh[row].argmax()) == verify_top["token"]
causal_same = int(causal_law.argmax()) == verify_top["token"]
display(Markdown(
    f"**Takeaway.** Row {row} ({nodes.text[row]!r}, depth {nodes.depth[row]}) under the tree mask predicts "
    f"{verify_top['text']!r}, {'the same as' if tree_ok else 'not the same as'} a fresh forward over its own "
    f"branch. Under a causal mask it would also read {row - int(nodes.depth[row])} node"
    f"{'s' * (row - int(nodes.depth[row]) != 1)} of other branches and sit at position {L + row} instead of "
    f"{L + int(nodes.depth[row])}, and it would predict {wb.token_text(int(causal_law.argmax()))!r}"
    + (f" (the same token here, with probability {float(causal_law[verify_top['token']]):.3f} against "
       f"{verify_top['prob']:.3f} under the tree mask)." if causal_same else
       ": another token, the verdict of a sentence no one wrote.")))

# %% [markdown]
# ## Logits are `[nodes, vocab]`, and row i predicts the token after node i
#
# So row i is compared with the **children** of node i, never with node i itself.

# %%
V = wb.target.config.vocab_size
rows = []
for i, node in nodes.iterrows():
    children = nodes[nodes.parent == i]
    best = step["verify"]["top"][i][0]
    rows.append({"row": i, "node": repr(node.text), "target's next token": repr(best["text"]),
                 "prob": best["prob"], "children": [repr(t) for t in children.text],
                 "a child matches": best["token"] in set(children.token)})
table = pd.DataFrame(rows)
display(table)
display(Markdown(
    f"**Takeaway.** The verify forward returns {len(nodes)} rows over a vocabulary of {V:,} "
    f"(`[nodes, vocab]`). In {int(table['a child matches'].sum())} rows one of the node's children "
    f"is the target's choice; the accept walk (notebook 3) follows those matches from the root, and "
    f"the walk accepted {len(step['accept']['path']) - 1} draft{plural(len(step['accept']['path']) - 1)} "
    "in this step."))
