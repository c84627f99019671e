"""τ, the accept length, from what the engine records.

``Request.accept_lengths`` holds n + 1 for every verify step: the accepted drafts plus the bonus,
as the walk decided them, **before** the output is cut at ``max_new_tokens`` or a stop token.
Counting emitted tokens instead ((tokens - 1) / (forwards - 1)) under-counts the last step
whenever it was cut, and biases τ low on short runs.
"""

from __future__ import annotations

from workbench.metrics import tau as pooled_tau


def tau(requests) -> float | None:
    """Mean accept length over every verify step of ``requests`` (one request or several); None
    without a verify step, as ``workbench.metrics.tau`` (vanilla's 1.0 is the caller's to say)."""
    requests = requests if isinstance(requests, (list, tuple)) else [requests]
    return pooled_tau([n for r in requests for n in r.accept_lengths])
