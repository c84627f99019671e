"""This machine's cost model (``workbench/cost_model.py``), measured once per machine and cached.

``step_cost_for(wb, source)`` returns the ``StepCost`` every prediction reads: the loaded target's verify cost at
``VERIFY_SIZES`` total tokens and the draft's forward cost at ``DRAFT_ROWS`` rows (``cost.py``'s
``measure_verify_cost`` and ``measure_draft_cost``, after a committed prefix of ``PREFIX``
tokens), and the step's **overhead** outside the forwards: real engine steps, plain and
speculative (``OVERHEAD_SETTING``), of ``OVERHEAD_BATCHES`` requests, each timed whole, less its
target forward and logits by the engine's own phase clock (``timings.target_ms``) and less its
draft forwards on the curves at the pace of the moment (``PaceProbe``: right after each timed
step a bare target forward over as many tokens as the step verified is timed, and its ratio to
the curve scales the draft's curve; a 2-core machine's pace drifts by a fifth or more between the
curves and the steps: a one-token forward took 54, 73 and 85 ms in three rounds a minute apart).
The least-squares line through the batches gives ms per step and ms per request (batches up to
8, as many as a load keeps in flight), fitted once through each batch's median over every timed
step of every round (``overhead_fields``): one batch of 8 gave 17.7, -1.7 and 0.4 ms in three
rounds of six steps, and the medians of rounds' separate lines made a line that no round had drawn.

A batch's target forward is slower than one sequence of as many tokens (each request's attention
reads its own keys, gathered from slots that interleave with the others'), and by how much moves
with the minute. That share is kept apart from the overhead: at a batch over one each step's
target clock over the bare forward's pace and the context term (``StepCost.forward_ms``) is a
**forward pace**, their median per batch ``StepCost.batched`` and per batch and new tokens a
request ``StepCost.batched_tokens`` (a lone query's attention takes a cheaper path than a chain's
or a tree's under a mask, so a plain step's pace is not a verify's), which a benchmark's own
probes replace with the run's (``probe.py``). Priced inside the overhead line, the pace of the minute the
line was timed stayed in every later prediction (a cached n-gram line priced 36.6 ms outside the
forwards of steps of 6.7 requests whose engine clocks showed under 2 ms: docs/benchmarks.md,
"Speculation under load"), and a run's probes priced it a second time. Speculative steps are timed
at a chain of one too (``LEVEL_SETTING``): the difference, per draft level, prices a setting of
more or fewer levels than the tree (``Overhead``). What a draft
forward costs each draft source says (``DraftSource.draft_cost``, given the ``Timers`` here): the
EAGLE head is timed; a draft model is timed as a target of its own; the early exit ``exit:N`` is
taken as N / L of a verify of as many tokens; the n-gram lookup runs no forward.

A request's **prefill** step and the draft's **catch-up** over the prompt (a draft that runs a
forward) are measured on the same engine, one request of each of ``PREFILL_LENGTHS`` random
prompt tokens (``measure_prefill``).

The measurement runs ``ROUNDS`` whole rounds one after another (seconds on a small model)
and is cached in ``<cache>/step-costs.json`` (``<cache>`` as for the model store) under the CPU
(``cpu_choices.cpu_signature``), torch version, threads, device, dtype, the target's and the
draft's shapes, only when the curves' rounds agree: every size's round medians within ``AGREE`` of
their median, or, past the smallest size, within it once each round's smallest is taken out (a
round slower throughout by the machine's pace has the same curve; ``_agreed``), a draft forward's
also within ``DRAFT_SLACK`` of a decode step (the overhead, a
difference of two times, and the prefill and catch-up, one step each, are the medians of their
rounds and not held to that). On a busy machine they disagree: the
medians serve this run, nothing is cached, the next run measures again. An entry without the
prefill or at other overhead batches is measured again (``_current``); a reader that never
measures (the lessons) takes one whose curves are at today's sizes (``_readable``). Every figure
that quotes the model names the measurement (``StepCost.measured``: date, CPU, threads, dtype).

A run of several methods prices each by its own draft source (``step_costs``: one measurement per
distinct source, shared by the methods drafting from it).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from statistics import linear_regression, median

import torch

from workbench.measure.cost import measure_draft_cost, measure_verify_cost
from workbench.cache_file import add_entry, read_entries
from workbench.cpu_choices import cpu_model, cpu_signature
from workbench.cost_model import Overhead, StepCost
from workbench.engine.drafts.base import DraftSource

CACHE_FILE = "step-costs.json"
# Few repeats: the measurement runs before the load starts, and a forward of 64 tokens is dear on
# a small CPU. Every power of two up to 64: the few-row products switch implementation between
# row counts (``cpu_choices``), so the curve has steps that a sparser grid would smooth over
# (docs/benchmarks.md, "Speculation under load"). Sizes between these are interpolated, larger
# ones (16 requests x 8 nodes = 128) extended along the last slope.
VERIFY_SIZES = (1, 2, 4, 8, 16, 32, 64)  # total tokens of a verify: batch x block
DRAFT_ROWS = (1, 2, 4, 8, 16, 64)  # rows of one draft forward: batch x topk
PREFIX = 128
REPEATS = 3  # timed calls per size in a round (their median), after one untimed
ROUNDS = 3  # the median of three: one round a busy moment slowed does not move it
TIMING = {"prefix_len": PREFIX, "repeats": REPEATS, "warmup": 1}
AGREE = 0.25  # (max - min) / median of a size's round medians, at most, for a cacheable verdict
# A draft forward of a few rows takes 3-5 ms on a 2-core CPU, and a millisecond of timer jitter is
# a quarter of it: its rounds also agree within this share of a one-token verify, what a decode
# step costs (a level priced a millisecond off moves a prediction by a few percent; the verify
# curve's own agreement is what tells a busy machine).
DRAFT_SLACK = 0.05
# Requests in the engine steps timed for the overhead, up to the 8 a load keeps in flight: a step
# of 8 is priced from a measurement, not from the line through 1 and 4 extended.
OVERHEAD_BATCHES = (1, 4, 8)
OVERHEAD_STEPS = 10  # timed steps per batch, kind and round, after untimed ones (the prefill, the draft's catch-up)
PATTERN = 16  # tokens of the block the overhead's prompts repeat (``overhead_prompts``)
OVERHEAD_SETTING = dict(num_steps=3, topk=2, num_draft_tokens=4)  # a small tree: what a CPU runs
LEVEL_SETTING = dict(num_steps=1, topk=1, num_draft_tokens=2)  # a chain of one: the per-level overhead against the tree
# The overhead: each step less its target forward by the engine's own clock and its draft forwards at
# the step's moment (``PaceProbe``); a batch's target forward over one sequence's pace kept apart
# (``StepCost.batched``); the prompts a repeated block, the line through every round's steps pooled
# per batch. Older entries: "paced, verified tokens, pooled" (the step less all its forwards at the
# probe's pace: a batch's own slowness in its overhead line), "paced", or none.
OVERHEAD_TIMING = "target by the engine's clock, batches' pace apart"
# Prompt tokens of the prefills timed (each prefill once a round): Spec-Bench's prompts run from
# about 40 to 770 tokens through the chat template; past 512 the last slope is read on.
PREFILL_LENGTHS = (32, 128, 512)
# The context term (``StepCost.kv``): forwards of KV_REQUESTS requests of n new tokens each after
# KV_LONG committed tokens each against after PREFIX, for each n of KV_TOKENS (a decode step, a
# chain's or a tree's verify, a batch's one sequence), KV_REPEATS of each in turn (their medians).
# One request of 1,024 tokens: the difference (896 tokens) is 4-20 ms on a 2-core EPYC, and its
# repeats agree better than four requests' of 512 (whose steps are priced per request alike: the
# attention runs request by request).
KV_REQUESTS = 1
KV_LONG = 1024
KV_TOKENS = (1, 2, 4, 8, 16, 32)
KV_REPEATS = 12


def step_cost_for(wb, source: DraftSource | None, cache_dir: Path | None = None, log=None,
                  target: StepCost | None = None) -> StepCost:
    """The step cost of ``wb``'s target with the draft ``source`` (None: a policy that never
    drafts), from the cache or measured now (module docstring). ``log``: one line per event
    (default: stderr). ``target``: a step cost of the same target measured in this run with another
    source: this one then takes its verify curve, plain decoding's overhead and the prefill, and
    times only what the source adds (draft forwards, speculative overhead, catch-up)."""
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    key = _cache_key(wb, source)
    path = Path(cache_dir) / CACHE_FILE if cache_dir is not None else _default_path()
    cached = read_entries(path).get(key)
    if _current(cached):
        return _with_target(_model(cached, source=f"cached in {CACHE_FILE}"), target)
    say(f"[cost] timing verify and draft forwards and engine steps on this machine ({ROUNDS} rounds, once, "
        "seconds)")
    t0 = time.perf_counter()
    rounds = []
    for _ in range(ROUNDS):
        if target is None:
            verify, draft = _measure(wb, source)
            prefill, catch_up = measure_prefill(wb, source)
        else:  # the target's part is the run's: the source's part timed against it
            verify = [tuple(p) for p in target.verify]
            draft = [] if source is None else source.draft_cost(Timers(wb, verify))
            catches_up = source is not None and source.needs.loaded  # else measure_prefill times no catch-up
            prefill = [tuple(p) for p in target.prefill]
            catch_up = measure_prefill(wb, source)[1] if catches_up else []
        steps = time_overhead_steps(wb, source, StepCost(verify, draft), plain_known=target is not None)
        rounds.append({"verify": verify, "draft": draft, "overhead_steps": steps, "prefill": prefill,
                       "catch_up": catch_up})
    kv = measure_kv(wb) if target is None else [list(p) for p in target.kv]
    say(f"[cost] measured in {time.perf_counter() - t0:.0f} s")
    plain = None if target is None else target.overhead
    # a batch's target forward is the target's: with a run's target part, its pace too
    batched = ([list(p) for p in target.batched] if target is not None and target.batched
               else forward_paces([r["overhead_steps"] for r in rounds]))
    batched_tokens = ([list(p) for p in target.batched_tokens] if target is not None and target.batched_tokens
                      else forward_paces_by_tokens([r["overhead_steps"] for r in rounds]))
    for r in rounds:  # each round's own lines, kept to show how far the rounds lie apart
        r["overhead"] = overhead_fields([r["overhead_steps"]], plain=plain)
        r["overhead_steps"] = {kind: [[b, [[round(ms, 3), None if f is None else round(f, 4), round(nodes, 3)]
                                           for ms, f, nodes in got]]
                                      for b, got in by_batch.items()]
                               for kind, by_batch in r["overhead_steps"].items()}
    verify, v_agree = _agreed([r["verify"] for r in rounds])
    draft, d_agree = _agreed([r["draft"] for r in rounds], slack_ms=DRAFT_SLACK * verify[0][1])
    verify_range = _ranges([r["verify"] for r in rounds]) if target is None else [list(r) for r in target.verify_range]
    entry = {"verify": verify, "draft": draft, "verify_range": verify_range,
             "draft_range": _ranges([r["draft"] for r in rounds]),
             "overhead": overhead_fields([r["overhead_steps"] for r in rounds], plain=plain),
             "overhead_batches": list(OVERHEAD_BATCHES),
             "prefill": _agreed([r["prefill"] for r in rounds])[0],
             "catch_up": _agreed([r["catch_up"] for r in rounds])[0],
             "overhead_timing": OVERHEAD_TIMING, "kv": kv, "prefix": PREFIX, "batched": batched,
             "batched_tokens": batched_tokens,
             "measured": measurement_label(wb), "cpu": cpu_signature(), "rounds": ROUNDS, "per_round": rounds,
             **({} if target is None else {"target_from": target.measured})}
    if not (v_agree and d_agree):
        say(f"[cost] the {ROUNDS} rounds differ by more than {AGREE:.0%} at some size (a busy machine?): "
            "their medians are used for this run, nothing cached, measured again next run")
        return _model(entry, source="measured, rounds disagreed")
    add_entry(path, key, value=entry, tag="[cost]", what="the step cost")
    return _model(entry, source="measured on this machine")


def _model(entry: dict, source: str) -> StepCost:
    return StepCost.from_dict({**entry, "source": source})


def _with_target(cost: StepCost, target: StepCost | None) -> StepCost:
    """``cost`` (a source's cached step cost) with ``target``'s part in place of its own where a
    run measured one: the verify curve, plain decoding's overhead and the prefill, so that plain
    decoding has one price in the run however each source's part was found."""
    if target is None:
        return cost
    points = dict(cost.overhead.points)
    points.pop("plain", None)
    if target.overhead.points_of("plain"):
        points["plain"] = target.overhead.points_of("plain")
    overhead = replace(cost.overhead, plain_per_step=target.overhead.plain_per_step,
                       plain_per_request=target.overhead.plain_per_request, points=tuple(points.items()))
    return replace(cost, verify=target.verify, verify_range=target.verify_range, prefill=target.prefill,
                   overhead=overhead, kv=target.kv, batched=target.batched or cost.batched,
                   batched_tokens=target.batched_tokens or cost.batched_tokens,
                   measured=f"{cost.measured}; its target part {target.measured}")


def measurement_label(wb) -> str:
    """Which measurement: the date and minute, the machine, threads and dtype (every figure that
    quotes it says so; two measurements of one day have two names)."""
    import datetime

    day = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    threads = torch.get_num_threads()
    return f"{day}, {cpu_model()}, {threads} thread{'s' if threads > 1 else ''}, {wb.dtype_name}"


def _ranges(rounds: list[list[tuple[int, float]]]) -> list[tuple[float, float]]:
    """Per size, the lowest and highest of the round medians."""
    return [(min(r[i][1] for r in rounds), max(r[i][1] for r in rounds)) for i in range(len(rounds[0]))]


def time_overhead_steps(wb, source: DraftSource | None, forwards: StepCost, prefix_len: int = PREFIX,
                        plain_known: bool = False) -> dict[str, dict[int, list[tuple[float, float | None]]]]:
    """One round of engine steps timed (module docstring), by kind and batch: ``"plain"`` steps
    (not when ``plain_known``: plain decoding's overhead is already measured in this run), and with
    a draft ``source`` speculative steps of ``OVERHEAD_SETTING`` (``"tree"``) and of
    ``LEVEL_SETTING`` (``"chain"``), each at ``OVERHEAD_BATCHES`` requests of ``prefix_len``-token
    prompts, ``OVERHEAD_STEPS`` (overhead ms, forward pace) each (``_step_overheads``);
    ``forwards`` prices the forwards (curves measured after the same prefix, without overhead)."""
    from workbench.engine.config import SpecConfig

    probe = PaceProbe(wb, forwards, prefix_len, tokens=max(OVERHEAD_BATCHES) * OVERHEAD_SETTING["num_draft_tokens"])
    specs = {} if plain_known else {"plain": SpecConfig("vanilla")}
    if source is not None:
        specs["tree"] = SpecConfig.from_knobs("eagle2", **OVERHEAD_SETTING, draft=source)
        specs["chain"] = SpecConfig.from_knobs("eagle2", **LEVEL_SETTING, draft=source)
    return {kind: {b: _step_overheads(wb, spec, batch=b, forwards=forwards, probe=probe, prefix_len=prefix_len)
                   for b in OVERHEAD_BATCHES} for kind, spec in specs.items()}


def _steps(by_batch) -> list[tuple[int, list]]:
    """(batch, timed steps) pairs of one kind, from ``time_overhead_steps``' dict or from JSON."""
    return [(int(b), got) for b, got in (by_batch.items() if isinstance(by_batch, dict) else by_batch)]


def _overhead_ms(step) -> float:
    """A timed step's overhead: the first of ``_step_overheads``' pair (a bare number as JSON keeps it)."""
    return float(step[0]) if isinstance(step, (list, tuple)) else float(step)


def overhead_points(rounds: list[dict]) -> dict[str, list[list[float]]]:
    """Each kind's ``[batch, ms]`` points: the median over every round's timed steps of that batch
    (``time_overhead_steps``' answers, or the same as JSON keeps them)."""
    pooled: dict[str, dict[int, list[float]]] = {}
    for steps in rounds:
        for kind, by_batch in steps.items():
            for b, got in _steps(by_batch):
                pooled.setdefault(kind, {}).setdefault(b, []).extend(_overhead_ms(x) for x in got)
    return {kind: [[b, round(median(got), 3)] for b, got in sorted(by_batch.items())] for kind, by_batch in pooled.items()}


def forward_paces(rounds: list[dict]) -> list[list[float]]:
    """``StepCost.batched``'s (requests, factor) points: per batch over one, the median over every
    round's timed steps of every kind of the step's target forward over one request's pace
    (``_step_overheads``' second figure)."""
    pooled: dict[int, list[float]] = {}
    for steps in rounds:
        for by_batch in steps.values():
            for b, got in _steps(by_batch):
                pooled.setdefault(b, []).extend(float(x[1]) for x in got
                                                if isinstance(x, (list, tuple)) and x[1] is not None)
    return [[b, round(median(f), 4)] for b, f in sorted(pooled.items()) if b > 1 and f]


def forward_paces_by_tokens(rounds: list[dict]) -> list[list[float]]:
    """``StepCost.batched_tokens``' (requests, tokens, factor) points: per batch over one and per
    new tokens a request (a step's verified tokens over its requests, rounded: 1 for plain steps,
    ``num_draft_tokens`` for a draft that fills its trees), the median over every round's timed
    steps of the step's target forward over one request's pace. Steps timed before their tokens
    were kept (two figures a step) count in none."""
    pooled: dict[tuple[int, int], list[float]] = {}
    for steps in rounds:
        for by_batch in steps.values():
            for b, got in _steps(by_batch):
                for x in got:
                    if isinstance(x, (list, tuple)) and len(x) > 2 and x[1] is not None and x[2]:
                        pooled.setdefault((b, max(1, round(float(x[2])))), []).append(float(x[1]))
    return [[b, t, round(median(f), 4)] for (b, t), f in sorted(pooled.items()) if b > 1 and f]


def overhead_fields(rounds: list[dict], plain: Overhead | None = None) -> dict[str, float]:
    """``Overhead``'s fields from the timed steps of one or more rounds: per kind, the
    least-squares line through ``overhead_points`` (ms per step, ms per request), the speculative
    one at the tree, and the difference between the tree's and the chain's lines per draft level.
    ``plain``: plain decoding's overhead, measured earlier in the run (its steps not timed here)."""
    points = overhead_points(rounds)
    if plain is not None:
        points["plain"] = [list(p) for p in plain.points_of("plain")]
    lines = {kind: _line(tuple(b for b, _ in pts), [ms for _, ms in pts]) for kind, pts in points.items() if pts}
    if plain is not None:
        lines["plain"] = (plain.plain_per_step, plain.plain_per_request)
    out = {**dict(zip(("plain_per_step", "plain_per_request"), lines["plain"])),
           "points": {kind: pts for kind, pts in points.items() if pts}}
    if "tree" not in lines:
        return {**out, "spec_per_step": 0.0, "spec_per_request": 0.0, "spec_levels": 0, "level_per_step": 0.0,
                "level_per_request": 0.0}
    levels = OVERHEAD_SETTING["num_steps"] - LEVEL_SETTING["num_steps"]
    per_level = [round((t - c) / levels, 3) for t, c in zip(lines["tree"], lines["chain"])]
    return {**out, **dict(zip(("spec_per_step", "spec_per_request"), lines["tree"])),
            "spec_levels": OVERHEAD_SETTING["num_steps"], **dict(zip(("level_per_step", "level_per_request"), per_level))}


def _line(xs: tuple[int, ...], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through the points, rounded to µs (one
    point: flat)."""
    if len(xs) < 2:
        return round(ys[0], 3), 0.0
    slope, intercept = linear_regression(xs, ys)
    return round(intercept, 3), round(slope, 3)


class PaceProbe:
    """A bare target forward timed beside an engine step (module docstring): a pool holding a
    ``prefix_len``-token prefix (filled at the first call), then one forward over n tokens after
    it a call, up to ``tokens``."""

    def __init__(self, wb, forwards: StepCost, prefix_len: int, tokens: int):
        self.wb, self.forwards, self.prefix_len, self.tokens = wb, forwards, prefix_len, tokens
        self.pool = None

    def pace(self, tokens: int) -> float:
        """A forward over ``tokens`` now, over what the curve says it costs (> 1: slower now)."""
        from workbench.measure.cost import case_samples, prefilled

        target = self.wb.target
        if self.pool is None:
            self.pool = prefilled(target, target.new_kv_pool, vocab=target.config.vocab_size,
                                  prefix_len=self.prefix_len, spare=self.tokens + 1, device=target.lm_head.weight.device)
        forward = lambda batch: target.logits(target(batch, self.pool.kv))  # noqa: E731
        ms = case_samples(self.pool, [(tokens, forward, None)], repeats=1, warmup=0)[0][0]
        return ms / self.forwards.verify_ms(tokens)


def _step_overheads(wb, spec, *, batch: int, forwards: StepCost, prefix_len: int,
                    probe: PaceProbe | None = None) -> list[tuple[float, float | None, float]]:
    """For each of ``OVERHEAD_STEPS`` engine steps of ``batch`` requests under ``spec``, three
    figures (module docstring): the step's **overhead**, its wall time less its target forward and
    logits by the engine's own phase clock (``timings.target_ms``) less its draft forwards on the
    curves (the extend at the tokens each request emitted in the step before, the levels) at the
    pace ``probe`` finds right after the step (None: the curves' pace); and, at a batch over one,
    its target forward's **pace**: that clock over what the curves and the context term say of the
    same forward (``StepCost.forward_ms`` at one request's pace: the curve at the tokens the step's
    trees held, every request's context) at the probe's pace (None at one request); and the new
    tokens each request brought to that forward (the trees' tokens over the requests: the pace by
    tokens, ``StepCost.batched_tokens``). Requests of
    ``prefix_len`` tokens (``overhead_prompts``), so the forwards see the curves' prefix; the
    prefill and the first speculative step (the draft's catch-up over the prompt) are not timed."""
    from workbench.engine.timings import target_ms

    prompts = overhead_prompts(wb.target.config.vocab_size, batch, prefix_len)
    engine = wb.engine(spec)
    engine.stop_ids = set()  # a random prompt may sample a stop token early: keep the batch whole
    engine.add_requests(prompts, 2 + (OVERHEAD_STEPS + 2) * spec.num_draft_tokens)
    untimed = 2 if spec.speculative else 1  # the prefill (and the catch-up)
    out, emitted = [], [1.0] * batch
    for k in range(untimed + OVERHEAD_STEPS):
        if engine.done:
            break
        tau = sum(emitted) / batch
        context = sum(len(r.prompt_ids) + len(r.output_ids) - 1 for r in engine.requests) / batch  # committed
        t0 = _synced(engine.device)
        engine.step()
        took = (_synced(engine.device) - t0) * 1e3
        if k >= untimed and len(engine.running) == batch:
            # the tokens each tree put to the target, root included: an n-gram tree the lookup filled
            # in part verifies fewer than num_draft_tokens, and is priced so
            nodes = [r.drafts_verified[-1] + 1 for r in engine.requests] if spec.speculative else [1] * batch
            pace = probe.pace(sum(nodes)) if probe is not None else 1.0
            target = target_ms(engine.last_phases_ms)
            priced = forwards.parts(spec, batch, tau, nodes=sum(nodes) / batch if spec.speculative else None)
            bare = replace(forwards, batched=()).forward_ms(batch, sum(nodes) / batch, context) * pace
            out.append((took - target - priced.draft_ms * pace, target / bare if batch > 1 and bare > 0 else None,
                        sum(nodes) / batch))
        emitted = [r.accept_lengths[-1] if r.accept_lengths else 1 for r in engine.requests]
    if not out:
        raise RuntimeError(f"no engine step of {spec.name} at {batch} requests could be timed")
    return out


def overhead_prompts(vocab: int, batch: int, prefix_len: int) -> list[list[int]]:
    """``batch`` prompts of ``prefix_len`` tokens for the overhead's steps: each a random block of
    ``PATTERN`` tokens repeated, so that a lookup draft (the n-gram source) finds continuations and
    fills its trees as on real text (on random tokens it matched nothing and verified the root
    alone), and a model continues the pattern; a different block for each request."""
    gen = torch.Generator().manual_seed(batch)
    out = []
    for _ in range(batch):
        block = torch.randint(0, vocab, (PATTERN,), generator=gen).tolist()
        out.append((block * (prefix_len // PATTERN + 1))[:prefix_len])
    return out


def measure_kv(wb) -> list[list[float]]:
    """(new tokens a request, ms) points of what a step spends for each committed token a request's
    attention reads (``StepCost.kv``): for each n of ``KV_TOKENS``, one forward (and its logits) of
    ``KV_REQUESTS`` requests of n new tokens each after ``KV_LONG`` committed random tokens each,
    against the same after their last ``PREFIX`` (the same keys and values, fewer of them; the
    new tokens' slots follow the committed ones, so both read their context as one ascending run
    of slots, as a lone request's attention does in the engine: ``attention/sdpa.py``,
    ``contiguous_run``; against the first ``PREFIX``, the short forward gathered its keys where
    the long one read a view, and the difference, a gather's cost taken off, priced the context
    too cheap), every
    (n, context) pair in turn ``KV_REPEATS`` times after one untimed round; each n's medians'
    difference over the tokens between. Never below 0, nor below a smaller n's (two noisy times
    can say so; more new tokens read the same keys no fewer times). Empty where the model's
    context is too short to tell."""
    from workbench.attention.batch import extend_batch
    from workbench.kv import SlotAllocator
    from workbench.measure.cost import requests_forward_ms
    from workbench.timing import interleaved

    target = wb.target
    device = target.lm_head.weight.device
    vocab = target.config.vocab_size
    top = max(KV_TOKENS)
    longest = min(KV_LONG, target.config.max_position_embeddings - top)  # a small model's context may be shorter
    if longest <= PREFIX:
        return []
    alloc = SlotAllocator(KV_REQUESTS * (longest + top))
    kv = target.new_kv_pool(KV_REQUESTS * (longest + top))
    gen = torch.Generator().manual_seed(longest)
    committed = []
    for _ in range(KV_REQUESTS):
        slots = alloc.alloc(longest)
        tokens = torch.randint(0, vocab, (longest,), generator=gen).tolist()
        target(extend_batch(tokens=[tokens], prefix_slots=[[]], new_slots=[slots], device=device), kv)
        committed.append(slots)

    def forward(n: int, context: int):
        return lambda: requests_forward_ms(target, kv, alloc, n=n, prefixes=[c[len(c) - context:] for c in committed],
                                           device=device)

    cases = {(n, c): forward(n, c) for n in KV_TOKENS for c in (PREFIX, longest)}
    times = interleaved(cases, KV_REPEATS, 1)
    points, floor = [], 0.0
    for n in KV_TOKENS:
        floor = max(floor, (median(times[(n, longest)]) - median(times[(n, PREFIX)])) / (KV_REQUESTS * (longest - PREFIX)))
        points.append([n, round(floor, 6)])
    return points


def measure_prefill(wb, source: DraftSource | None) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """One round of (prompt tokens, ms) points: the engine's prefill step of one request of each
    of ``PREFILL_LENGTHS`` random tokens (the lengths that fit the model's context), and, where
    ``source`` drafts with a forward over the prompt (``Needs.loaded``: a head or a draft model),
    the draft extend of the first speculative step after it, which runs every prompt row (else
    no catch-up points), under ``OVERHEAD_SETTING``. No points where no length fits the context:
    the prefill is then priced 0, and the report says so."""
    from workbench.engine.config import SpecConfig

    catches_up = source is not None and source.needs.loaded
    spec = SpecConfig.from_knobs("eagle2", **OVERHEAD_SETTING, draft=source) if catches_up else SpecConfig("vanilla")
    new_tokens = 2 + spec.num_draft_tokens  # room for the first speculative step
    room = wb.target.config.max_position_embeddings - new_tokens - spec.num_draft_tokens
    vocab = wb.target.config.vocab_size
    prefill, catch_up = [], []
    for n in [n for n in PREFILL_LENGTHS if n <= room]:
        engine = wb.engine(spec)
        engine.stop_ids = set()  # a random prompt may sample a stop token at once
        engine.add_requests([torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(n)).tolist()],
                            new_tokens)
        engine.step()  # the prefill: its step, admission included, is the profile's "prefill"
        prefill.append((n, round(engine.profile.settings["prefill"].wall_ms, 3)))
        if catches_up:
            engine.step()  # the first speculative step: its extend runs the n pending pairs
            step = next(t for setting, t in engine.profile.settings.items() if setting != "prefill")
            catch_up.append((n, round(step.phases_ms["draft_extend_ms"], 3)))
    return prefill, catch_up


def _synced(device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def draft_of(spec) -> DraftSource | None:
    """The draft source whose step cost prices ``spec`` (a ``SpecConfig``): its draft when it
    speculates, None for plain decoding."""
    return spec.draft if spec.speculative else None


def step_costs(wb, drafts: dict[str, DraftSource | None], *, known: dict | None = None,
               unpriced: dict[str, str] | None = None, cache_dir: Path | None = None, log=None) -> dict[str, StepCost]:
    """A run's methods, each priced by its own draft source: ``drafts`` maps a method's name to the
    source it drafts from (``draft_of``; None: it never drafts); the answer maps the name to
    ``step_cost_for`` that source, read or measured once per distinct source. Every source after
    the first is timed against the first's verify curve, plain decoding's overhead and prefill
    (``step_cost_for``'s ``target``), so plain decoding has one price in the run; a method that
    never drafts takes any step cost of the run. ``known``: the run's step costs by source, read
    and filled in (no source measured twice). ``unpriced``: where given, a source that cannot be
    measured leaves its methods out, each name kept here with the reason; else the error is raised."""
    known = {} if known is None else known
    failed: dict = {}
    sources = list(dict.fromkeys(drafts.values()))  # distinct, in the methods' order; plain decoding last
    for source in sorted(sources, key=lambda s: s is None):
        if source in known or (source is None and known):
            continue
        try:  # every source after the first timed against the first's target part
            known[source] = step_cost_for(wb, source, cache_dir=cache_dir, log=log,
                                          target=next(iter(known.values()), None))
        except (ValueError, RuntimeError) as err:  # UserError is a ValueError
            if unpriced is None:
                raise
            failed[source] = str(err)
    plain = known.get(None) or next(iter(known.values()), None)
    out = {}
    for name, source in drafts.items():
        if source in failed:
            unpriced[name] = failed[source]
        else:
            out[name] = plain if source is None else known[source]
    return out


def priced_by(drafts: dict[str, DraftSource | None], costs: dict[str, StepCost]) -> dict[str, str]:
    """Which measurement priced each source of a run, by the source's name ("no draft" for plain
    decoding): ``step_costs``' ``drafts`` and answer, as a report quotes them (the date, CPU,
    threads and dtype; read from the cache or measured)."""
    return {"no draft" if source is None else source.name: f"{costs[name].measured or 'undated'} ({costs[name].source})"
            for name, source in drafts.items() if name in costs}


def policy_costs(wb, policies, *, known: dict | None = None, log=None) -> dict[str, StepCost]:
    """The step cost each policy that ``needs_cost`` (``NamedPolicy``) weighs by, by name: its own
    draft source's (``step_costs``); empty when none needs one."""
    return step_costs(wb, {p.name: p.draft for p in policies if p.needs_cost}, known=known, log=log)


def _measure(wb, source: DraftSource | None) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """One round: (verify points, draft points), each (size, median ms)."""
    graphs = bool(wb.cuda_graphs)
    rows = measure_verify_cost(wb.target, VERIFY_SIZES, **TIMING, cuda_graphs=graphs) \
        or measure_verify_cost(wb.target, VERIFY_SIZES, **TIMING)
    verify = [(r["tokens"], r["ms"]) for r in rows]
    return verify, [] if source is None else source.draft_cost(Timers(wb, verify))  # no draft: no draft forward


class Timers:
    """What a draft source may time for its ``DraftSource.draft_cost``: (rows, ms) points."""

    def __init__(self, wb, verify: list[tuple[int, float]]):
        self.wb, self.verify, self.num_layers = wb, verify, wb.target.config.num_layers

    def head(self) -> list[tuple[int, float]]:
        wb = self.wb
        got = measure_draft_cost(wb.target, wb.draft, rows=DRAFT_ROWS, **TIMING, cuda_graphs=bool(wb.cuda_graphs)) \
            or measure_draft_cost(wb.target, wb.draft, rows=DRAFT_ROWS, **TIMING)
        return [(r["rows"], r["ms"]) for r in got]

    def model(self) -> list[tuple[int, float]]:
        return [(r["tokens"], r["ms"]) for r in measure_verify_cost(self.wb.draft, DRAFT_ROWS, **TIMING)]


def _readable(cached) -> bool:
    """Whether a cache entry's curves were measured at today's sizes, with an overhead of today's
    meaning (``OVERHEAD_TIMING``: before, it held a batch's slower forward, which the model now
    prices apart, ``StepCost.batched``, and would price twice); one from a sparser grid, or
    unreadable, is not."""
    if not isinstance(cached, dict):
        return False
    try:
        verify = [int(n) for n, _ in cached["verify"]]
        draft = [int(n) for n, _ in cached["draft"]]
    except (KeyError, TypeError, ValueError):
        return False
    # the draft at DRAFT_ROWS when timed, at the verify sizes when read off them (exit:N), none without a forward
    return (verify == list(VERIFY_SIZES) and draft in ([], list(DRAFT_ROWS), list(VERIFY_SIZES)) and "overhead" in cached
            and cached.get("overhead_timing") == OVERHEAD_TIMING)


def _current(cached) -> bool:
    """Whether a cache entry was measured as today's code measures: ``_readable``, with the
    overhead through today's batches, timed against a bare forward beside each step
    (``OVERHEAD_TIMING``), and the prefill timed at today's lengths (else it is measured again)."""
    if not _readable(cached):
        return False
    try:
        prefill = [int(n) for n, _ in cached["prefill"]]
    except (KeyError, TypeError, ValueError):
        return False
    return (cached.get("overhead_batches") == list(OVERHEAD_BATCHES) and set(prefill) <= set(PREFILL_LENGTHS)
            and "spec_levels" in cached["overhead"]  # the per-level overhead timed too
            and "kv" in cached  # the context term per new tokens
            and "batched_tokens" in cached)  # a batch's pace by the tokens each request brings


def _agreed(rounds: list[list[tuple[int, float]]], slack_ms: float = 0.0) -> tuple[list[tuple[int, float]], bool]:
    """Each size's median over the rounds, and whether the rounds agree: the smallest size's
    within AGREE of its median (or within ``slack_ms`` of each other, ``DRAFT_SLACK``), and every
    other size so too, or within AGREE once each round's own smallest size is taken out (its ms over
    that round's smallest: the curve's shape, as the paired reading builds it). A round a minute
    apart from the others can run the machine a fifth slower at every size, which is more
    absolute ms at the dear ones: a one-token verify of 32.7, 40.3 and 34.6 ms in three rounds
    (within 25 %) beside a 64-token one of 181, 237 and 217 ms (31 % apart) is one round slower
    throughout, its ratios 5.5, 5.9 and 6.3 (13 % apart) the same curve (the case
    ``tests/test_bench_load.py`` checks; one measurement on the 2-core AVX-512 EPYC, 2 threads,
    read off its rounds by a diagnostic run, took these times)."""
    out, agree = [], True
    base = [r[0][1] for r in rounds] if rounds and rounds[0] else []
    for i, (n, _) in enumerate(rounds[0]):
        ms = [r[i][1] for r in rounds]
        mid = median(ms)
        ok = mid > 0 and max(ms) - min(ms) <= max(AGREE * mid, slack_ms)
        if not ok and i > 0 and min(base) > 0:
            shape = [m / b for m, b in zip(ms, base)]
            ok = max(shape) - min(shape) <= AGREE * median(shape)
        agree &= ok
        out.append((n, round(mid, 3)))
    return out, agree


def _linear(wb) -> str:
    """The few-row linear paths the curves were timed with (a new choice times them again)."""
    order = getattr(wb, "linear_order", None)
    if order is None:
        return "linear plain"
    # oneDNN runs q/k/v and gate/up as one product each (models.linear.FusedPack): not the cost of before
    return "linear " + ("/".join(order.paths) or "plain") + (" fused" if order.uses_onednn else "")


def _cache_key(wb, source: DraftSource | None) -> str:
    c = wb.target.config
    device = next(wb.target.parameters()).device
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_signature()
    draft = "no draft" if source is None else source.name
    if source is not None and source.needs.loaded and wb.draft is not None:
        draft += f" {sum(p.numel() for p in wb.draft.parameters())} params"
    return (f"{where} | torch {torch.__version__} | {torch.get_num_threads()} threads | {wb.dtype_name} | "
            f"target {c.num_layers}x{c.hidden_size} vocab {c.vocab_size} | {draft} | {_linear(wb)}"
            f"{' | cuda graphs' if wb.cuda_graphs else ''}")


def _default_path() -> Path:
    from workbench.store import default_cache_dir

    return default_cache_dir() / CACHE_FILE
