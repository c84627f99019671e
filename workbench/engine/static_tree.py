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

Growth runs one draft forward per depth (the nodes of that depth that have children in the
shape), exactly as the dynamic growth does, and returns the same ``DraftPhase``: its candidates
are exactly the shape's nodes, so the rerank keeps them all and the verify, the accept walk,
commit and sampling are the ones ``eagle2`` uses.
"""

from __future__ import annotations

import itertools
import json

import torch

from workbench.engine.draft import DraftForward, DraftPhase, Frontier, phase_of, tree_level_batch
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
    return tuple(sorted(paths, key=lambda p: (len(p), p)))  # breadth first, as the growth reads it


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
    return tuple(sorted(out, key=lambda p: (len(p), p)))


def parse_tree(text: str, max_rank: int, max_depth: int, max_nodes: int) -> tuple[Path, ...]:
    """A tree as text (``--tree``, the app's tree box: JSON, e.g. ``"[[0],[1],[0,0]]"``) -> validated rank paths."""
    try:
        paths = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"the tree is not valid JSON ({err.msg} at character {err.pos}); "
                         "write it like [[0],[1],[0,0]]") from None
    return validate_tree(paths, max_rank, max_depth, max_nodes)


def tree_shape(paths: tuple[Path, ...]) -> tuple[int, int]:
    """(depth = draft levels, width = the top-k the draft must produce per node)."""
    return max(len(p) for p in paths), 1 + max(r for p in paths for r in p)


def scratch_slots(paths: tuple[Path, ...]) -> int:
    """Draft-KV slots ``grow_static_tree`` takes per request and step: one per node below the
    root that has children in the shape (the engine sizes the pool with this)."""
    return len({p[:-1] for p in paths if len(p) > 1})


def grow_static_tree(head, forward: DraftForward, allocator: SlotAllocator, prefixes: list[list[int]],
                     h_last: torch.Tensor, paths: tuple[Path, ...]) -> DraftPhase:
    """The shape's nodes for every request, one draft forward per depth, batched across requests.

    Candidates are added depth by depth, and under each parent in rank order, so a parent comes
    before its children and siblings come in descending draft probability, as in ``grow_tree``.
    A node's input feature is its parent's draft output (the root's children: ``h_last`` [B, H]).
    ``head``, ``forward``, ``prefixes``: as ``draft.grow_tree``."""
    bsz = len(prefixes)
    max_depth, width = tree_shape(paths)
    children: dict[Path, list[int]] = {}
    for p in sorted(paths, key=lambda p: (len(p), p)):
        children.setdefault(p[:-1], []).append(p[-1])
    fronts = [Frontier(list(p)) for p in prefixes]
    flat: dict[Path, int] = {}  # rank path -> flat candidate index (the same for every request)
    parents: list[Path] = [()]  # nodes whose children the next forward's output proposes
    hidden = h_last  # [B * len(parents), H]: the draft output at each of them
    for depth in range(1, max_depth + 1):  # this forward proposes the shape's nodes at ``depth``
        if depth > 1:  # run the draft on the nodes of depth - 1 that have children
            for f in fronts:
                f.nodes = [flat[p] for p in parents]
                f.run_level(depth - 1, allocator.alloc(len(parents)))
            hidden = forward(hidden, tree_level_batch(fronts, h_last.device))  # [B * F, H]
        logp, cols = head.log_probs(hidden)  # [B * F, V']
        lp, idx = logp.topk(width, dim=-1)  # ranks 0..width-1, descending probability
        tokens = (idx if cols is None else cols[idx]).view(bsz, len(parents), width).tolist()
        probs = lp.exp().view(bsz, len(parents), width).tolist()
        for j, parent in enumerate(parents):
            for r in children[parent]:
                for b, f in enumerate(fronts):
                    score = probs[b][j][r] * (f.cands.scores[flat[parent]] if parent else 1.0)
                    flat[parent + (r,)] = f.cands.add(tokens[b][j][r], probs[b][j][r], score,
                                                      flat[parent] if parent else -1, depth, r)
        # the next frontier: this depth's nodes that have children; features = their parents' rows
        nxt = [p for p in paths if len(p) == depth and p in children]
        rows = [b * len(parents) + parents.index(p[:-1]) for b in range(bsz) for p in nxt]
        hidden, parents = hidden[rows], nxt
    expected = scratch_slots(paths)
    if any(len(f.scratch) != expected for f in fronts):  # the engine sized the pool for exactly this many
        raise AssertionError(f"grow_static_tree took {[len(f.scratch) for f in fronts]} scratch slots, "
                             f"the pool allows {expected}")
    return phase_of(fronts)
