"""Walks up a traced tree: which tokens a node's branch holds, from the root down."""

from __future__ import annotations


def ancestors(parents: list[int], node: int) -> list[int]:
    """Node indices from the root to ``node`` (both included); ``parents[i]`` is -1 for the root."""
    if not 0 <= node < len(parents):
        raise ValueError(f"node {node} is not in a tree of {len(parents)} nodes")
    path = []
    while node != -1:
        if node in path:
            raise ValueError(f"the parents form a cycle through node {node}")
        path.append(node)
        node = parents[node]
    return path[::-1]


def branch_tokens(trace: dict, node: int) -> list[int]:
    """Token ids of the branch root..node of a step trace's verify tree."""
    nodes = trace["tree"]["nodes"]
    return [nodes[i]["token"] for i in ancestors([n["parent"] for n in nodes], node)]
