"""The target's part of a step, timed again beside a benchmark's timed runs: the cost model read at
the run's own pace.

A step cost (``step_cost.py``) is measured once and cached. On a small shared machine the same
forward runs a fifth slower or faster from one minute to the next, and not by the same factor at
every size: within one hour a 4-token verify cost 1.23 decode steps in the step cost's measurement
and 1.11 in the engine's steps of the benchmark that followed
(docs/bench/archive/head-cpu-fp32-avx2-2026-12-07-0611.md). A prediction
from the cached curves then carries the machine's drift beside the model's own error, and nothing
tells the two apart.

So a benchmark that sets the model's predictions beside its measurements times the target's part
again through the run: after each of its timed blocks (a question's turn of every method; a
round of a closed load) one **probe** (``probe``): 0.4-2.4 s of forwards on the 2-core AMD
EPYC, most of it the prefill of a long prompt (docs/bench/head-cpu-fp32-avx2.json's ``probes``),
and 9-16 s at 8 requests in flight, whose probe also prefills eight prompts twice and runs their
batch's forwards (the journal's ``elapsed_s`` in docs/bench/load-cpu-avx512.records.jsonl, each
probe's less the result's before it):

- the prefill: one target forward over a prompt of the run (its real tokens) and the logits of
  its last row, as the engine's prefill step runs them;
- the verify: after that prompt, a forward and its logits over n new tokens for each n of
  ``sizes`` (the run's verify sizes, a request's or a batch's), the median of ``REPEATS`` rounds
  in which the sizes take turns;
- where the run drafts with the EAGLE head: the head's extend over the prompt's rows (the
  catch-up) and a head forward with its log-probs over each of ``rows`` rows, likewise;
- at a load of B > 1 requests: the prefill of B of the run's prompts, each in a step of its own
  and all in one step (``StepCost.prefill_joined``: what a prompt sharing a prefill step saves),
  then one forward of all B, each after its own prompt, for each count of new tokens a request
  brings (``batched_forwards``: each request's cache one run of slots, as the engine keeps it,
  the counts taking turns over ``REPEATS`` rounds): a batch's forwards slowed by up to a half in
  a spell where one sequence's did not (docs/benchmarks.md, "Speculation under load"), and their
  pace, by the count of new tokens, prices the batch's (``batch_paces_by_tokens``,
  ``StepCost.batched_tokens``).

``probed(cost, probes)`` is the step cost with those parts replaced by the probes' medians (a
curve's sizes past its smallest by each probe's own difference from it, ``_curve``; the
range: their lowest and highest; the verify taken to have read the probes' median prompt, its
``verify_prefix``, so that a request's own context is priced against it: ``StepCost.context_ms``); what a step spends outside its forwards (``Overhead``) stays the
step cost's, as do the forwards no probe timed. A prediction priced by it sets the model's
structure against the run with the machine's pace over the run taken out; ``label`` says so
wherever such a figure is quoted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import median

import torch

from workbench.cost_model import StepCost
from workbench.kv import SlotAllocator
from workbench.measure.cost import Prefilled, chain_batch, synced_clock
from workbench.timing import paired_points

TURN = "(probe)"  # a probe's key in a round of interleaved turns: no policy or setting is named with parentheses
REPEATS = 3  # interleaved rounds of a probe's verifies and head forwards, each size's median kept
DRAFT_ROWS = (1, 2, 4)  # a head forward's rows in a probe, at least: the extend (τ rows) and a level (topk)


def verify_sizes(tokens) -> tuple[int, ...]:
    """The sizes a probe times for verifies of ``tokens`` tokens each (a whole step's; fractional
    ones rounded up): one token (plain decoding), every power of two up to the largest, and each."""
    tokens = [max(1, math.ceil(float(t))) for t in tokens] or [1]
    top = max(tokens)
    return tuple(sorted({1, *(1 << i for i in range(top.bit_length())), *tokens}))


@dataclass(frozen=True)
class ProbePlan:
    """What each probe of a run times: verify ``sizes``, head forwards of ``rows`` rows where
    ``head`` (the run drafts with the EAGLE head) and, at a load of ``batch`` > 1 requests, one
    forward of ``batch`` requests after the run's prompts for each count of ``per_request`` new
    tokens a request."""

    sizes: tuple[int, ...]
    rows: tuple[int, ...] = ()
    head: bool = False
    batch: int = 1
    per_request: tuple[int, ...] = ()

    @classmethod
    def of(cls, specs, wb, *, batch: int = 1, extra_sizes=()) -> ProbePlan | None:
        """The verifies of ``specs`` (``SpecConfig``s) at ``batch`` requests (``batch`` tokens a
        plain step, ``batch`` · D a speculative one) and ``extra_sizes``; where one drafts with
        the loaded EAGLE head, its forwards up to ``batch`` · topk rows and an extend of 2 ·
        ``batch``. None without a speculative setting (nothing is predicted)."""
        spec = [s for s in specs if s.speculative]
        if not spec:
            return None
        head = [s for s in spec if s.draft.needs.head] if getattr(wb, "draft", None) is not None else []
        rows = verify_sizes([batch * s.topk for s in head] + [2 * batch]) if head else ()
        per_request = tuple(sorted({1, *(s.num_draft_tokens for s in spec)})) if batch > 1 else ()
        return cls(verify_sizes([batch] + [batch * s.num_draft_tokens for s in spec] + list(extra_sizes)),
                   tuple(sorted({*DRAFT_ROWS, *rows})) if head else (), bool(head), batch=batch,
                   per_request=per_request)

    def take(self, wb, prompt: list[int], batch_prompts=()) -> dict:
        """One probe of this plan after ``prompt`` (``probe``); at a batch, its batched forward
        after ``batch_prompts`` (``batch`` of the run's prompts; none: no batched forward)."""
        return probe(wb, prompt, self.sizes, rows=self.rows, head=self.head, batch_prompts=batch_prompts,
                     per_request=self.per_request)


def probe(wb, prompt: list[int], sizes, *, rows=(), head: bool = False, batch_prompts=(), per_request=()) -> dict:
    """One probe (module docstring): ms of the prefill of ``prompt``, of a verify of each of
    ``sizes`` tokens after it and, with ``head``, of the head's catch-up over the prompt and of one
    head forward over each of ``rows`` rows. Returns ``{"prompt_tokens", "prefill_ms",
    "verify": [[n, ms], ...]}``, with ``head`` also ``"catch_up_ms"`` and ``"draft": [[rows, ms], ...]``;
    with ``batch_prompts`` and ``per_request`` also ``"batch"`` (``batched_forwards``)."""
    target = wb.target
    device = target.lm_head.weight.device
    sizes, rows = sorted({int(n) for n in sizes}), sorted({int(n) for n in rows})
    if not prompt or not sizes or min(sizes) < 1:
        raise ValueError(f"a probe needs a prompt and verify sizes >= 1, got {len(prompt)} tokens and {sizes}")
    vocab, spare = target.config.vocab_size, max(sizes + rows) + 1
    body = lambda batch, kv: target(batch, kv)  # noqa: E731
    pool, prefill = _prefilled(body, lambda h: target.logits(h[-1:]), new_pool=target.new_kv_pool, prompt=prompt,
                               spare=spare, vocab=vocab, device=device)
    verify = lambda batch: target.logits(target(batch, pool.kv))  # noqa: E731
    out = {"prompt_tokens": len(prompt), "prefill_ms": round(prefill, 3), "verify": _sized_ms(pool, sizes, verify)}
    if head:
        draft = wb.draft
        feats = torch.zeros(max(len(prompt), spare), draft.feature_width, dtype=target.lm_head.weight.dtype,
                            device=device)
        extend = lambda batch, kv: draft(feats[: batch.num_tokens], batch, kv)  # noqa: E731
        dpool, catch_up = _prefilled(extend, lambda h: draft.log_probs(h[-1:]), new_pool=draft.new_kv_pool,
                                     prompt=prompt, spare=spare, vocab=vocab, device=device)
        level = lambda batch: draft.log_probs(draft(feats[: batch.num_tokens], batch, dpool.kv))  # noqa: E731
        out.update(catch_up_ms=round(catch_up, 3), draft=_sized_ms(dpool, rows, level))
    if batch_prompts and per_request:
        out["batch"] = batched_forwards(target, batch_prompts, per_request)
    return out


def batched_forwards(target, prompts: list[list[int]], per_request) -> dict:
    """A batch's own forwards: the prefill of every prompt of ``prompts`` in a step of its own,
    then of all of them in one step, as the engine admits a closed loop's first requests (one
    forward over their prompts and the logits of each one's last row: what a prefill step holding
    several prompts saves is ``prefill_joined``); then for each n of ``per_request`` forwards (and
    their logits) of all of them, n new tokens each after its own prompt, the median of
    ``REPEATS`` rounds in which the counts take turns (the first rotating, after one untimed
    round). Each request's slots are one run set aside for it, its new tokens' slots right after
    its prompt's, as the engine lays out a request's cache (``SlotAllocator.reserve``), so every
    request's attention reads its keys as a view, not gathered. Returns ``{"requests",
    "context" (their mean prompt tokens), "forward": [[n, ms], ...], "prefill": {"alone": [ms a
    prompt], "together": ms}}``."""
    from workbench.attention.batch import extend_batch
    from workbench.measure.cost import requests_forward_ms
    from workbench.timing import interleaved

    device = target.lm_head.weight.device
    per_request = sorted({int(n) for n in per_request})
    alone = []
    for p in prompts:  # each prompt in a step of its own, into a pool of its own
        pool, ms = _prefilled(lambda batch, kv: target(batch, kv), lambda h: target.logits(h[-1:]),
                              new_pool=target.new_kv_pool, prompt=list(p), spare=0,
                              vocab=target.config.vocab_size, device=device)
        alone.append(round(ms, 3))
        del pool
    top = max(per_request)
    room = sum(len(p) for p in prompts) + len(prompts) * (top + 1)
    alloc, kv = SlotAllocator(room), target.new_kv_pool(room)
    for i, p in enumerate(prompts):
        alloc.reserve(i, len(p) + top)
    committed = [alloc.alloc(len(p), owner=i) for i, p in enumerate(prompts)]
    batch = extend_batch(tokens=[list(p) for p in prompts], prefix_slots=[[] for _ in prompts], new_slots=committed,
                         device=device)
    ends = torch.tensor([len(p) for p in prompts]).cumsum(0) - 1  # each prompt's last row, as the engine's prefill
    t0 = synced_clock(device)
    target.logits(target(batch, kv)[ends.to(device)])
    together = round((synced_clock(device) - t0) * 1e3, 3)

    owners = list(range(len(committed)))
    got = interleaved({n: (lambda n=n: requests_forward_ms(target, kv, alloc, n=n, prefixes=committed,
                                                                 device=device, owners=owners))
                       for n in per_request}, REPEATS, warmup=1)
    return {"requests": len(prompts), "context": sum(len(p) for p in prompts) / len(prompts),
            "forward": [[n, round(median(got[n]), 3)] for n in per_request],
            "prefill": {"alone": alone, "together": together}}


def _prefilled(body, last, *, new_pool, prompt: list[int], spare: int, vocab: int, device) -> tuple[Prefilled, float]:
    """A pool holding ``prompt`` (run through ``body(batch, kv)``, then ``last(hidden)``: the
    last row's distribution) with ``spare`` slots more, and the ms the two took."""
    from workbench.attention.batch import extend_batch

    alloc = SlotAllocator(len(prompt) + spare)
    kv = new_pool(len(prompt) + spare)
    slots = alloc.alloc(len(prompt))
    batch = extend_batch(tokens=[list(prompt)], prefix_slots=[[]], new_slots=[slots], device=device)
    t0 = synced_clock(device)
    last(body(batch, kv))
    ms = (synced_clock(device) - t0) * 1e3
    return Prefilled(kv, alloc, prefix=slots, vocab=vocab, device=torch.device(device)), ms


def _sized_ms(pool: Prefilled, sizes, forward) -> list[list]:
    """[[n, ms], ...]: ``forward`` over a chain of n new tokens for each n of ``sizes``, the median
    of ``REPEATS`` interleaved rounds (``workbench.timing.interleaved``: the sizes take turns, the
    first rotating), so that no size is always the one timed first after the prefill, and one slow
    forward does not stand for its size."""
    from workbench.timing import interleaved

    got = interleaved({n: (lambda n=n: _chain_ms(pool, n, forward)) for n in sizes}, REPEATS)
    return [[n, round(median(got[n]), 3)] for n in sizes]


def _chain_ms(pool: Prefilled, n: int, forward) -> float:
    """ms of ``forward(batch)`` over a chain of n new tokens after the pool's prefix (slots freed after)."""
    slots = pool.alloc.alloc(n)
    try:
        batch = chain_batch(n, pool, slots)
        t0 = synced_clock(pool.device)
        forward(batch)
        return (synced_clock(pool.device) - t0) * 1e3
    finally:
        pool.alloc.free(slots)


def _curve(probes: list[dict], key: str) -> tuple[list[tuple[int, float]], list[tuple[float, float]]]:
    """Per size of ``key`` ("verify", "draft"): the ms the probes say of it, and their (lowest,
    highest). The smallest size's is their median; every other size's is that plus the median over
    the probes of each one's own difference between the size and the smallest (``timing.paired_points``):
    a probe times its sizes within a second, at one prompt and one pace of the machine, so its
    differences hold the curve's shape with both taken out, where each size's median over probes
    at other prompts and paces need not come from the same probe (a 4-token verify 6.4 ms over a
    decode step by the sizes' medians, 4.9 by the probes' own differences, in the 18 probes of
    docs/bench/archive/head-cpu-fp32-2026-12-07-1834.json)."""
    sized = [{int(n): float(ms) for n, ms in p.get(key) or ()} for p in probes]
    sized = [got for got in sized if got]
    if not sized:
        return [], []
    points = [(n, round(ms, 3)) for n, ms in paired_points(sized)]
    ranges = [(min(got[n] for got in sized if n in got), max(got[n] for got in sized if n in got)) for n, _ in points]
    return points, ranges


def _by_length(probes: list[dict], key: str) -> list[tuple[int, float]]:
    """(prompt tokens, median ms of ``key``) over the probes, one point per prompt length."""
    by_len: dict[int, list[float]] = {}
    for p in probes:
        if p.get(key) is not None:
            by_len.setdefault(int(p["prompt_tokens"]), []).append(float(p[key]))
    return [(n, round(median(v), 3)) for n, v in sorted(by_len.items())]


def probed_curve(probes: list[dict]):
    """The probes' verify as a ``cost_model.Curve``: the decode step's median and each size's paired
    difference from it (``_curve``), the range their lowest and highest."""
    from workbench.cost_model import Curve

    points, ranges = _curve(probes, "verify")
    return Curve(tuple(points), tuple(lo for lo, _ in ranges), tuple(hi for _, hi in ranges), "the probes' verify")


def probed(cost: StepCost, probes: list[dict], *, head: bool) -> StepCost:
    """``cost`` with the parts the probes timed in its place (module docstring): the verify curve
    (medians, ranges), the prefill against the prompt's length, and with ``head`` (the cost's
    draft source is the head the probes timed) the draft forwards and the catch-up. ValueError
    without a probe."""
    if not probes:
        raise ValueError("no probe to price the run's target part with")
    verify, verify_range = _curve(probes, "verify")
    changes = {"verify": tuple(verify), "verify_range": tuple(verify_range), "prefill": tuple(_by_length(probes, "prefill_ms")),
               "measured": label(cost.measured or "an undated step cost", len(probes)),
               "verify_prefix": median(p["prompt_tokens"] for p in probes)}  # the probes' verify read its prompt
    priced = replace(cost, **changes)
    changes["batched"] = batch_paces(priced, probes) or cost.batched  # none timed at a batch: the step cost's
    changes["batched_tokens"] = batch_paces_by_tokens(priced, probes) or cost.batched_tokens
    joined = prefill_joined(probes)
    if joined is not None:
        changes["prefill_joined"] = joined
    drafted = [p for p in probes if p.get("draft")]
    if head and drafted:
        draft, draft_range = _curve(drafted, "draft")
        changes.update(draft=tuple(draft), draft_range=tuple(draft_range),
                       catch_up=tuple(_by_length(drafted, "catch_up_ms")))
    return replace(cost, **changes)


def batch_paces(cost: StepCost, probes: list[dict]) -> tuple[tuple[int, float], ...]:
    """(requests, factor) per batch size the probes' batched forwards timed: the median over
    probes and counts of new tokens of each forward's ms over what ``cost`` says of the same
    forward at one request's pace (``StepCost.batched``): the curve at the batch's tokens and
    every request's context by the context term (``forward_ms``)."""
    by_batch: dict[int, list[float]] = {}
    for n, _, f in _batch_factors(cost, probes):
        by_batch.setdefault(n, []).extend(f)
    return tuple((n, round(median(f), 4)) for n, f in sorted(by_batch.items()))


def batch_paces_by_tokens(cost: StepCost, probes: list[dict]) -> tuple[tuple[int, int, float], ...]:
    """(requests, new tokens a request, factor) per batch size and count the probes' batched
    forwards timed, the median over the probes (``StepCost.batched_tokens``): a lone query's
    attention takes a cheaper path than a chain's under a mask, so each count has its own."""
    return tuple((n, t, round(median(f), 4)) for n, t, f in _batch_factors(cost, probes))


def _batch_factors(cost: StepCost, probes: list[dict]) -> list[tuple[int, int, list[float]]]:
    """(requests, tokens, [each probe's forward over ``cost``'s word at one request's pace]),
    sorted, batches over one only."""
    alone = replace(cost, batched=(), batched_tokens=())
    found: dict[tuple[int, int], list[float]] = {}
    for p in probes:
        b = p.get("batch")
        if not b or int(b["requests"]) < 2:
            continue
        for n, ms in b["forward"]:
            model = alone.forward_ms(b["requests"], n, b["context"])
            if model > 0:
                found.setdefault((int(b["requests"]), int(n)), []).append(ms / model)
    return [(n, t, f) for (n, t), f in sorted(found.items())]


def prefill_joined(probes: list[dict]) -> float | None:
    """ms a prefill step saves for each prompt it holds beyond the first (``StepCost.prefill_joined``):
    the median over the probes' batched prefills of the prompts' prefills alone less theirs in one
    step, over the prompts beyond the first (None: no probe timed one)."""
    saved = [(sum(b["prefill"]["alone"]) - b["prefill"]["together"]) / (len(b["prefill"]["alone"]) - 1)
             for b in (p.get("batch") for p in probes) if b and b.get("prefill") and len(b["prefill"]["alone"]) > 1]
    return round(median(saved), 3) if saved else None


def label(measured: str, probes: int) -> str:
    """Which measurement a probed step cost is: ``probes`` probes, and the step cost (``measured``)
    its overhead is from."""
    return f"the run's own forwards ({probes} probes between its timed runs), the overhead of {measured}"


def summary(probes: list[dict]) -> dict:
    """The probes' figures as a record quotes them: how many, and the medians a probed step cost
    reads (verify and head forwards with their ranges, prefill and catch-up by prompt length)."""
    verify, verify_range = _curve(probes, "verify")
    draft, draft_range = _curve(probes, "draft")
    batched = [p["batch"] for p in probes if p.get("batch")]
    forward = _curve([{"f": b["forward"]} for b in batched], "f")[0] if batched else []
    return {"count": len(probes), "verify": [list(p) for p in verify], "verify_range": [list(r) for r in verify_range],
            "batch": ({"requests": batched[0]["requests"], "context": round(median(b["context"] for b in batched), 1),
                       "forward": [list(p) for p in forward], "prefill_joined": prefill_joined(probes)}
                      if batched else None),
            "draft": [list(p) for p in draft], "draft_range": [list(r) for r in draft_range],
            "prefill": [list(p) for p in _by_length(probes, "prefill_ms")],
            "catch_up": [list(p) for p in _by_length(probes, "catch_up_ms")]}


def summary_md(found: dict) -> str:
    """``summary`` in words: the probes' median ms per verify size, head rows and prompt length."""
    line = ", ".join(f"{n}: {ms:.1f}" for n, ms in found["verify"])
    said = f"{found['count']} probes; verify of N tokens, ms: {line}"
    if found["draft"]:
        said += ". Head forward of R rows, ms: " + ", ".join(f"{n}: {ms:.1f}" for n, ms in found["draft"])
    if found.get("batch"):
        b = found["batch"]
        said += (f". A forward of {b['requests']} requests after the run's prompts (mean {b['context']:.0f} tokens), "
                 "ms by new tokens a request: " + ", ".join(f"{n}: {ms:.1f}" for n, ms in b["forward"]))
        if b.get("prefill_joined") is not None:
            said += (f". Their prompts' prefill in one step against a step each: {b['prefill_joined']:.0f} ms saved for "
                     "each prompt beyond the first")
    lengths = sorted(n for n, _ in found["prefill"])
    if lengths:
        ms = [m for _, m in sorted(found["prefill"])]
        said += (f". Prefill over the prompts of {lengths[0]}–{lengths[-1]} tokens: {min(ms):.0f}–{max(ms):.0f} ms"
                 if len(lengths) > 1 else f". Prefill of a {lengths[0]}-token prompt: {ms[0]:.0f} ms")
    return said + "."

