"""``ngram[:MIN-MAX]``: no model. Continuations of the longest suffix (MIN..MAX tokens) of the
request's own tokens found earlier in them (``engine/ngram.py``, the trie). No forward, no KV."""

from __future__ import annotations

import json

from workbench.engine.draft import DraftPhase
from workbench.engine.drafts.base import Extended, Needs, nothing
from workbench.engine.ngram import ngram_candidates
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.kv import SlotTable
from workbench.kv.pool import KVPool

DEFAULT_MIN_MATCH = 1  # SGLang's NGRAM defaults: match windows of 1..12 tokens
DEFAULT_MAX_MATCH = 12
MAX_MATCH = 32


class NgramSource:
    kind = "ngram"
    grammar = "ngram[:MIN-MAX]"
    choice = "n-gram (prompt lookup)"
    model_free = True
    needs = Needs()

    def parse(self, arg: str | None) -> dict | None:
        if not arg:
            return {}
        lo, dash, hi = arg.partition("-")
        if not (dash and lo.isdigit() and hi.isdigit()):
            raise ValueError(f"draft source 'ngram:{arg}': write the n-gram match windows as ngram:MIN-MAX, "
                             "e.g. ngram:1-12")
        return {"min_match": int(lo), "max_match": int(hi)}

    def check(self, source) -> None:
        if not 1 <= source.min_match <= source.max_match <= MAX_MATCH:
            raise ValueError(f"n-gram match windows must satisfy 1 <= MIN <= MAX <= {MAX_MATCH}, "
                             f"got {source.min_match}-{source.max_match}")

    def check_target(self, source, num_layers: int) -> None:
        pass

    def name(self, source) -> str:
        return f"ngram:{source.min_match}-{source.max_match}"

    def label(self, source, num_layers: int | None = None) -> str:
        return f"n-gram (prompt lookup, {self.name(source)})"

    def frameworks(self, spec) -> dict[str, str]:
        return {"SGLang": _sglang(spec), "vLLM": _vllm(spec), "EAGLE": "no n-gram draft"}

    def build(self, source, target, draft) -> NgramDraft:
        return NgramDraft(source)


def _sglang(spec) -> str:
    d = spec.draft
    return (f"--speculative-algorithm NGRAM --speculative-num-draft-tokens {spec.num_draft_tokens} "
            f"--speculative-ngram-min-match-window-size {d.min_match} "
            f"--speculative-ngram-max-match-window-size {d.max_match} (its corpus holds every request's tokens)")


def _vllm(spec) -> str:
    d = spec.draft
    config = {"method": "ngram", "num_speculative_tokens": spec.num_steps, "prompt_lookup_min": d.min_match,
              "prompt_lookup_max": d.max_match}
    note = "" if spec.topk == 1 else " (a chain: vLLM's n-gram draft proposes one continuation)"
    return f"speculative_config={json.dumps(config)}{note}"


class NgramDraft:
    """No model: each request's tree is looked up in its own tokens (``ngram.py``)."""

    level_offset = 0  # no levels
    taps = ()
    reads_pending = False
    kv = None  # no forward, no KV
    graphed = None

    def __init__(self, source):
        self.source, self.name = source, source.name

    def scratch_slots(self, spec) -> int:
        return 0

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        pass

    def extend(self, reqs: list[Request], table: SlotTable) -> Extended:
        return nothing(reqs)

    def grow(self, reqs: list[Request], table: SlotTable, extended: Extended, spec,
             chain: SamplingParams | None, generator) -> DraftPhase:
        s = self.source
        cands = [ngram_candidates(r.prompt_ids + r.output_ids, s.min_match, s.max_match, spec.num_steps, spec.topk)
                 for r in reqs]
        return DraftPhase(cands, [[] for _ in reqs], [[] for _ in reqs])
