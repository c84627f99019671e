"""The static tree (EAGLE-1): a tree shape fixed in advance, whatever the context.

A shape is a list of **rank paths**: ``(0,)`` is the draft's most likely child of the root,
``(1,)`` its second, ``(0, 2)`` the third most likely child of ``(0,)``, and so on. Every step
drafts exactly these nodes, so the draft's confidence decides *which tokens* fill the shape but
never *where the budget goes*. EAGLE-2's dynamic tree (``draft.py``) spends the same budget
where the path score is highest; ``--method static`` is the ablation that shows what that buys.

The default shape is EAGLE-1's: the 25 rank paths of ``mc_sim_7b_63`` (SafeAILab/EAGLE,
``eagle/model/choices.py``; 26 nodes with the root), listed breadth first. Cut to
``num_draft_tokens`` nodes it keeps its first D - 1 paths (every prefix of the list is closed
under ancestors). Beyond 26 nodes EAGLE-1 has no list, so the shape goes on breadth first over
ranks 0..3, the width EAGLE-1's tree uses: the missing depth-2 paths, then depth 3, ...

Growth runs one draft forward per depth, as the dynamic growth does, reading the shape's nodes
out of each forward's top-k through a (parent row, rank) table per depth (``shape_levels``). Its
``DraftPhase`` candidates are exactly the shape's nodes, so the rerank keeps them all, and the
rest of the step is ``eagle2``'s.
"""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass

import torch

from workbench.engine.draft import DraftForward, DraftPhase, Frontier, phase_of, propose, tree_level_batch
from workbench.kv import SlotAllocator

Path = tuple[int, ...]

# EAGLE-1's default tree (mc_sim_7b_63 in SafeAILab/EAGLE eagle/model/choices.py): 25 rank paths.
EAGLE1_TREE: tuple[Path, ...] = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)
EXTENSION_WIDTH = 4  # ranks 0..3 when the shape grows past EAGLE-1's 25 paths


def breadth_first(paths) -> tuple[Path, ...]:
    """Rank paths by depth, then ranks: a parent before its children, siblings in rank order."""
    return tuple(sorted(paths, key=lambda p: (len(p), p)))


def default_static_tree(num_draft_tokens: int) -> tuple[Path, ...]:
    """EAGLE-1's tree cut (or extended breadth first) to ``num_draft_tokens`` nodes incl. the root."""
    if num_draft_tokens < 2:
        raise ValueError(f"num_draft_tokens must be >= 2, got {num_draft_tokens}")
    paths = list(EAGLE1_TREE[: num_draft_tokens - 1])
    have, depth = set(paths), 1
    while len(paths) < num_draft_tokens - 1:  # each depth is completed before the next one starts
        for p in itertools.product(range(EXTENSION_WIDTH), repeat=depth):  # rank order
            if len(paths) == num_draft_tokens - 1:
                break
            if p not in have:
                paths.append(p)
                have.add(p)
        depth += 1
    return breadth_first(paths)  # as the growth reads it


def validate_tree(paths, max_rank: int, max_depth: int, max_nodes: int) -> tuple[Path, ...]:
    """A list of rank paths -> a tuple of tuples, or ValueError saying what is wrong.

    Rules: each path is a non-empty list of integer ranks in ``0..max_rank - 1`` and at most
    ``max_depth`` long; no duplicates; every path's parent (the path minus its last rank) is in
    the list; at most ``max_nodes`` paths. The order is free; the result is sorted breadth first
    (by depth, then ranks), which keeps a parent before its children."""
    if not isinstance(paths, (list, tuple)) or not paths:
        raise ValueError("a tree is a non-empty list of rank paths, e.g. [[0],[1],[0,0]]")
    out: list[Path] = []
    for p in paths:
        if not isinstance(p, (list, tuple)) or not p or not all(isinstance(r, int) and not isinstance(r, bool)
                                                                for r in p):
            raise ValueError(f"tree path {p!r} is not a non-empty list of integer ranks")
        if any(r < 0 or r >= max_rank for r in p):
            raise ValueError(f"tree path {list(p)}: ranks must be in 0..{max_rank - 1}")
        if len(p) > max_depth:
            raise ValueError(f"tree path {list(p)} is {len(p)} deep; at most {max_depth} levels")
        out.append(tuple(p))
    seen = set()
    for p in out:
        if p in seen:
            raise ValueError(f"tree path {list(p)} is listed twice")
        seen.add(p)
    for p in out:
        if len(p) > 1 and p[:-1] not in seen:
            raise ValueError(f"tree path {list(p)} has no parent: add {list(p[:-1])}")
    if len(out) > max_nodes:
        raise ValueError(f"the tree has {len(out)} nodes besides the root; at most {max_nodes}")
    return breadth_first(out)


def read_tree(text: str):
    """A tree as text (``--tree``, the app's tree box: JSON, e.g. ``"[[0],[1],[0,0]]"``) -> its
    rank paths as written (None for blank text), for ``validate_tree`` to check; ValueError
    "not valid JSON (...)" where the text cannot be read."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err.msg} at character {err.pos}); write it like [[0],[1],[0,0]]") from None


def tree_shape(paths: tuple[Path, ...]) -> tuple[int, int]:
    """(depth = draft levels, width = the top-k the draft must produce per node)."""
    return max(len(p) for p in paths), 1 + max(r for p in paths for r in p)


def scratch_slots(paths: tuple[Path, ...]) -> int:
    """Draft-KV slots ``grow_static_tree`` takes per request and step: one per node below the
    root that has children in the shape (the engine sizes the pool with this)."""
    return len({p[:-1] for p in paths if len(p) > 1})


@dataclass(frozen=True)
class ShapeLevel:
    """One depth of a static shape, as its growth reads it: the shape's nodes at ``depth`` in flat
    order, each the child of rank ``ranks[i]`` of frontier node ``rows[i]`` (its parent's index
    among the nodes the forward runs, the same for every request)."""

    depth: int
    rows: torch.Tensor  # [n] int64: frontier index j of each node's parent (depth 1: 0, the root)
    ranks: torch.Tensor  # [n] int64: each node's rank among its parent's draft top-k
    parents: list[int]  # [n] each node's parent as a flat index, -1 = the root
    expanded: torch.Tensor  # [m] int64: which of this depth's nodes have children (in order)
    frontier: list[int]  # [m] their flat indices: the nodes the next forward runs


@functools.lru_cache(maxsize=16)  # a pure function of an immutable shape: computed once, not every step
def shape_levels(paths: tuple[Path, ...]) -> tuple[ShapeLevel, ...]:
    """The (parent row, rank) table of every depth of a shape. Candidates are numbered breadth
    first (by depth, then ranks), so a parent comes before its children and siblings come in
    descending draft probability, as in ``grow_tree``; a path's flat index is its place in that order."""
    order = breadth_first(paths)
    flat = {p: i for i, p in enumerate(order)}
    has_children = {p[:-1] for p in order}
    levels, frontier = [], [()]  # the nodes the depth's forward runs: the root first
    for depth in range(1, max(len(p) for p in order) + 1):
        nodes = [p for p in order if len(p) == depth]
        row = {p: j for j, p in enumerate(frontier)}
        expanded = [i for i, p in enumerate(nodes) if p in has_children]
        levels.append(ShapeLevel(depth=depth,
                                 rows=torch.tensor([row[p[:-1]] for p in nodes]),
                                 ranks=torch.tensor([p[-1] for p in nodes]),
                                 parents=[flat.get(p[:-1], -1) for p in nodes],
                                 expanded=torch.tensor(expanded, dtype=torch.int64),
                                 frontier=[flat[nodes[i]] for i in expanded]))
        frontier = [nodes[i] for i in expanded]
    return tuple(levels)


def grow_static_tree(head, forward: DraftForward, *, allocator: SlotAllocator, prefixes: list[list[int]],
                     h_last: torch.Tensor, paths: tuple[Path, ...], keep_top: int = 0) -> DraftPhase:
    """The shape's nodes for every request, one draft forward per depth, batched across requests.

    Each depth reads its nodes out of the forward's top-k by its ``ShapeLevel`` table (every
    request drafts the same shape, so the same table serves all). A node's input feature is its
    parent's draft output (the root's children: ``h_last`` [B, H]). ``head``, ``forward``,
    ``prefixes``, ``keep_top``: as ``draft.grow_tree``."""
    bsz = len(prefixes)
    _, width = tree_shape(paths)
    fronts = [Frontier(list(p)) for p in prefixes]
    hidden, scores = h_last, torch.ones(bsz, 1, dtype=torch.float64)  # [B * F, H], [B, F]: the root
    for level in shape_levels(paths):  # this forward proposes the shape's nodes at level.depth
        if level.depth > 1:  # run the draft on the nodes of depth - 1 that have children
            for f in fronts:
                f.run_level(level.depth - 1, allocator.alloc(len(f.nodes)))
            hidden = forward(features, tree_level_batch(fronts, h_last.device))  # [B * F, H]
        props = propose(head, hidden, bsz, width=width, keep=keep_top)  # [B, F, width]
        props.keep_top(fronts, [f.nodes if level.depth > 1 else [-1] for f in fronts])
        tokens, probs, node_scores = props.children(scores, rows=level.rows, ranks=level.ranks)  # [B, n]
        ranks = level.ranks.tolist()
        for f, t, p, s in zip(fronts, tokens.tolist(), probs.tolist(), node_scores.tolist()):
            f.cands.extend(t, p, s, parents=level.parents, depth=level.depth, ranks=ranks)
            f.nodes = list(level.frontier)
        scores = node_scores[:, level.expanded]
        features = hidden[props.rows(level.rows[level.expanded])]  # the next frontier's parents' rows
    expected = scratch_slots(paths)
    if any(len(f.scratch) != expected for f in fronts):  # the engine sized the pool for exactly this many
        raise AssertionError(f"grow_static_tree took {[len(f.scratch) for f in fronts]} scratch slots, "
                             f"the pool allows {expected}")
    return phase_of(fronts)
