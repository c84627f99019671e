"""τ, the accept length, from what the engine records.

``Request.accept_lengths`` holds, for every verify step, the tokens it emitted: the accepted drafts
plus the bonus (n + 1), fewer at the step the output ended inside (cut after a stop token or at
``max_new_tokens``). They add up to every output token but the prefill's, so τ is
(tokens - 1) / (target forwards - 1) exactly. What the walk accepted, cut or not, is
``Request.drafts_accepted``.
"""

from __future__ import annotations

from workbench.metrics import tau as pooled_tau


def tau(requests) -> float | None:
    """Mean accept length over every verify step of ``requests`` (one request or several); None
    without a verify step, as ``workbench.metrics.tau`` (vanilla's 1.0 is the caller's to say)."""
    requests = requests if isinstance(requests, (list, tuple)) else [requests]
    return pooled_tau([n for r in requests for n in r.accept_lengths])
