"""The test vectors of docs/design.md §5 on the tree builder and the accept walk."""

import torch

from helpers import score_driven_candidates
from workbench.engine.accept import greedy_walk
from workbench.engine.tree import Candidates, build_tree, max_candidates, rerank


def rows(mask: torch.Tensor) -> list[str]:
    return ["".join(str(int(x)) for x in row) for row in mask]


def seed_mask_candidates():
    # the -> mat, rug ; mat -> and, on ; rug -> soft (and a weak sibling that the rerank drops)
    c = Candidates()
    mat = c.add(10, 0.6, score=0.6, parent=-1, depth=1)
    rug = c.add(11, 0.4, score=0.4, parent=-1, depth=1)
    c.add(12, 0.5, score=0.30, parent=mat, depth=2)  # and
    c.add(13, 0.4, score=0.24, parent=mat, depth=2)  # on
    c.add(14, 0.6, score=0.24, parent=rug, depth=2)  # soft
    c.add(15, 0.01, score=0.004, parent=rug, depth=2)
    return c


def test_seed_mask_five_drafts():
    c = seed_mask_candidates()
    kept, dropped = rerank(c, num_draft_tokens=6)
    tree = build_tree(1, c, kept, prefix_len=7, dropped=dropped)
    assert tree.tokens == [1, 10, 11, 12, 13, 14]  # the, mat, rug, and, on, soft
    assert rows(tree.mask) == ["100000", "110000", "101000", "110100", "110010", "101001"]
    assert tree.positions == [7 + d for d in [0, 1, 1, 2, 2, 2]]
    soft = 5
    assert not tree.mask[soft, 1] and not tree.mask[soft, 3]  # soft sees neither mat nor and
    assert not tree.mask[3, 4] and not tree.mask[4, 3]  # and / on do not see each other


def test_seed_chain_accepts_two_and_bonus():
    the, cat, sat, on = 1, 2, 3, 4
    tokens = [the, cat, sat, on]
    next_token, next_sibling = [1, 2, 3, -1], [-1, -1, -1, -1]
    res = greedy_walk(tokens, next_token, next_sibling, target_argmax=[cat, sat, the, 9])
    assert res.path == [0, 1, 2] and res.bonus == the
    assert res.num_accepted == 2 and len(res.path) == 3  # 3 tokens emitted
    miss = greedy_walk(tokens, next_token, next_sibling, target_argmax=[7, 7, 7, 7])
    assert miss.path == [0] and miss.bonus == 7  # the root row still yields one token


def test_seed_tree_walk_follows_pointers():
    tokens = [0, 11, 12, 13, 14, 15]  # root, A, B, C, D, E
    next_token, next_sibling = [1, 3, 5, -1, -1, -1], [-1, 2, -1, 4, -1, -1]
    argmax = [11, 14, 0, 0, 42, 0]  # root -> A, A -> D, target at D = 42
    res = greedy_walk(tokens, next_token, next_sibling, argmax)
    assert res.path == [0, 1, 4] and res.bonus == 42 and res.num_accepted == 2
    moves = [(m.node, m.child, m.via, m.match) for m in res.moves]
    assert moves == [(0, 1, "next_token", True), (1, 3, "next_token", False), (1, 4, "next_sibling", True)]


def test_score_driven_build():
    c = score_driven_candidates()
    kept, dropped = rerank(c, num_draft_tokens=6)
    assert kept == [0, 1, 2, 4, 6] and dropped == []
    tree = build_tree(99, c, kept, prefix_len=10)
    A, B, C, E, G = 20, 21, 22, 24, 26
    assert tree.tokens == [99, A, B, C, E, G]
    assert tree.positions == [10, 11, 11, 12, 12, 13]
    assert tree.retrieve_next_token == [1, 3, 4, 5, -1, -1]
    assert tree.retrieve_next_sibling == [-1, 2, -1, -1, -1, -1]
    assert rows(tree.mask) == ["100000", "110000", "101000", "110100", "101010", "110101"]
    X = 77
    argmax = [B, 0, E, 0, X, 0]  # r -> B, B -> E, E -> X
    res = greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, argmax)
    assert [tree.tokens[i] for i in res.path[1:]] + [res.bonus] == [B, E, X]


def test_rerank_drops_orphans_and_counts_them():
    c = Candidates()
    a = c.add(1, 0.5, score=0.5, parent=-1, depth=1)
    c.add(2, 0.5, score=0.5, parent=-1, depth=1)
    c.add(3, 1.0, score=0.5, parent=a, depth=2)  # ties with both level-1 nodes
    c.scores[0] = 0.4  # a tree built elsewhere with a child scored above its parent
    kept, dropped = rerank(c, num_draft_tokens=3)
    assert kept == [1] and dropped == [2]


def test_max_candidates():
    assert max_candidates(1, 4) == 4
    assert max_candidates(6, 10) == 10 + 5 * 100
    assert max_candidates(5, 1) == 5
