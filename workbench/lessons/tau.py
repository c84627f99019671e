"""τ, the accept length, from what the engine records.

``Request.accept_lengths`` holds n + 1 for every verify step: the accepted drafts plus the bonus,
as the walk decided them, **before** the output is cut at ``max_new_tokens`` or a stop token.
Counting emitted tokens instead ((tokens - 1) / (forwards - 1)) under-counts the last step
whenever it was cut, and biases τ low on short runs.
"""

from __future__ import annotations

from workbench.metrics import tau as pooled_tau


def tau(requests) -> float:
    """Mean accept length over every verify step of ``requests`` (one request or several)."""
    requests = requests if isinstance(requests, (list, tuple)) else [requests]
    lengths = [n for r in requests for n in r.accept_lengths]
    if not lengths:
        raise ValueError("no verify step recorded: τ needs at least one speculative step")
    return pooled_tau(lengths)
