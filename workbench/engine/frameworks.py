"""The same setting elsewhere: a ``SpecConfig`` as SGLang launch flags, a vLLM
``speculative_config`` and the EAGLE repository's ``EaModel`` arguments.

=====================  ===========================  ====================  ==============================
here                   SGLang                       EAGLE repository      vLLM (v1)
=====================  ===========================  ====================  ==============================
``num_steps``          ``--speculative-num-steps``  ``depth + 1``         chain: ``num_speculative_tokens``
``topk``               ``--speculative-eagle-topk`` ``top_k``             static tree: not carried (below)
``num_draft_tokens``   ``--speculative-num-draft-`` ``total_token``       ``num_speculative_tokens + 1``
(root included)        ``tokens``
=====================  ===========================  ====================  ==============================

EAGLE's ``depth`` counts the draft levels after the first, one less than ``num_steps``. Its
defaults, as read in SafeAILab/EAGLE: the evaluation scripts ``eagle/evaluation/gen_ea_answer_*.py``
take ``--total-token 60 --depth 5 --top-k 10`` (60/6/10 here) at the EAGLE-2 release, commit
bfeb532, and still at cb7e084; ``EaModel.from_pretrained`` (``eagle/model/ea_model.py``) takes
``total_token=59, depth=5, top_k=10`` at bfeb532 and ``total_token=60, depth=7, top_k=10`` from
f2f2366 (EAGLE-3) on. SGLang, given none of the three flags, picks 5/4/8 (``num_steps``, ``topk``,
``num_draft_tokens``) for a ``LlamaForCausalLM`` target (``auto_choose_speculative_params`` in
``python/sglang/srt/server_args.py``; ``docs/advanced_features/speculative_decoding.md`` at
067ad4d): 8/5/4 here, the default of ``SpecConfig`` too.

vLLM verifies a chain, or one fixed tree given as rank paths in ``speculative_token_tree`` (e.g.
``"[(0,), (1,), (0, 0)]"``); it has no dynamic tree, so ``eagle2`` maps to EAGLE-1's static tree
cut to the same ``num_draft_tokens - 1`` paths (``default_static_tree``): the nearest setting, of
the same size, carrying nothing of ``topk`` or ``num_steps`` (4/3/2 becomes the root's top 3
children). vLLM's EAGLE proposer (``vllm/v1/spec_decode/eagle.py`` at f7eef1b) reads from the list
only the nodes per depth and gives every node of a depth the same number of children, the next
depth's count divided by this one's; a list whose depths are not whole multiples (the 8-node one:
4 at depth 1, 3 at depth 2) is not grown as written.

The draft source (``SpecConfig.draft``): the n-gram draft is SGLang's ``NGRAM`` algorithm
(match windows ``--speculative-ngram-{min,max}-match-window-size``; it draws from a corpus
shared by every request, this one from the request's own tokens) and vLLM's ``ngram`` method
(``prompt_lookup_{min,max}``, a chain); the EAGLE repository has none. None of the three drafts
with an early exit of the target; the nearest there is a separate small draft model, which
``model:DIR`` is here and SGLang's ``STANDALONE`` algorithm and vLLM's draft-model method are.

A setting per running batch size (a ``policy.Schedule``, such as the one the load benchmark
reads off what ``auto`` chose) is ``schedule_flags``: vLLM takes one in its speculative config,
``num_speculative_tokens_per_batch_size``, entries ``[lo, hi, k]`` (batch sizes lo..hi verify k
speculative tokens, 0 = none; the first entry starts at 1, sizes past the last take its k, and
k is capped at ``num_speculative_tokens``; ``vllm/v1/spec_decode/dynamic/utils.py`` at
14b450c): k here is what ``framework_flags`` gives each setting, num_draft_tokens - 1. SGLang
has no batch-size schedule; its adaptive mode (``--speculative-adaptive`` with a JSON file of
``candidate_steps`` given by ``--speculative-adaptive-config``;
``python/sglang/srt/speculative/adaptive_spec_params.py`` at 13d3f64) moves ``num_steps``
among the candidates by an average of the accepted drafts, not by batch size, for chains only
(``--speculative-eagle-topk 1``), and needs two candidates or more.
"""

from __future__ import annotations

import json

from workbench.engine.config import SpecConfig
from workbench.engine.drafts.base import FRAMEWORKS, HEAD, sglang_flags
from workbench.engine.policy import Schedule

def framework_flags(spec: SpecConfig) -> dict[str, str]:
    """{framework: how to ask it for ``spec``}, one line each (``FRAMEWORKS`` order); each draft
    source says its own (``drafts/``)."""
    if not spec.speculative:
        return {name: "no speculative decoding (leave the speculative options out)" for name in FRAMEWORKS}
    return spec.draft.frameworks(spec)


def vllm_tokens(spec: SpecConfig) -> int:
    """The ``num_speculative_tokens`` vLLM verifies for ``spec`` (0: plain decoding)."""
    return spec.num_draft_tokens - 1 if spec.speculative else 0


def schedule_flags(schedule: Schedule, largest_batch: int | None = None) -> dict[str, str]:
    """A setting per batch size in vLLM's and SGLang's terms (see the module docstring):
    {"vLLM": its speculative config, "SGLang": the nearest launch flags, and why only nearest}.
    ``largest_batch`` closes the open last range for vLLM (default: where it starts)."""
    ranges = schedule.ranges
    last = ranges[-1]
    entries = [[r.lo, r.hi if r.hi is not None else max(r.lo, largest_batch or r.lo), vllm_tokens(r.spec)]
               for r in ranges]
    speculative = [r.spec for r in ranges if r.spec.speculative]
    if not speculative:
        off = "no speculative decoding at any batch size (leave the speculative options out)"
        return {"vLLM": off, "SGLang": off}
    config = {"method": "eagle", "model": HEAD, "num_speculative_tokens": max(e[2] for e in entries),
              "num_speculative_tokens_per_batch_size": entries}
    vllm = f"--speculative-config '{json.dumps(config)}'"
    if any(s.topk > 1 for s in speculative):
        vllm += " (k = verify tokens past the root: vLLM drafts a chain of k, or one static tree)"
    if last.hi is None:
        vllm += f" (batch sizes past {entries[-1][1]} keep k = {entries[-1][2]})"
    steps = sorted({s.num_steps for s in speculative})
    widest = max(speculative, key=lambda s: (s.num_steps, s.num_draft_tokens))
    base = sglang_flags(widest)
    if len(steps) < 2:
        sglang = f"{base} (one num_steps throughout: SGLang has no batch-size schedule"
        sglang += ", and off at some batch sizes has no flag there)" if len(speculative) < len(ranges) else ")"
    else:
        sglang = (f"{base} --speculative-adaptive --speculative-adaptive-config FILE, FILE holding "
                  f"{json.dumps({'candidate_steps': steps})} (SGLang moves among them by acceptance, not by batch "
                  "size, for chains only: --speculative-eagle-topk 1)")
    return {"vLLM": vllm, "SGLang": sglang}
