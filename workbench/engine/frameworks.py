"""The same setting elsewhere: a ``SpecConfig`` as SGLang launch flags, a vLLM
``speculative_config`` and the EAGLE repository's ``EaModel`` arguments, each checked against
the engine's own rule for what it can run (``check_sglang``, ``check_vllm``).

=====================  ===========================  ====================  ==============================
here                   SGLang                       EAGLE repository      vLLM (v1)
=====================  ===========================  ====================  ==============================
``num_steps``          ``--speculative-num-steps``  ``depth + 1``         ``num_speculative_tokens``
``topk``               ``--speculative-eagle-topk`` ``top_k``             a chain: not carried (below)
``num_draft_tokens``   ``--speculative-num-draft-`` ``total_token``       a chain: not carried (below)
(root included)        ``tokens``
=====================  ===========================  ====================  ==============================

EAGLE's ``depth`` counts the draft levels after the first, one less than ``num_steps``. Its
evaluation scripts (SafeAILab/EAGLE ``eagle/evaluation/gen_ea_answer_*.py``, EAGLE-2 release
bfeb532) take ``--total-token 60 --depth 5 --top-k 10``, 60/6/10 here; ``EaModel.from_pretrained``
defaults to ``total_token=59, depth=5`` there and ``total_token=60, depth=7`` from EAGLE-3 (f2f2366).
SGLang, given none of the three flags, picks 8/5/4 here for a ``LlamaForCausalLM`` target
(``auto_choose_speculative_params`` in ``python/sglang/srt/server_args.py`` at 067ad4d), the
default of ``SpecConfig`` too. SGLang's rule: with
``--speculative-eagle-topk 1`` it runs ``num_draft_tokens = num_steps + 1`` whatever was given,
and a tree keeps at most ``topk + (num_steps - 1) x topk^2`` drafts (this engine's bound too,
``tree.max_candidates``); the flags written here obey it, so SGLang runs what this engine runs (a
static tree excepted: SGLang grows dynamic ones).

vLLM verifies chains only: it removed its tree-attention backend in May 2026
(vllm-project/vllm#42121), and with it ``speculative_token_tree``. A tree here becomes a chain as
deep as the tree (``chain_tokens``: ``num_steps``, at most ``num_draft_tokens - 1``), and the export
says so.

The draft source (``SpecConfig.draft``) names its own draft to each engine (``drafts/``): the
n-gram draft is SGLang's ``NGRAM`` algorithm (match windows
``--speculative-ngram-{min,max}-match-window-size``; it draws from a corpus shared by every
request, this one from the request's own tokens) and vLLM's ``ngram`` method
(``prompt_lookup_{min,max}``); the EAGLE repository has none. None of the three drafts with an
early exit of the target; the nearest there is a separate small draft model, which ``model:DIR``
is here and SGLang's ``STANDALONE`` algorithm and vLLM's ``draft_model`` method are.

A setting per running batch size (a ``policy.Schedule``, such as the one the load benchmark
reads off what ``auto`` chose) is ``schedule_flags``: vLLM takes one in its speculative config,
``num_speculative_tokens_per_batch_size``, entries ``[lo, hi, k]`` (batch sizes lo..hi verify k
speculative tokens, 0 = none; the first entry starts at 1, sizes past the last take its k, k at
most ``num_speculative_tokens``; ``vllm/v1/spec_decode/dynamic/utils.py`` at 14b450c): k here
is each setting's ``chain_tokens``. SGLang has no batch-size schedule; its adaptive mode
(``--speculative-adaptive``, ``--speculative-adaptive-config`` naming ``candidate_steps``; at
13d3f64) moves ``num_steps`` by an average of the accepted drafts, for EAGLE chains only, and
needs two candidates or more.
"""

from __future__ import annotations

import json

from workbench.engine.tree import max_candidates

HEAD = "<EAGLE head>"  # what SGLang's and vLLM's flags name as the head's path
FRAMEWORKS = ("SGLang", "vLLM", "EAGLE")
VLLM_METHODS = ("eagle", "ngram", "draft_model")  # the speculative_config methods the drafts here map to
CHAINS_ONLY = "vLLM verifies chains only since it removed tree attention"


def framework_flags(spec) -> dict[str, str]:
    """{framework: how to ask it for ``spec`` (a ``SpecConfig``)}, one line each (``FRAMEWORKS``
    order); each draft source says its own (``drafts/``)."""
    if not spec.speculative:
        return {name: "no speculative decoding (leave the speculative options out)" for name in FRAMEWORKS}
    return spec.draft.frameworks(spec)


def chain_tokens(spec) -> int:
    """The drafts of the deepest walk ``spec`` allows (0: plain decoding): ``num_steps``, at most
    ``num_draft_tokens - 1``; the chain vLLM verifies for it."""
    return min(spec.num_steps, spec.num_draft_tokens - 1) if spec.speculative else 0


# ---- vLLM ------------------------------------------------------------------------------------
def vllm_flags(spec, draft: dict) -> str:
    """vLLM's ``speculative_config`` for ``spec`` drafting with ``draft`` (the keys that name the
    draft: ``method`` and its own fields): a chain of ``chain_tokens``, and why where ``spec``
    is a tree. Checked by ``check_vllm``."""
    k = chain_tokens(spec)
    config = check_vllm({**draft, "num_speculative_tokens": k})
    note = f" (a chain of {k}, the tree's depth: {CHAINS_ONLY})" if spec.num_draft_tokens - 1 > k else ""
    return f"speculative_config={json.dumps(config)}{note}"


def check_vllm(config: dict) -> dict:
    """``config`` as given when vLLM can run it, else ValueError naming the rule it breaks: a
    method the drafts here map to, ``num_speculative_tokens`` >= 1, no tree, n-gram windows
    1 <= min <= max, and per-batch-size entries ``[lo, hi, k]`` covering 1, 2, ... in order
    with 0 <= k <= ``num_speculative_tokens``."""
    k = config.get("num_speculative_tokens")
    if config.get("method") not in VLLM_METHODS:
        raise ValueError(f"vLLM: method {config.get('method')!r} is none of {', '.join(VLLM_METHODS)}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"vLLM: num_speculative_tokens must be a whole number >= 1, got {k!r}")
    if "speculative_token_tree" in config:
        raise ValueError(f"vLLM: no speculative_token_tree ({CHAINS_ONLY})")
    windows = [config.get(f"prompt_lookup_{end}") for end in ("min", "max")]  # the n-gram method's, where given
    if windows != [None, None] and not (all(isinstance(w, int) for w in windows) and 1 <= windows[0] <= windows[1]):
        raise ValueError(f"vLLM: n-gram windows need 1 <= prompt_lookup_min <= prompt_lookup_max, got {windows}")
    entries = config.get("num_speculative_tokens_per_batch_size", [])
    starts = [1] + [hi + 1 for _, hi, _ in entries[:-1]]
    if [lo for lo, _, _ in entries] != starts[: len(entries)] or any(not 0 <= n <= k or hi < lo
                                                                    for lo, hi, n in entries):
        raise ValueError(f"vLLM: per-batch-size entries must run [1, hi, k], [hi + 1, ...] with 0 <= k <= {k}, "
                         f"got {entries}")
    return config


# ---- SGLang ----------------------------------------------------------------------------------
def sglang_flags(spec, algorithm: str = "EAGLE", draft: str = HEAD) -> str:
    """SGLang's launch flags for a tree drafted by a model (the head, or ``STANDALONE``), within
    SGLang's rule (``check_sglang``): a chain runs ``chain_tokens`` steps."""
    steps, topk, tokens = spec.num_steps, spec.topk, spec.num_draft_tokens
    if topk == 1:
        steps = chain_tokens(spec)
        tokens = steps + 1
    cut = min(tokens, 1 + max_candidates(steps, topk))
    check_sglang(steps, topk, cut)
    flags = (f"--speculative-algorithm {algorithm} --speculative-draft-model-path {draft} "
             f"--speculative-num-steps {steps} --speculative-eagle-topk {topk} --speculative-num-draft-tokens {cut}")
    if spec.lossy:
        flags += (f" --speculative-accept-threshold-single {spec.accept_threshold_single:g}"
                  f" --speculative-accept-threshold-acc {spec.accept_threshold_acc:g} (lossy)")
    if spec.method == "static":
        return flags + " (SGLang grows a dynamic tree: the nearest setting, not this fixed tree)"
    return flags


def check_sglang(steps: int, topk: int, num_draft_tokens: int) -> None:
    """ValueError unless SGLang runs these flags as given (``--speculative-num-steps``,
    ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``)."""
    if min(steps, topk) < 1 or num_draft_tokens < 2:
        raise ValueError(f"SGLang: num_steps and topk >= 1, num_draft_tokens >= 2, got {steps}, {topk}, "
                         f"{num_draft_tokens}")
    if topk == 1 and num_draft_tokens != steps + 1:
        raise ValueError(f"SGLang: a chain (topk 1) runs num_draft_tokens = num_steps + 1 = {steps + 1}, "
                         f"not {num_draft_tokens}")
    if num_draft_tokens - 1 > max_candidates(steps, topk):
        raise ValueError(f"SGLang: {steps} steps of topk {topk} keep at most {max_candidates(steps, topk)} "
                         f"drafts, not {num_draft_tokens - 1}")


# ---- a setting per batch size ----------------------------------------------------------------
def schedule_flags(schedule, largest_batch: int | None = None) -> dict[str, str]:
    """A setting per batch size (a ``policy.Schedule``) in vLLM's and SGLang's terms (module
    docstring): {"vLLM": its speculative config, "SGLang": the nearest launch flags, and why only
    nearest}, drafting as the schedule's settings draft. ``largest_batch`` closes the open last
    range for vLLM (default: where it starts)."""
    ranges = schedule.ranges
    speculative = [r.spec for r in ranges if r.spec.speculative]
    if not speculative:
        off = "no speculative decoding at any batch size (leave the speculative options out)"
        return {"vLLM": off, "SGLang": off}
    widest = max(speculative, key=lambda s: (s.num_steps, s.num_draft_tokens))
    return {"vLLM": _vllm_schedule(ranges, widest, largest_batch), "SGLang": _sglang_schedule(ranges, speculative,
                                                                                                widest)}


def _vllm_schedule(ranges, widest, largest_batch: int | None) -> str:
    draft = widest.draft.vllm_draft()
    if draft is None:
        return f"no such draft in vLLM: {framework_flags(widest)['vLLM']}"
    entries = [[r.lo, r.hi if r.hi is not None else max(r.lo, largest_batch or r.lo), chain_tokens(r.spec)]
               for r in ranges]
    config = check_vllm({**draft, "num_speculative_tokens": max(e[2] for e in entries),
                         "num_speculative_tokens_per_batch_size": entries})
    text = f"--speculative-config '{json.dumps(config)}'"
    if any(r.spec.num_draft_tokens - 1 > chain_tokens(r.spec) for r in ranges if r.spec.speculative):
        text += f" (k = the deepest walk of each setting, a chain: {CHAINS_ONLY})"
    if ranges[-1].hi is None:
        text += f" (batch sizes past {entries[-1][1]} keep k = {entries[-1][2]})"
    return text


def _sglang_schedule(ranges, speculative, widest) -> str:
    base = framework_flags(widest)["SGLang"]
    steps = sorted({chain_tokens(s) for s in speculative})
    if len(steps) < 2 or "--speculative-algorithm EAGLE " not in base:
        text = f"{base} (one setting throughout: SGLang has no batch-size schedule"
        return text + (", and off at some batch sizes has no flag there)" if len(speculative) < len(ranges) else ")")
    return (f"{base} --speculative-adaptive --speculative-adaptive-config FILE, FILE holding "
            f"{json.dumps({'candidate_steps': steps})} (SGLang moves among them by acceptance, not by batch size, "
            "for EAGLE chains only: --speculative-eagle-topk 1)")
