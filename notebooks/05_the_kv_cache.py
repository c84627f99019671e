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
# # 5. The KV cache
#
# The target and the draft head each keep K/V for every committed token, in two physical
# buffers that share **one** slot allocator and one request → slots table (page size 1). A
# step writes the verify block's K/V into fresh target slots; afterwards the first $n + 1$ of them
# are appended to the request's table for the root and the $n$ accepted drafts (their positions
# $L + \mathrm{depth}$ are $L, L+1, \dots$ along the accepted path) and the others are freed:
# rollback is a table edit. An accepted node that was verified further along (a second child, or a
# node under one) has its K/V rows **moved** to its kept slot first: at most `num_steps` rows a
# layer. Without the copy a tree's kept slots would leave holes, later steps would fill them out of
# order, and attention, which reads a request's cache as a view of the pool when its slots are one
# ascending run, would gather the whole prefix at every layer instead (what that costs on a 2-core
# CPU: docs/bench/commit-move.md). The draft's tree levels use scratch slots, freed after the draft
# phase; the next step's **draft extend** writes the draft K/V of the newly committed tokens at
# the same slot ids as the target's.

# %%
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.start import start

wb = start(dtype="fp32")

# %%
import pandas as pd
import plotly.graph_objects as go
from IPython.display import Markdown, display

from workbench.viz.mask import mask_figure

SPEC = SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)
eng = wb.engine(SPEC, SamplingParams(), trace=True)
(req,) = eng.add_requests([wb.encode("Describe a sunrise over the ocean.")], max_new_tokens=48)
traces = [t for _ in range(5) for t in eng.step()]  # the prefill, then 4 steps
eng.check_integrity()

sizes = []
for name, model, pool in [("target", wb.target, eng.target_kv), ("draft head", wb.draft, eng.draft_kv)]:
    c = model.config
    per_token = pool.nbytes() / pool.num_slots
    sizes.append({"cache": name, "layers": len(pool.k), "kv heads": c.num_kv_heads, "head dim": c.head_dim,
                  "dtype": str(pool.k[0].dtype), "bytes per token": int(per_token),
                  f"MB at {wb.target.config.max_position_embeddings} tokens":
                      round(per_token * wb.target.config.max_position_embeddings / 1e6, 1),
                  "slots in this engine": pool.num_slots})
sizes = pd.DataFrame(sizes)
sizes

# %%
t, d = sizes["bytes per token"]
display(Markdown(
    f"**Takeaway.** One token costs {t:,} bytes of target K/V (2 × layers × kv heads × head dim × "
    f"bytes) and {d:,} of draft K/V: the one-layer head adds {d / t:.1%} to the cache. The engine "
    f"sized both pools once, for the prompt, the new tokens and one step's worth of tree slots."))

# %% [markdown]
# ## Slots written, kept and rolled back in one step

# %%
spec_steps = [t for t in traces if t["kind"] == "spec"]
step = max(spec_steps, key=lambda t: (len(t["kv"]["target"]["moved"]), t["accept_length"]))  # one that moved rows
kv = step["kv"]
L = step["L"]
prefix = eng.table.slots(req.rid)[:L]
roles = [("target", "committed prefix", prefix, "lightsteelblue"),
         ("target", "verify: kept (first n + 1)", kv["target"]["kept"], "seagreen"),
         ("target", "verify: freed (rolled back)", kv["target"]["freed"], "indianred"),
         ("draft", "draft extend (kept)", kv["draft"]["extend_written"], "darkorange"),
         ("draft", "tree levels (scratch, freed)", kv["draft"]["scratch"], "khaki")]
fig = go.Figure()
for buffer, label, slots, color in roles:
    fig.add_scatter(x=slots, y=[buffer] * len(slots), mode="markers", name=label,
                    marker=dict(symbol="square", size=9, color=color))
fig.update_layout(title=f"Step {step['step']}: slot ids by role (L = {L} before the step)", height=300,
                  xaxis_title="slot id", yaxis=dict(categoryorder="array", categoryarray=["draft", "target"]))
fig.show()
display(pd.DataFrame([{"what": label, "slots": slots} for _, label, slots, _ in roles[1:]]))

# %%
kept, freed, moved = kv["target"]["kept"], kv["target"]["freed"], kv["target"]["moved"]
path, written = step["accept"]["path"], kv["target"]["written"]
table_after = eng.table.slots(req.rid)[L: L + len(kept)]
reused = sorted(set(kv["draft"]["scratch"]) & set(written))
table = eng.table.slots(req.rid)
one_run = table == list(range(table[0], table[0] + len(table)))
moves = ", ".join(f"node {written.index(a)}'s rows from slot {a} to {b}" for a, b in moved) or "none"
display(Markdown(
    f"**Takeaway.** Verify wrote {len(written)} target slots, one per node; the walk accepted "
    f"{len(path) - 1} drafts along nodes {path}, so the first {len(kept)} slots, {kept}, became positions "
    f"{L}..{L + len(kept) - 1} of the request (the table now reads {table_after} there) and the other "
    f"{len(freed)} went back to the free list. Rows moved: {moves}. After all {len(spec_steps)} speculative "
    f"steps the request's {len(table)} committed slots {'are' if one_run else 'are not'} one ascending run. {len(reused)} slot "
    f"ids served first as draft scratch and then as verify slots: freed after the draft phase, reused "
    f"in the other buffer. After the step: {kv['allocated']} slots allocated, {kv['free']} free; "
    f"`check_integrity` finds no leak."))

# %% [markdown]
# ## Extend after decode
#
# The target's K/V of the root and the accepted drafts was written during verify. The draft's
# K/V for those tokens is written by the **next** step's draft extend, at the same slot ids:
# pairs (feature of each kept token, the token after it), ending with the bonus.

# %%
rows = []
for before, after in zip(spec_steps, spec_steps[1:]):
    rows.append({"step": before["step"], "target kept": before["kv"]["target"]["kept"],
                 "next step's draft extend": after["kv"]["draft"]["extend_written"],
                 "same slots": before["kv"]["target"]["kept"] == after["kv"]["draft"]["extend_written"]})
display(pd.DataFrame(rows))
first = spec_steps[0]["kv"]["draft"]["extend_written"]
display(Markdown(
    f"**Takeaway.** The first draft extend after the prefill wrote {len(first)} slots: the whole "
    f"prompt (it has {len(req.prompt_ids)} tokens). Then each step's draft extend wrote exactly the "
    f"slots the previous step kept for the target: {all(r['same slots'] for r in rows)} for all "
    f"{len(rows)} pairs of steps."))

# %% [markdown]
# ## After the steps, the cache matches a fresh prefill
#
# Every committed token (the prompt and the output so far, all but the last token, which is
# the next root) is run again through the target in a new cache; its K/V must match what
# the engine kept, layer by layer, up to fp32 rounding (the tolerance and the largest difference
# are printed).

# %%
import torch

from workbench.attention.batch import extend_batch
from workbench.kv import SlotAllocator
from workbench.lessons.takeaways import FP32_ATOL, within

committed = eng.table.slots(req.rid)
tokens = (req.prompt_ids + req.output_ids)[: len(committed)]
fresh = wb.target.new_kv_pool(len(tokens))
fresh_slots = SlotAllocator(len(tokens)).alloc(len(tokens))
wb.target(extend_batch(tokens=[tokens], prefix_slots=[[]], new_slots=[fresh_slots],
                       device=wb.target.lm_head.weight.device), fresh)
index = torch.tensor(committed)
diff = max(float((eng.target_kv.k[i][index] - fresh.k[i][fresh_slots]).abs().max()) for i in range(len(fresh.k)))
diff = max(diff, max(float((eng.target_kv.v[i][index] - fresh.v[i][fresh_slots]).abs().max())
                     for i in range(len(fresh.v))))
display(Markdown(
    f"**Takeaway.** After {len(spec_steps)} steps the request holds {len(committed)} committed tokens; "
    f"their target K/V over all {len(fresh.k)} layers and a fresh prefill's are {within(diff)}"
    + ("" if diff == 0 else " (fp32 rounds a differently batched computation differently)")
    + (": nothing the rolled-back branches wrote survived." if diff <= FP32_ATOL else
       ": more than rounding, as if something a rolled-back branch wrote had survived.")))
