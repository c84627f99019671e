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
    target_forwards: int = 0
    # Decoding state. ``root``: the last emitted token, which has no KV yet (next step's root).
    root: int | None = None
    # Pairs (f_t, x_{t+1}) whose draft KV is missing: next draft extend's input. They belong
    # to the last len(pending_tokens) committed positions: draft_length + len(pending_tokens)
    # equals the committed length (docs/design.md §4).
    pending_tokens: list[int] = field(default_factory=list)
    pending_features: torch.Tensor | None = None
    draft_length: int = 0  # committed positions whose draft KV is written

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
