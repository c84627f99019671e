"""The words on the page: a short explanation beside each view, and the glossary.

The glossary uses the project's words (docs/design.md §8) and nothing else, so the page, the code and
the notebooks name every thing the same way.
"""

from __future__ import annotations

INTRO = """\
## EAGLE-2 Workbench
Type a prompt and press **Step**: the **draft** grows a tree of guesses, the **target** checks the
whole tree in one forward, the accept walk keeps the longest path it agrees with plus a **bonus**
token of its own. Every view is drawn from that step's trace."""

SETTINGS = """\
**Draft source**: the **EAGLE head** (a small trained model reading the target's last hidden
state; it drafts among its hot draft tokens), an **n-gram** lookup in the prompt and output so
far (no model: it suits output that repeats the input), an **early exit**: the target's own
first N layers, or a separate small **draft model** (offered only when the app was started with
`python app.py --draft model:DIR`: the page loads no model). The tree, verify and accept walk are the same for all of them. Changing a setting
and pressing Step starts a new run."""

TREE = """\
**Draft tree.** Every candidate the draft proposed, left to right by depth: each level grows
from the **frontier**, the `topk` best nodes of the level before. The rerank
keeps the best `num_draft_tokens` − 1 by **path score** (product of draft probabilities from
the root); the rest are *dropped at rerank* (▽, never verified). Each kept node shows its token,
its draft probability *p* and path score *s* (n-gram: the share of earlier occurrences that
continued that way). ■ root, ✓ accepted, ✗ tried and missed, ○ not reached, ★ bonus. Hover a
node for details. An n-gram step with no earlier occurrence of the last tokens drafts nothing:
the root alone is verified and the step decodes one token."""

MASK = """\
**Tree mask.** One row per query node of the verify forward. Every node sees the whole committed
prefix (one band) and, inside the tree, only the **root**, its own ancestors and itself (✓);
everything else is masked (·). So sibling branches never see each other, and one forward
verifies all of them at once."""

LOGITS = """\
**Shifted by one.** Row *i* of the target's output is its prediction of the token **after**
node *i*. It judges the *children* of *i*, never *i* itself. Only rows of nodes on the accepted
path are consulted; ✓ child marks a child among the target's top tokens."""

WALK = """\
**Accept walk.** From the root, try the first child (`retrieve_next_token`), then the next
siblings (`retrieve_next_sibling`). A match is accepted and the walk descends; a leaf, or no
matching child, stops it, and the target's token there is the **bonus**. The status line says in
one sentence **why** it stopped there (the stop cause, ringed on the tree): the tree's last level,
the budget's rerank, a node left out of the frontier, the draft's rank of the target's token, or
a coin. Drag the slider or press *Animate walk* to replay the moves."""

SAMPLING = """\
**Sampling verification** (temperature > 0). Each tried child is accepted with probability
p(child) of the mass left (a coin *u* below it); a rejected child is removed and the rest
renormalised; when every child is rejected the bonus is drawn from that **residual**. A `linear`
chain may instead be drawn from the draft's law q (the **chain rule** `leviathan`: each draft
accepted with min(1, p/q); `block`: the longest prefix block verification keeps), and then a
table gives each rule's expected accepted drafts on the step's own p and q. The output follows
the target's distribution exactly under every rule."""

OUTPUT = """\
**Output so far.** Each token coloured by where it came from: the prompt, an **accepted** draft
(free: no target forward of its own), or a **bonus** (the target's own token). **Accept length
τ** = tokens emitted per target forward = correct drafts + 1."""

KV = """\
**KV cache.** The target writes one slot per verified node. Commit keeps the first n + 1 of
them for the root and the accepted drafts, copying an accepted node's K/V rows there when it was
verified further along (**moved**), and rolls the rest back (freed): the request's cache stays one
run of slots, which attention reads without a gather. The draft head keeps its extend slots and
throws away the scratch slots of the tree levels."""

BEST = """\
**What the best tree would have been.** The verify forward gave the target's next token after
every node, so its own greedy continuation can be followed down the tree: covered while the
token is a child, then it **leaves** the tree (a candidate dropped at the rerank, or one the draft
never proposed). Past that token the continuation is **unknown**: the target never ran on it.
The bars: τ this step would have had with only the best-scored D − 1 nodes."""

CALIBRATION = """\
**Calibration.** EAGLE-2 grows its tree by the draft's confidence because confidence predicts
acceptance. Every verified node counts (dropped-at-rerank ones were never verified). A node is
**tried** when its parent was accepted (the root always is): the target's verdict on it is then
known. **Draft probability** is a claim about P(accept | tried); **path score** (their product)
a claim about P(accept) over all verified nodes. On the diagonal = perfectly calibrated. The
session view counts the steps up to the one on screen (any speculative method), drawn when you
open this tab; below it, the benchmark's for the shipped head."""

COMPARE = """\
**Compare** decodes the prompt with `vanilla`, `linear` (a chain: `topk` = 1) at the same
`num_steps`, `linear` at the same verify budget (`num_steps` = `num_draft_tokens` − 1, so it
verifies as many tokens as EAGLE-2), `eagle2`, and `static`: a tree of the same size whose shape
is fixed in advance (EAGLE-1's, or the tree box), drafted by the same head. The eagle2 and static
trees of one step number are drawn side by side (after the first step their contexts differ
when their τ did). A tree spends the same verify forward on
several alternatives per level instead of one long guess. On this CPU a forward of more tokens
costs more, so the best tree is small; the verify-cost chart shows how much, and, where this CPU's
few-row products run another implementation than `F.linear` (measured at start-up), what the same
forward costs with every product by `F.linear`: how much of speculation's margin comes from the
CPU's product path.

**Draft sources** (the *compare* choice) decodes the prompt with `vanilla` and with `eagle2` at
the page's `num_steps` / `topk` / `num_draft_tokens`, once per draft source: the EAGLE head, the
n-gram lookup (the page's match windows) and the early exit (the page's N). Only where the drafts
come from changes: the tree budget, verify and accept walk are the same, so τ per step, tokens/s
and the trees of one step compare the drafts alone."""

GLOSSARY = """\
| word | meaning |
|---|---|
| target | the model whose output distribution must be reproduced exactly |
| draft source | where the drafts come from: the EAGLE head, an n-gram lookup in the request's own tokens (`ngram:MIN-MAX`), the target's first N layers (`exit:N`), or a separate small draft model (`model:DIR`, when the app starts with one); the tree, verify and accept walk are the same for all |
| draft head | EAGLE head: `fc(concat(embed(x_{t+1}), f_t))` → one decoder layer (ours may stack more) → the target's `lm_head`; a fused head reads the target's low and middle layers beside `f_t` (`fuse_layers`) |
| feature `f_t` | the target's last hidden state at position t, **after** the final RMSNorm |
| prefill | the first step of a run: the target reads the whole prompt in one forward and emits the first token; no tree yet |
| `L` | the committed length before a step: tokens whose K/V is in the cache (prompt and output so far); node i of the tree sits at position `L` + its depth |
| root | first node of every verify block: the token emitted last step (bonus), which has no KV yet |
| `num_steps` | draft levels (tree depth) |
| `topk` | children kept per expansion and nodes expanded per level (tree width) |
| `num_draft_tokens` (D) | verify block size **including the root**: D − 1 real drafts |
| path score | product of draft probabilities from the root to a node (or the sum of log-probs; same ranking) |
| frontier | the `topk` nodes of the newest level with the best path scores: the ones the next draft level expands |
| rerank | after the last level, keep the `num_draft_tokens` − 1 candidates with the best path scores (plus the root); the rest are *dropped at rerank*, never verified |
| hot draft tokens | the head drafts only among the N tokens most frequent in its training answers (a smaller `lm_head` to run); the target still verifies over the whole vocabulary |
| tree mask | the verify forward's attention mask: every node sees the committed prefix, the root, its own ancestors and itself, never a sibling branch, so one forward verifies every branch at once |
| shift by one | row i of the verify forward's output is the target's distribution of the token **after** node i: it judges node i's children, never node i itself |
| accept walk | from the root, follow `retrieve_next_token` / `retrieve_next_sibling` while a child is the target's token (greedy) or passes its coin (sampling); it keeps the accepted path |
| bonus | the target's own token after the last accepted node: every verify step emits it, so a step emits at least one token |
| residual | sampling: what is left of the target's distribution after the coins rejected the children tried (their probability set to 0, the rest renormalised); the bonus is drawn from it, so the output still follows the target's distribution |
| rollback | after the walk, commit keeps the step's first n + 1 target KV slots for the root and the accepted nodes (an accepted node's rows copied there when it sat further along) and frees the rest |
| `retrieve_index[i]` | row of node i in the flattened verify batch |
| `retrieve_next_token[i]` | first child of node i, −1 if none |
| `retrieve_next_sibling[i]` | next sibling of node i, −1 if none |
| correct drafts (n) | drafts accepted this step; `accept_tokens` = the n drafts + 1 bonus |
| accept length τ | tokens emitted per target forward = n + 1 |
| expected τ (sampling) | what a tree is worth over the coins: 1 + Σ over its nodes of the target's probability of the path to each (a child is accepted with exactly its target probability); a *perfect head* drafts from the target's own distribution and bounds it for a budget |
| draft acceptance rate | accepted drafts / proposed drafts (vLLM's `draft_acceptance_rate`): misleading for trees (most nodes are siblings) |
| stop cause | why a step's walk stopped where it did, one per step: `depth`, `budget`, `frontier`, `width`, `draft`, `vocabulary`, `coin`; a static tree's `shape`; the n-gram lookup's `no match`, `continuation` |
| TTFT / TPOT | latency of one answer: time to first token (arrival to the first token, the prefill's) and time per output token (the mean gap between the tokens after it); end to end = TTFT + (n − 1) TPOT |
| ECE | expected calibration error: the count-weighted mean, over the bins of a reliability diagram, of the gap between the rate of acceptance and the mean confidence (draft probability or path score); 0 = perfectly calibrated |
| per-depth rate | P(accept at depth k given depth k − 1 accepted) |
| static tree | EAGLE-1's way: a tree shape fixed in advance, written as rank paths (`[0, 2]` = the third most likely child of the root's most likely child); `eagle2` grows the shape from path scores instead |
| tried / accepted | a verified node is *tried* when its parent was accepted (the root always is); *accepted* = on the accepted path |
| calibration | how well the draft's probability predicts P(accept given tried), and the path score P(accept) |

`topk` = 1 gives a chain: the `linear` special case, with `num_draft_tokens` = `num_steps` + 1.
Most tokens per step = `num_steps` + 1."""
