"""From draft candidates to the verify tree: rerank, then build mask, positions and pointers.

Growing the tree (``draft.py``) records every candidate in a flat order: level 1's ``topk``
children of the root, then for each further level the ``topk`` children of each of the ``topk``
frontier nodes (frontier in descending path score). Here:

* **rerank** keeps the best ``num_draft_tokens - 1`` candidates by path score and sorts them by
  flat index, so a parent always precedes its children and the mask is lower-triangular;
* **build** prepends the root and derives, per node: parent, depth, ``position = L + depth``,
  the mask row (root + ancestors + self), and the pointers the accept walk follows:
  ``retrieve_next_token[i]`` (first child, -1 none) and ``retrieve_next_sibling[i]`` (next
  sibling, -1 none); children are listed in ascending node index = descending score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class Candidates:
    """Every candidate of one request's draft tree, in flat order (filled by ``draft.py``)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # draft probability given the parent
    scores: list[float] = field(default_factory=list)  # path score: product of probs from the root
    parents: list[int] = field(default_factory=list)  # flat index of the parent, -1 = the root
    depths: list[int] = field(default_factory=list)  # 1..num_steps: proposed by draft forward number depth
    ranks: list[int] = field(default_factory=list)  # rank among the parent's draft top-k (0 = most likely; -1 unknown)
    # tracing only: the draft's most likely tokens at each node it ran (flat index, -1 the root),
    # [(token, prob), ...] best first, wider than topk, so a step's record can say where the
    # target's token ranked there (``stops.py``); empty when not tracing and for a model-free draft
    top: dict[int, list[tuple[int, float]]] = field(default_factory=dict)

    def add(self, token: int, prob: float, *, score: float, parent: int, depth: int, rank: int = -1) -> int:
        self.ranks.append(rank)
        self.tokens.append(token)
        self.probs.append(prob)
        self.scores.append(score)
        self.parents.append(parent)
        self.depths.append(depth)
        return len(self.tokens) - 1

    def extend(self, tokens: list[int], probs: list[float], scores: list[float], parents: list[int], depth: int,
               ranks: list[int]) -> int:
        """One level's candidates at once (one entry per candidate in each list, in flat order);
        returns the flat index of the first."""
        first = len(self.tokens)
        self.tokens += tokens
        self.probs += probs
        self.scores += scores
        self.parents += parents
        self.depths += [depth] * len(tokens)
        self.ranks += ranks
        return first


@dataclass
class DraftTree:
    """The verify block of one request: node 0 is the root, nodes 1.. the kept drafts."""

    tokens: list[int]
    parents: list[int]  # node index of the parent; -1 for the root
    depths: list[int]
    positions: list[int]  # L + depth
    scores: list[float]  # path score (root 1.0)
    probs: list[float]  # draft probability given the parent (root 1.0)
    candidate_index: list[int]  # flat candidate index of each node (-1 for the root)
    mask: torch.Tensor  # [N, N] bool: row i = root + ancestors of i + i
    retrieve_next_token: list[int]
    retrieve_next_sibling: list[int]
    dropped: list[int]  # candidates in the top-(D-1) whose parent was not kept (ties)

    @property
    def num_nodes(self) -> int:
        return len(self.tokens)


def score_order(scores: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """[..., n] path scores -> [..., n] their indices, best first, ties toward the lower index.

    The one order by path score: the frontier's choice (``draft.grow_tree``), the rerank, and
    every view that replays them. Parents precede their children in flat order and a child's
    score never exceeds its parent's, so a tie always favours the parent. Scores are compared
    in float64, as the growth computes them (a trace's rounded scores compare the same way)."""
    return torch.sort(torch.as_tensor(scores, dtype=torch.float64), dim=-1, descending=True, stable=True).indices


def rerank(cands: Candidates, num_draft_tokens: int) -> tuple[list[int], list[int]]:
    """Best ``num_draft_tokens - 1`` flat indices by ``score_order``, sorted by flat index.

    A tie favours a parent over its child, so the kept set is closed under ancestors. The check
    stays anyway, for trees built elsewhere: a kept node whose parent was not kept is dropped
    (with its descendants) and returned in the second list.
    """
    kept = sorted(score_order(cands.scores)[: num_draft_tokens - 1].tolist())
    present, closed, dropped = set(), [], []
    for i in kept:  # flat order: parents come first
        parent = cands.parents[i]
        if parent == -1 or parent in present:
            present.add(i)
            closed.append(i)
        else:
            dropped.append(i)
    return closed, dropped


def budget_keeping(scores: Sequence[float], index: int) -> int:
    """The smallest ``num_draft_tokens`` whose rerank keeps candidate ``index`` (D counts the root)."""
    return score_order(scores).tolist().index(index) + 2


def build_tree(root_token: int, cands: Candidates, kept: list[int], *, prefix_len: int,
               dropped: list[int] | None = None) -> DraftTree:
    """Root + ``kept`` candidates (sorted by flat index) -> ``DraftTree`` at committed length L."""
    node_of = {c: i + 1 for i, c in enumerate(kept)}  # flat candidate -> node index
    n = len(kept) + 1
    parents, depths = [-1], [0]
    for c in kept:
        p = cands.parents[c]
        parents.append(0 if p == -1 else node_of[p])
        depths.append(depths[parents[-1]] + 1)
    mask = ancestor_mask(range(n), parents, range(n))  # row i: i, its ancestors, the root
    next_token, next_sibling = [-1] * n, [-1] * n
    last_child = [-1] * n
    for i in range(1, n):  # ascending node index: children in descending score
        p = parents[i]
        if last_child[p] == -1:
            next_token[p] = i
        else:
            next_sibling[last_child[p]] = i
        last_child[p] = i
    return DraftTree(
        tokens=[root_token] + [cands.tokens[c] for c in kept],
        parents=parents,
        depths=depths,
        positions=[prefix_len + d for d in depths],
        scores=[1.0] + [cands.scores[c] for c in kept],
        probs=[1.0] + [cands.probs[c] for c in kept],
        candidate_index=[-1] + list(kept),
        mask=mask,
        retrieve_next_token=next_token,
        retrieve_next_sibling=next_sibling,
        dropped=list(dropped or []),
    )


def ancestor_mask(nodes: Sequence[int], parents: Sequence[int],
                  column: Mapping[int, int] | Sequence[int]) -> torch.Tensor:
    """[len(nodes), len(column)] bool: row r is True at ``column[c]`` for c = ``nodes[r]`` and each
    of its ancestors (``parents[c]``, -1 past the top): what a node attends under the tree mask."""
    rows, cols = [], []
    for r, node in enumerate(nodes):
        while node != -1:
            rows.append(r)
            cols.append(column[node])
            node = parents[node]
    mask = torch.zeros(len(nodes), len(column), dtype=torch.bool)
    mask[rows, cols] = True  # one write, not one per (node, ancestor)
    return mask


def max_candidates(num_steps: int, topk: int) -> int:
    """Candidates a tree of ``num_steps`` levels and width ``topk`` records:
    ``topk`` at level 1, ``topk * topk`` at each further level."""
    return topk + (num_steps - 1) * topk * topk
