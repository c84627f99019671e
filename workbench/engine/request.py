"""One request's state across steps (filled and advanced by ``engine.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Request:
    rid: int
    prompt_ids: list[int]
    max_new_tokens: int
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" (EOS / stop token) or "length"
    # Provenance of each output token: "prefill", "accepted" (a draft the target agreed with) or "bonus".
    provenance: list[str] = field(default_factory=list)
    # Per verify step (a vanilla decode step counts as one that drafted nothing):
    # ``accept_lengths``: tokens it emitted, n + 1 unless the output ended inside the step (a stop
    # token or max_new_tokens cut it), so they sum to len(output_ids) - 1 (the prefill emits the
    # first); τ is their mean (``workbench.metrics.tau``). ``drafts_accepted``: the drafts n the
    # walk accepted, cut or not (what the target agreed with: per-depth acceptance, the chain's α).
    accept_lengths: list[int] = field(default_factory=list)
    drafts_accepted: list[int] = field(default_factory=list)
    drafts_verified: list[int] = field(default_factory=list)  # the drafts its tree put to the target (0: vanilla)
    # per speculative step, why its walk stopped (a ``stops.CAUSES`` key), when the engine keeps
    # them (``Engine(stops=True)``, or tracing)
    stop_causes: list[str] = field(default_factory=list)
    target_forwards: int = 0
    # Decoding state. ``root``: the last emitted token, which has no KV yet (next step's root).
    root: int | None = None
    # Pairs (f_t, x_{t+1}) whose draft KV is missing: next draft extend's input. They belong
    # to the last len(pending_tokens) committed positions: draft_length + len(pending_tokens)
    # equals the committed length (docs/design.md §4). Their features f_t are kept as the steps
    # added them (``_feature_parts``, [n_i, W] each) and joined once, when the extend reads
    # ``pending_features``: a plain step adds one row without copying the earlier ones, so a long
    # run of plain steps costs each step the same.
    pending_tokens: list[int] = field(default_factory=list)
    _feature_parts: list[torch.Tensor] = field(default_factory=list, repr=False)
    draft_length: int = 0  # committed positions whose draft KV is written

    @property
    def pending_features(self) -> torch.Tensor | None:
        """[len(pending_tokens), W] the pending pairs' features f_t, in position order (None: none kept)."""
        if len(self._feature_parts) > 1:
            self._feature_parts = [torch.cat(self._feature_parts)]
        return self._feature_parts[0] if self._feature_parts else None

    def set_pending(self, tokens: list[int], features: torch.Tensor | None) -> None:
        """The pending pairs are now ``tokens`` with ``features`` [len(tokens), W] (None: drop them)."""
        self.pending_tokens = list(tokens)
        self._feature_parts = [] if features is None else [features]

    def add_pending(self, token: int, feature: torch.Tensor) -> None:
        """One more pair (f_t [1, W], x_{t+1}) after the pending ones; the earlier features stay where they are."""
        self.pending_tokens.append(token)
        self._feature_parts.append(feature)

    def drop_features(self) -> None:
        """A finished request extends no more: its features' memory goes (its tokens stay, for the traces)."""
        self._feature_parts = []

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def emit(self, tokens: list[int], kinds: list[str], stop_ids: set[int]) -> list[int]:
        """Append tokens, truncating after a stop token or at ``max_new_tokens``; returns what was
        actually appended."""
        kept = []
        for tok, kind in zip(tokens, kinds):
            if self.finished:
                break
            self.output_ids.append(tok)
            self.provenance.append(kind)
            kept.append(tok)
            if tok in stop_ids:
                self.finish_reason = "stop"
            elif len(self.output_ids) >= self.max_new_tokens:
                self.finish_reason = "length"
        return kept
