"""Load a target (+ tokenizer, + draft head) once, then generate: the one entry point the CLI,
the app, the benchmark and the notebooks share.

Where drafts come from is part of the ``SpecConfig`` (``draft``: a ``DraftSource`` of any kind in
``drafts.registry.SOURCES``), so one loaded ``Workbench`` runs every draft source that needs
nothing loaded: ``wb.engine(SpecConfig.from_knobs("eagle2", draft="exit:28"), sampling)``. What a
source needs loaded is its ``Needs``: the head (``--draft DIR`` or ``random[:SEED]``) or a draft
model (``--draft model:DIR``); a workbench holds one of the two (``draft``, ``loaded_draft``).

Device and dtype are decided here, once (``device.py``): CUDA when present, else the CPU;
``dtype="auto"`` picks bf16 where the hardware computes it natively, else fp32.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from workbench.attention.selfcheck import SelfCheck, choose_attention_backend
from workbench.cpu_choices import choose_linear_order
from workbench.device import default_device, parse_dtype, resolve_dtype
from workbench.engine.config import SpecConfig
from workbench.engine.drafts.base import DraftSource
from workbench.engine.drafts.head import HeadSource, load_head
from workbench.engine.drafts.registry import check_draft, parse_draft
from workbench.engine.engine import Engine
from workbench.engine.policy import SpecPolicy, parse_policy, policy_for
from workbench.engine.sampling import SamplingParams
from workbench.errors import UserError, as_user_error
from workbench.models.chat import chat_ids
from workbench.models.config import ModelConfig
from workbench.models.draft import DraftHead, load_draft
from workbench.models.linear import LinearOrder, apply_linear_order
from workbench.models.llama import TargetModel
from workbench.models.loading import load_target


HOT_TOKENS_DEFAULT = 4096


@dataclass
class Workbench:
    target: TargetModel
    tokenizer: object
    draft: DraftHead | TargetModel | None  # the EAGLE head, or the draft model of model:DIR
    draft_source: str  # path of the head, "random (seed N)", or the --draft source loaded ("model:DIR", "ngram:1-12")
    target_dir: Path
    dtype_name: str
    attention: SelfCheck | None = None  # which attention backend runs, and why (start-up self-check)
    linear_order: LinearOrder = LinearOrder()  # few-row fp32 or bf16 CPU linear order, and how it was chosen
    cuda_graphs: bool | None = None  # replay decode/verify from CUDA graphs; None = where possible

    @classmethod
    def load(cls, target: str | None = None, draft: str | None = None, *, dtype: str = "fp32",
             device: str | None = None, attention: str | None = None, need_draft: bool = True,
             hot_tokens: int | None = None, linear_order: str = "auto") -> "Workbench":
        """``attention``: ``torch`` or ``triton`` (default: ``default_backend(device)``); ``triton``
        is checked against the reference on this device first and replaced by ``torch`` (with one
        line on stderr) if it fails. ``hot_tokens``: draft only among the N most frequent tokens of the head's
        training responses, from ``hot_tokens.json`` beside its weights (None = the default,
        HOT_TOKENS_DEFAULT where the head has such a list; 0 = the full vocabulary; N > 0 for a head
        without a list is an error). Verification always uses the full vocabulary. ``draft``: a
        head directory, ``random[:SEED]``, ``model:DIR`` (that model is loaded beside the target),
        or a source that needs nothing loaded (``ngram[:MIN-MAX]``, ``exit:N``: checked against
        the target's layers before its weights load).
        ``linear_order``: ``auto`` (measured on this CPU, ``workbench.cpu_choices``), ``weight-left``
        or ``plain``."""
        from transformers import AutoTokenizer

        from workbench import store
        from workbench.attention import BACKENDS, default_backend

        target_dir = store.resolve_target(target)
        source = check_draft(draft, ModelConfig.from_dir(target_dir)) if draft else None
        wants_head = need_draft and (source is None or source.needs.head)
        load_model = need_draft and source is not None and source.needs.model
        device = device or default_device()
        dtype = resolve_dtype(dtype, device)
        model = load_target(target_dir, parse_dtype(dtype), device)
        attention = attention or default_backend(device)
        if attention not in BACKENDS:
            raise ValueError(f"unknown attention backend {attention!r}; choose one of {', '.join(BACKENDS)}")
        cfg = model.config
        check = choose_attention_backend(attention, device, dtype=model.lm_head.weight.dtype, head_dim=cfg.head_dim,
                                          num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads)
        if not check.ok:  # the one line a user sees when the Triton kernel cannot be trusted here
            print(f"warning: {check.message}", file=sys.stderr, flush=True)
        model.attention_backend = check.backend
        tokenizer = AutoTokenizer.from_pretrained(target_dir)
        if wants_head:
            weights = draft if source is None else None  # a directory or random[:SEED]; else the shipped head
            head, name = load_head(weights, model, target is None)
            if not (weights is None and name.startswith("random")):  # not the shipped list
                name += _apply_hot_tokens(head, hot_tokens, weights)
        elif load_model:  # the target's dtype and device
            head, name = source.load(model), source.name
        else:
            head, name = None, "none" if source is None else source.name
        order = choose_linear_order(linear_order, model)
        for module in (model, head):
            if module is not None:
                apply_linear_order(module, order)
        return cls(model, tokenizer, draft=head, draft_source=name, target_dir=Path(target_dir), dtype_name=dtype,
                   attention=check, linear_order=order)

    def with_draft(self, draft: str, hot_tokens: int | None = None) -> "Workbench":
        """The same target (not loaded again) with another head directory, hot tokens as ``load``."""
        head, source = load_draft(draft, self.target), str(draft)
        apply_linear_order(head, self.linear_order)
        return replace(self, draft=head, draft_source=source + _apply_hot_tokens(head, hot_tokens, draft))

    @property
    def stop_ids(self) -> tuple[int, ...]:
        ids = {self.tokenizer.eos_token_id}
        cfg = Path(self.target_dir) / "generation_config.json"
        if cfg.exists():
            eos = json.loads(cfg.read_text()).get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [eos])
        return tuple(sorted(i for i in ids if i is not None))

    def encode(self, prompt: str, raw: bool = False) -> list[int]:
        """A user message through the chat template (``raw``: the text as is)."""
        if not prompt or not prompt.strip():
            raise ValueError("the prompt is empty")
        if raw:
            return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        return chat_ids(self.tokenizer, prompt)

    def token_text(self, token: int) -> str:
        return self.tokenizer.decode([token])

    @property
    def loaded_draft(self) -> DraftSource | None:
        """The draft source what was loaded stands for: the ``HeadSource()`` when a head
        is loaded, the ``model:DIR`` source when a draft model is, else the source named at load
        (``ngram:1-12``, ``exit:28``) or None."""
        if isinstance(self.draft, DraftHead):
            return HeadSource()
        return parse_draft(self.draft_source)

    def missing_draft(self, source: DraftSource) -> str | None:
        """Why this workbench cannot draft with ``source`` (None: it can): a source that needs a
        head or a draft model (``Needs``) drafts with the one loaded, or not at all."""
        if source.needs.loaded and self.loaded_draft != source:
            return (f"it drafts with the {source.label()}, but that is not the one loaded (draft {self.draft_source}): "
                    f"load it (--draft {source.name}), or draft with a source that needs nothing loaded")
        return None

    def engine(self, spec: SpecConfig | None = None, sampling: SamplingParams = SamplingParams(), trace: bool = False,
               policy: SpecPolicy | str | None = None, kv_slots: int | None = None, stops: bool = False) -> Engine:
        """An engine on this target for ``spec`` (one setting every step; its draft source is
        ``spec.draft``: ``SpecConfig.from_knobs(..., draft="exit:28")``) or for ``policy``, a
        ``SpecPolicy`` or its text in ``POLICY_GRAMMAR`` (``fixed`` alone runs ``spec``);
        ``kv_slots``: the KV capacity for requests that come and go, ``stops``: keep each step's stop
        cause on its request (``Engine``). UserError when
        a speculative setting drafts with a head or a draft model this workbench did not load,
        or names an exit the target cannot take; ValueError for a malformed policy text."""
        if isinstance(policy, str):
            policy = parse_policy(policy, spec)
        if policy is not None:
            spec = None  # the policy's settings, not one fixed spec
        settings = (policy if policy is not None else policy_for(spec or SpecConfig())).settings()
        speculative = [s for s in settings if s.speculative]
        for s in speculative:
            missing = self.missing_draft(s.draft)
            if missing is not None:
                raise UserError(f"{s.describe()}: {missing}")
            with as_user_error():
                s.draft.check_target(self.target.config)
        return Engine(self.target, self.draft if speculative else None, spec, sampling=sampling, stop_ids=self.stop_ids,
                      trace=trace, token_text=self.token_text, cuda_graphs=self.cuda_graphs, policy=policy,
                      kv_slots=kv_slots, stops=stops)

    def generate(self, prompt_ids: list[list[int]], spec: SpecConfig, sampling: SamplingParams,
                 max_new_tokens: int, *, trace_sink=None, on_step=None, policy=None,
                 kv_slots: int | None = None, stops: bool = False, profile=None) -> tuple[list, float]:
        """Decode a batch together; returns (requests, seconds). ``trace_sink(dict)`` gets every
        step trace when given; ``on_step(requests, seconds)`` is called after every step (the
        prefill included) with the requests as they stand and the seconds since decoding began,
        read without a device sync: for progress, not for timing. ``policy``, ``kv_slots`` and
        ``stops`` as for ``engine``. ``profile`` (a ``timings.StepProfile``): the engine's phase
        times are added to it."""
        eng = self.engine(spec, sampling, trace=trace_sink is not None, policy=policy, kv_slots=kv_slots, stops=stops)
        eng.add_requests(prompt_ids, max_new_tokens)
        _sync(eng.device)
        t0 = time.perf_counter()
        while not eng.done:
            for t in eng.step():
                trace_sink(t)
            if on_step is not None:
                on_step(eng.requests, time.perf_counter() - t0)
        _sync(eng.device)
        seconds = time.perf_counter() - t0
        if profile is not None:
            profile.merge(eng.profile)
        return eng.requests, seconds


def _apply_hot_tokens(head: DraftHead, n: int | None, draft: str | None) -> str:
    """Prune the head's draft vocabulary (FR-Spec / SGLang's hot-token map) to the first ``n`` of
    its ``hot_tokens.json`` (the shipped head's when ``draft`` is None): the draft's lm_head is
    the biggest matmul of a draft step, and on a CPU it is read once per tree level."""
    from workbench.models.heads import HOT_TOKENS_FILE, default_draft_dir, load_hot_tokens

    head_dir = default_draft_dir() if draft is None else Path(draft)
    has_list = head_dir.is_dir() and (head_dir / HOT_TOKENS_FILE).exists()
    if n is None:
        n = HOT_TOKENS_DEFAULT if has_list else 0
    if n and not has_list:
        raise ValueError(f"--hot-tokens {n}: the draft {draft or head_dir} has no {HOT_TOKENS_FILE} to take "
                         f"its frequent tokens from (use --hot-tokens 0 for the full vocabulary)")
    if not n:
        return ""
    hot = load_hot_tokens(head_dir, n)
    head.set_hot_tokens(hot)
    return f", {len(hot)} hot draft tokens"


def _sync(device: torch.device) -> None:
    """Wait for the device's queued work before reading the clock (CUDA is asynchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
