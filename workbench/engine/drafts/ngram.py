"""``ngram[:MIN-MAX]``: no model. Continuations of the longest suffix (MIN..MAX tokens) of the
request's own tokens found earlier in them (``engine/ngram.py``, the trie). No forward, no KV."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.engine.draft import DraftPhase
from workbench.engine.drafts.base import DraftSource, Drafter, Extended, knob
from workbench.engine.frameworks import vllm_flags
from workbench.engine.ngram import ngram_candidates
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.kv import SlotTable

MAX_MATCH = 32


@dataclass(frozen=True)
class NgramSource(DraftSource):
    # SGLang's NGRAM defaults: match windows of 1..12 tokens
    min_match: int = knob(1, "ngram_min", "n-gram min match")  # the shortest suffix that may match
    max_match: int = knob(12, "ngram_max", "n-gram max match")  # the longest suffix tried

    kind = "ngram"
    grammar = "ngram[:MIN-MAX]"
    choice = "n-gram (prompt lookup)"
    colour = "#E69F00"  # orange
    model_free = True
    nothing_drafted = "no earlier occurrence of the last tokens"
    unexpanded_cause = "no match"  # no earlier occurrence continues below the stop node (engine/stops.py)

    def __post_init__(self) -> None:
        if not 1 <= self.min_match <= self.max_match <= MAX_MATCH:
            raise ValueError(f"n-gram match windows must satisfy 1 <= MIN <= MAX <= {MAX_MATCH}, "
                             f"got {self.min_match}-{self.max_match}")

    @classmethod
    def parse(cls, arg: str | None) -> NgramSource:
        if not arg:
            return cls()
        lo, dash, hi = arg.partition("-")
        if not (dash and lo.isdigit() and hi.isdigit()):
            raise ValueError(f"draft source 'ngram:{arg}': write the n-gram match windows as ngram:MIN-MAX, "
                             "e.g. ngram:1-12")
        return cls(int(lo), int(hi))

    @property
    def name(self) -> str:
        return f"ngram:{self.min_match}-{self.max_match}"

    def label(self, num_layers: int | None = None) -> str:
        return f"n-gram (prompt lookup, {self.name})"

    def frameworks(self, spec) -> dict[str, str]:
        return {"SGLang": _sglang(spec), "vLLM": vllm_flags(spec, self.vllm_draft()), "EAGLE": "no n-gram draft"}

    def vllm_draft(self) -> dict:
        return {"method": "ngram", "prompt_lookup_min": self.min_match, "prompt_lookup_max": self.max_match}

    def miss_cause(self, rank: int | None, reach: int) -> str:
        """The lookup found continuations below the stop node, none the target's token: no
        distribution ranks the token, the earlier text simply went on differently."""
        return "continuation"

    def build(self, target, draft) -> NgramDraft:
        return NgramDraft(self)


def _sglang(spec) -> str:
    d = spec.draft
    return (f"--speculative-algorithm NGRAM --speculative-num-draft-tokens {spec.num_draft_tokens} "
            f"--speculative-ngram-min-match-window-size {d.min_match} "
            f"--speculative-ngram-max-match-window-size {d.max_match} (its corpus holds every request's tokens)")


class NgramDraft(Drafter):
    """No model: each request's tree is looked up in its own tokens (``ngram.py``)."""

    def __init__(self, source: NgramSource):
        self.source, self.name = source, source.name

    def grow(self, reqs: list[Request], table: SlotTable, *, extended: Extended, spec,
             chain: SamplingParams | None, generator) -> DraftPhase:
        s = self.source
        cands = [ngram_candidates(r.prompt_ids + r.output_ids, s.min_match, max_match=s.max_match,
                                  num_steps=spec.num_steps, topk=spec.topk)
                 for r in reqs]
        return DraftPhase(cands, [[] for _ in reqs], [[] for _ in reqs])
