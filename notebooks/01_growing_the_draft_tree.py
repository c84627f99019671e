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
# # 1. Growing the draft tree
#
# Each EAGLE-2 step ([Li et al. 2024](https://arxiv.org/abs/2406.16858)) grows a tree of drafts
# with `num_steps` draft forwards. Level 1 holds the `topk` most likely tokens after the root, and
# they are the first **frontier**. Every further level expands the frontier: each of its `topk`
# nodes proposes `topk` children, scored by their **path score**
# $s(x) = \prod_{y \in \text{root} \to x} q(y)$, the product of the head's probabilities along the
# branch. The next frontier is the global top-`topk` of those `topk²` children: the best nodes of
# the **newest** level, not the best nodes so far (an older node that lost its place in a frontier
# is never expanded later). Finally the best `num_draft_tokens - 1` candidates of **all** levels
# are kept (the **rerank**) and the root is put in front.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="auto")

# %%
import pandas as pd
from IPython.display import Markdown, display

from workbench.engine.tree import Candidates, build_tree, max_candidates, rerank

SPEC = SpecConfig("eagle2", num_steps=4, topk=3, num_draft_tokens=8)
traces = []
(req,), _ = wb.generate([wb.encode("Name the planets of the solar system in order.")], SPEC,
                        SamplingParams(), max_new_tokens=24, trace_sink=traces.append)
steps = [t for t in traces if t["kind"] == "spec"]
step = max(steps, key=lambda t: t["accept_length"])  # the step that emitted the most
cands = pd.DataFrame(step["draft"]["candidates"])
frontier = {i for lv in step["draft"]["levels"] for i in lv["frontier"]}
kept = set(step["draft"]["kept"])
cands["expanded"] = cands["index"].isin(frontier)
cands["in verify tree"] = cands["index"].isin(kept)
print(f"{SPEC.describe()}: step {step['step']} recorded {len(cands)} candidates "
      f"(topk + (num_steps - 1) * topk^2 = {max_candidates(SPEC.num_steps, SPEC.topk)})")
cands.sort_values(["level", "score"], ascending=[True, False])

# %% [markdown]
# ## Path scores level by level
#
# Each dot is a candidate, placed at its level and its path score; a line joins it to its parent.
# Filled dots were expanded (they were in a frontier), diamonds were kept for verification; those
# two kinds carry their token, the other candidates name theirs on hover (the table above lists
# them all). The dashed line is the rerank's cut-off, the lowest kept path score.

# %%
from workbench.viz.candidates import path_score_figure  # the figure builder the app shares

by_index = cands.set_index("index")  # candidates by flat index, for the frontier table below
cutoff = cands[cands["in verify tree"]].score.min()  # the rerank cut-off: the lowest kept path score

path_score_figure(step).show()

# %%
lines = []
for lv in step["draft"]["levels"]:
    parents = by_index.loc[lv["frontier"], "parent"].tolist()
    lines.append(f"level {lv['level']}: frontier {lv['frontier']} (their parents: {parents})")
uneven = [lv["level"] for lv in step["draft"]["levels"][1:]
          if len(set(by_index.loc[lv["frontier"], "parent"])) < len(lv["frontier"])]
display(Markdown(
    "**Takeaway.** " + "; ".join(lines) + ". "
    + (f"At level {uneven[0]} one parent placed several children in the frontier while another "
       "placed none: the frontier is the global top-k of all topk² children, not topk per parent. "
       if uneven else "Here each frontier node came from a different parent, but nothing forces "
       "that: the frontier is the global top-k of all topk² children. ")
    + "Path scores only shrink along a path (each factor is a probability), so deep candidates "
      "need confident parents to compete with shallow ones."))

# %% [markdown]
# ## The rerank to `num_draft_tokens - 1`
#
# `rerank` keeps the best `D - 1` candidates by path score and sorts them by their flat index,
# so that parents come before children and the tree mask is lower-triangular. A worked example
# with `topk = 2`, `num_steps = 3`, `D = 6` at committed length `L = 10`: level 1 is A (.6) and
# B (.3); A proposes C (.55) and D (.28), B proposes E (.8) and F (.1); the frontier is then C
# and E; C proposes G (.6) and H (.2), E proposes I (.5) and J (.4).

# %%
names = ["r", "A", "B", "C", "D", "E", "F", "G", "H", "I", "J"]  # token id = index here
seed = Candidates()
for name, prob, parent, level in [("A", .6, -1, 1), ("B", .3, -1, 1), ("C", .55, 0, 2), ("D", .28, 0, 2),
                                  ("E", .8, 1, 2), ("F", .1, 1, 2), ("G", .6, 2, 3), ("H", .2, 2, 3),
                                  ("I", .5, 4, 3), ("J", .4, 4, 3)]:
    score = prob * (1.0 if parent == -1 else seed.scores[parent])
    seed.add(names.index(name), prob, score=score, parent=parent, depth=level)
kept_seed, dropped_seed = rerank(seed, 6)
tree = build_tree(names.index("r"), seed, kept_seed, prefix_len=10, dropped=dropped_seed)
print("flat scores      ", [round(s, 3) for s in seed.scores])
print("kept flat indices", kept_seed, "-> nodes", [names[t] for t in tree.tokens])
print("positions        ", tree.positions)
print("next_token       ", tree.retrieve_next_token)
print("next_sibling     ", tree.retrieve_next_sibling)
print("mask rows        ", ["".join(str(int(v)) for v in row) for row in tree.mask])
assert kept_seed == [0, 1, 2, 4, 6] and tree.positions == [10, 11, 11, 12, 12, 13]

# %% [markdown]
# D (.168) loses to G (.198) although D is shallower: the rerank compares whole paths, so
# the kept tree can be deep where the draft is confident and bushy where it is not. Because a
# child never scores above its parent, the kept set is closed under ancestors.
#
# The real step above, reranked the same way:

# %%
kept_rows = cands[cands["in verify tree"]].sort_values("index")
closed = all(p == -1 or p in kept for p in kept_rows.parent)
depths = pd.Series([n["depth"] for n in step["tree"]["nodes"]]).value_counts().sort_index()
depths = {int(d): int(count) for d, count in depths.items()}
display(kept_rows[["index", "level", "parent", "text", "prob", "score"]])
display(Markdown(
    f"**Takeaway.** Of {len(cands)} candidates the {len(kept_rows)} = num_draft_tokens - 1 best "
    f"were kept (cut-off path score {cutoff:.3g}); every kept node's parent was kept too: {closed}. "
    f"Nodes per depth in the verify tree: {depths} (depth 0 is the root)."))

# %% [markdown]
# ## Why the root takes one slot
#
# The verify block has `num_draft_tokens` rows, and the first is the **root**: the token the
# previous step emitted last (its bonus, or the prefill's first token). It was produced by a
# logits row, never fed to the target, so its K/V does not exist yet; the verify forward
# computes it, at position `L`, and the root's own logits row is the target's prediction for
# depth 1, the row that checks the level-1 drafts. So `D` rows hold `D - 1` drafts.

# %%
previous = traces[traces.index(step) - 1]
root = step["tree"]["nodes"][0]
display(Markdown(
    f"**Takeaway.** Step {step['step']}'s root is {root['text']!r} at position {root['position']} = L "
    f"(committed length {step['L']}); it is the last token the previous step emitted "
    f"({previous['emitted'][-1] == root['token']}). Its verify row predicts "
    f"{step['verify']['top'][0][0]['text']!r} for depth 1. Of the {SPEC.num_draft_tokens} verify rows, "
    f"{SPEC.num_draft_tokens - 1} are drafts; one step emits between 1 and num_steps + 1 = "
    f"{SPEC.num_steps + 1} tokens, and this one emitted {step['accept_length']}."))
