"""The n-gram draft: a tree of continuations looked up in the request's own tokens.

No model, no forward, no KV. At each step the context is the prompt and the output so far (its
last token is the root):

1. **Match.** Find the earlier places where the context's suffix occurs again, and keep the
   longest suffix, of ``min_match``..``max_match`` tokens, that occurs at least once before
   the end (all its occurrences count). Shorter than ``min_match``: no draft this step.
2. **Collect.** What followed each occurrence, up to ``num_steps`` tokens, goes into a trie;
   each trie node counts the occurrences whose continuation passes through it.
3. **Score.** A node's probability is its count over its parent's (the root's: the number of
   occurrences), so a path's score, the product along it, is the share of occurrences that
   continued that way: a probability-like score, comparable with a neural draft's.
4. **Order.** Breadth first, each node's children by count (ties: the most recent occurrence
   first), at most ``topk`` of them: parents precede children and siblings come in descending
   probability, as ``tree.rerank`` expects. The rerank keeps the best ``num_draft_tokens - 1``.

SGLang's NGRAM algorithm instead keeps one corpus fed by every request's tokens and merges the
trees of every matching window length (docs/design.md §3).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from workbench.engine.tree import Candidates


@dataclass
class _Node:
    count: int = 0  # occurrences whose continuation passes through this node
    last_seen: int = -1  # where the most recent of them starts (ties go to the most recent)
    children: dict[int, "_Node"] = field(default_factory=dict)


def match_suffix(context: list[int], min_match: int, max_match: int) -> list[int]:
    """Where the continuations start: the position after each earlier occurrence of the
    longest suffix of ``min_match``..``max_match`` tokens that recurs ([] if none does)."""
    last = len(context) - 1
    best, starts = 0, []
    for j in range(last):  # an occurrence ending at j < last has at least one token after it
        m = 0
        while m < max_match and j - m >= 0 and context[j - m] == context[last - m]:
            m += 1
        if m > best:
            best, starts = m, [j + 1]
        elif m == best and m > 0:
            starts.append(j + 1)
    return starts if best >= min_match else []


def ngram_candidates(context: list[int], min_match: int, *, max_match: int, num_steps: int, topk: int) -> Candidates:
    """The candidates of one request's n-gram tree, in flat order (parents first)."""
    starts = match_suffix(context, min_match, max_match)
    root = _Node(count=len(starts))
    for s in starts:
        node = root
        for tok in context[s : s + num_steps]:
            node = node.children.setdefault(tok, _Node())
            node.count += 1
            node.last_seen = max(node.last_seen, s)
    cands = Candidates()
    queue = deque([(root, -1, 0)])  # (trie node, its flat index (-1: the root), depth)
    while queue:
        node, index, depth = queue.popleft()
        kids = sorted(node.children.items(), key=lambda kv: (-kv[1].count, -kv[1].last_seen))[:topk]
        for rank, (tok, child) in enumerate(kids):
            i = cands.add(tok, child.count / node.count, score=child.count / root.count, parent=index, depth=depth + 1,
                          rank=rank)
            queue.append((child, i, depth + 1))
    return cands
