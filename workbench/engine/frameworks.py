"""The same setting elsewhere: a ``SpecConfig`` as SGLang launch flags, a vLLM
``speculative_config`` and the EAGLE repository's ``EaModel`` arguments.

=====================  ===========================  ====================  ==============================
here                   SGLang                       EAGLE repository      vLLM (v1)
=====================  ===========================  ====================  ==============================
``num_steps``          ``--speculative-num-steps``  ``depth + 1``         chain: ``num_speculative_tokens``
``topk``               ``--speculative-eagle-topk`` ``top_k``             static tree: its widest branching
``num_draft_tokens``   ``--speculative-num-draft-`` ``total_token``       ``num_speculative_tokens + 1``
(root included)        ``tokens``
=====================  ===========================  ====================  ==============================

EAGLE's ``depth`` counts the draft levels after the first, one less than ``num_steps``: its
paper default ``depth=5, top_k=10, total_token=60`` is ``num_steps=6`` here and in SGLang.
vLLM verifies a chain, or one fixed tree given as rank paths in
``speculative_token_tree`` (e.g. ``"[(0,), (1,), (0, 0)]"``: the root's top-2 children and the
first one's top child); it has no dynamic tree, so ``eagle2`` maps to the static tree of the
same size (EAGLE-1's shape), which is the nearest setting, not the same tree.

The draft source (``SpecConfig.draft``): the n-gram draft is SGLang's ``NGRAM`` algorithm
(match windows ``--speculative-ngram-{min,max}-match-window-size``; it draws from a corpus
shared by every request, this one from the request's own tokens) and vLLM's ``ngram`` method
(``prompt_lookup_{min,max}``, a chain); the EAGLE repository has none. None of the three drafts
with an early exit of the target; the nearest there is a separate small draft model, which
``model:DIR`` is here and SGLang's ``STANDALONE`` algorithm and vLLM's draft-model method are.
"""

from __future__ import annotations

import json

from workbench.engine.config import SpecConfig
from workbench.engine.static_tree import default_static_tree

FRAMEWORKS = ("SGLang", "vLLM", "EAGLE")
HEAD = "<EAGLE head>"


def framework_flags(spec: SpecConfig) -> dict[str, str]:
    """{framework: how to ask it for ``spec``}, one line each (``FRAMEWORKS`` order)."""
    if not spec.speculative:
        return {name: "no speculative decoding (leave the speculative options out)" for name in FRAMEWORKS}
    if spec.draft.kind == "exit":
        return {name: f"no early-exit draft ({spec.draft.name}): the nearest is a separate small draft model"
                for name in FRAMEWORKS}
    if spec.draft.kind == "ngram":
        return {"SGLang": _sglang_ngram(spec), "vLLM": _vllm_ngram(spec), "EAGLE": "no n-gram draft"}
    if spec.draft.kind == "model":
        return {"SGLang": _sglang(spec, "STANDALONE", spec.draft.path),
                "vLLM": _vllm_model(spec), "EAGLE": "no separate draft model (an EAGLE head only)"}
    return {"SGLang": _sglang(spec), "vLLM": _vllm(spec), "EAGLE": _eagle(spec)}


def _sglang_ngram(spec: SpecConfig) -> str:
    d = spec.draft
    return (f"--speculative-algorithm NGRAM --speculative-num-draft-tokens {spec.num_draft_tokens} "
            f"--speculative-ngram-min-match-window-size {d.min_match} "
            f"--speculative-ngram-max-match-window-size {d.max_match} (its corpus holds every request's tokens)")


def _vllm_model(spec: SpecConfig) -> str:
    config = {"model": spec.draft.path, "num_speculative_tokens": spec.num_steps}
    note = "" if spec.topk == 1 else " (a chain: vLLM's draft model proposes one continuation)"
    return f"speculative_config={json.dumps(config)}{note}"


def _vllm_ngram(spec: SpecConfig) -> str:
    d = spec.draft
    config = {"method": "ngram", "num_speculative_tokens": spec.num_steps, "prompt_lookup_min": d.min_match,
              "prompt_lookup_max": d.max_match}
    note = "" if spec.topk == 1 else " (a chain: vLLM's n-gram draft proposes one continuation)"
    return f"speculative_config={json.dumps(config)}{note}"


def _sglang(spec: SpecConfig, algorithm: str = "EAGLE", draft: str = HEAD) -> str:
    flags = (f"--speculative-algorithm {algorithm} --speculative-draft-model-path {draft} "
             f"--speculative-num-steps {spec.num_steps} --speculative-eagle-topk {spec.topk} "
             f"--speculative-num-draft-tokens {spec.num_draft_tokens}")
    if spec.lossy:
        flags += (f" --speculative-accept-threshold-single {spec.accept_threshold_single:g}"
                  f" --speculative-accept-threshold-acc {spec.accept_threshold_acc:g} (lossy)")
    if spec.method == "static":
        return flags + " (SGLang grows a dynamic tree: the nearest setting, not this fixed tree)"
    return flags


def _vllm(spec: SpecConfig) -> str:
    config = {"method": "eagle", "model": HEAD}
    if spec.topk == 1:
        config["num_speculative_tokens"] = spec.num_steps
        return f"speculative_config={json.dumps(config)}"
    paths = spec.tree if spec.tree is not None else default_static_tree(spec.num_draft_tokens)
    config["num_speculative_tokens"] = len(paths)
    config["speculative_token_tree"] = str([tuple(p) for p in paths])
    note = "" if spec.method == "static" else " (a static tree of the same size: vLLM has no dynamic tree)"
    return f"speculative_config={json.dumps(config)}{note}"


def _eagle(spec: SpecConfig) -> str:
    args = f"EaModel.from_pretrained(..., depth={spec.num_steps - 1}, top_k={spec.topk}, total_token={spec.num_draft_tokens})"
    if spec.method == "static":
        return args + " (EAGLE-2's dynamic tree: the nearest setting; EAGLE-1 took a fixed tree of paths)"
    return args
