"""The ``auto`` policy: at each decode step, the candidate with the most expected tokens per second.

Candidates are plain decoding (``off``, always one) and a few speculative settings sharing one
draft source (``AUTO_CANDIDATES`` by default). For a running batch of B requests, a candidate's
score is ``expected tokens per step / step cost (ms)``.

**Expected tokens per step**, summed over the running requests: one per request for plain
decoding; under a speculative setting, the request's running mean of accepted lengths
(``Request.accept_lengths``), shrunk towards the pooled mean of every request under that setting
(a new request has no history), itself shrunk towards the prior ``prior_tokens``: each tree level
accepted with chance ``PRIOR_ACCEPT``, ``1 + a + a^2 + ...``. The prior is a little above what the
shipped head reaches, so an untried setting is tried, but not so far above that it is retried
where it cannot win (docs/benchmarks.md, "Speculation under load"). Each prior weighs
``prior_steps`` steps: one unlucky step (a whole number from 1 to depth + 1) does not bury a
setting. No request is expected to emit more than it has left (``max_new_tokens``).

**Exploration.** A setting not chosen gathers no evidence, so its counts shrink each step it does
not run: a request's own by ``1 / horizon`` (after about ``horizon`` steps they are back near the
pooled mean), the pooled counts, the run's record of the setting, by ``1 / memory`` (``memory`` =
256 steps, 16 horizons), so the estimate goes back towards the prior and the setting runs again
if the prior could win: a setting tried and found behind is tried again after a few hundred steps,
not after a few dozen. The pooled counts used to fade by ``1 / horizon`` too, and the prior brought
the small tree back every 20-30 steps at one request: in a load run on the AVX-512 EPYC
(docs/bench/archive/load-cpu-avx512-2026-12-07-1217.md) ``auto`` ran ``eagle2:4/3/2`` or
``eagle2:8/5/4`` on 32 to 61 of its 116-124 steps a turn at one request (the tree of 4, run
alone, emitted 1.57 tokens a step against the chain of one's 1.36, at a step the model priced
48.8 ms against 35.8), and measured 0.82-0.97x ``linear:1``'s tokens/s, paired within each round. A setting that loses on cost even at its prior is
never tried: exploring costs steps.

**Step cost** is the project's one cost model (``workbench/cost_model.py``, ``StepCost``): a
target verify of B x N tokens (1 for plain decoding; under a speculative setting the tokens a
request's verify held on average in the steps it ran, root included, ``num_draft_tokens`` before
any was seen and pulled back to it as the setting idles, like the accepted lengths: a draft that
fills its tree in part, as the n-gram lookup does where few continuations match, verifies less), the draft's
extend over the tokens each request is expected to emit and its later levels of B x ``topk``
rows, the keys and values of the running requests' committed tokens (the cost model's context
term: the same for every setting at one batch, so a longer context favours the setting that emits
more tokens a step), and the step's measured overhead outside the forwards. The policy has no clock of its own
for the curves: ``workbench/measure/step_cost.py`` measures them once per machine and caches them;
tests pass made-up curves.

**The steps' own clock** (``correct``, on by default). The curves time the forwards alone; a
whole step also samples, walks the tree, commits KV and runs Python per request, a speculative
step more than a plain one. So ``auto`` times each step it chose (``choose`` to ``observe``) and
splits its time over the curves' prediction into two factors:

- the **machine's pace** ``pace``, shared by every setting: a fast moving average
  (``PACE_WEIGHT`` for the newest step). A shared machine slowing down (by 10-20 % on the 2-core
  machines) slows every setting alike and must not count against the one that ran meanwhile;
- each setting's **overhead** ``overhead(spec)``: its time over the prediction at the pace of the
  moment, a slow moving average (``OVERHEAD_WEIGHT``). An untimed setting is taken at the curves'
  word (1, the cheapest a step can be), so it is tried if that could win: that is how plain
  decoding gets timed while a tree looks better on paper. A setting's first step sets its
  overhead and leaves the pace alone, with one exception: the run's first timed step, where it
  took less than the curves' word, sets the pace instead (its setting's overhead 1). A step
  cannot be cheaper than its curves at their pace (they hold its measured overhead), so a
  faster step means the machine runs faster than when they were timed. Taken as that setting's
  overhead, a step cost measured in a slow spell (a decode step 50.0 ms, against 31.3 ms in the
  one of docs/bench/archive/load-cpu-avx512-2026-12-07-2132.md) made the first setting look
  cheaper than every untimed one at the curves' word, so plain decoding was never tried:
  ``auto`` ran the chain of one on every step at 8 in flight
  (docs/bench/archive/load-cpu-avx512-2026-12-07-2254.md), where that step cost itself, read at
  a batch of 8, puts plain decoding ahead.

Only the ratio of two overheads matters, and only steps close in time compare them at one pace;
a slowdown goes almost all into the pace (a machine turning twice as slow moves the running
setting's overhead by under 5 %, ``tests/test_policy_auto.py``). A setting's predicted cost is
the curves' times its overhead times the pace. ``correct=False`` takes the curves as they are.

An idle setting's overhead is stale evidence, like its accepted lengths: while another timed
setting runs, it is pulled by ``1 / horizon`` a step towards the running one's, that is towards
the curves' word on how the two compare (their measured overhead outside the forwards is in the
curves). Without that, one step timed in a slow instant (a setting's first: its time is one
sample) kept a setting unrun for good: in a run of 8 requests, plain decoding's first step took
2.1x the curves, a chain's 1.9x, and the chain ran all but a few steps after it, though the
curves put plain decoding 10 % ahead there and a load record measured it 12 % ahead
(docs/benchmarks.md, "Speculation under load", and the record named under "Staying").

A request's first speculative step, which also runs its whole prompt through the draft (more than
``CATCH_UP`` pending pairs), is not timed: every speculative setting pays it once per request,
and charged to the one that came first it would keep that one looking dear and unrun (what it
costs on a CPU: docs/benchmarks.md, "Speculation under load"). A catch-up over the few pairs plain
steps left behind is timed: it is what switching back from plain decoding costs.

**What speculating owes.** A request's first speculative step also runs its whole prompt
through the draft, and one after plain steps the tokens they decoded: every speculative setting
of the draft pays it once, plain decoding never, so only the choice between them weighs it.
Speculating starts a debt that the following steps repay at a profit only if enough of them
follow. So a speculative setting is charged, beside its step, what the catch-up each running
request still owes costs (``owed_ms``: beyond a step's own extend), spread over the steps the
request has left: the step cost of docs/bench/archive/load-cpu-avx512-2026-12-08-0108.md prices the head's extend over
the run's 769-token prompt at 47 ms beyond a step's, 1.2 ms over each of a chain's 39 steps to
write 48 tokens there, where it prices the chain's step at 40.3 ms against plain decoding's 35.4.
A short prompt owes little, and a request that speculated the step before owes nothing.

**Staying.** The last step's setting stays unless another, once that one was timed, promises more
than ``stay / sqrt(B)`` more tokens per second (10 % at one request, 3.5 % at 8): on a 2-core CPU
the chain of one, the small tree and plain decoding are within 20 % of each other at one request
(docs/bench/load-cpu.md), and one request's estimate moves by up to 10 % from one step to the
next, so a flip on noise costs a step and wins nothing. What moves is the tokens a step is
expected to emit (the pace scales every setting alike, the overheads move by 1/16 a step), a sum
over B requests whose own estimates move independently: it moves by about ``1 / sqrt(B)`` as
much. In a diagnostic run on the AVX2-only EPYC (docs/benchmarks.md, "Speculation under load")
the running setting's expected tokens moved by a median 3-3.5 % a step at one request (90th
percentile 9-10 %) and 1.0 % at 8, a third as much. A margin held at 10 % for a batch of 8
kept ``auto`` on a chain that the cost model put 7-10 % behind plain decoding, and measured 12 %
behind (docs/bench/archive/load-cpu-avx2-2026-12-07-0102.md).

**Plain decoding at a near-tie.** A speculative setting runs only where it promises more than
``plain`` (10 %) over plain decoding, whichever setting ran last, at every batch: the margin
between two settings shrinks with the batch because it guards against noise, this one does not,
because what it guards against grows with the batch. Speculation costs a batch what no step's
price holds: its requests finish at steps of their own (each accepts its own drafts), so a closed
loop admits their successors in more prefill steps that share less and drains a ragged tail of
small batches. In the load run of docs/bench/archive/load-cpu-avx512-2026-12-07-2310.md (its
records beside it) the chain of one at 8 in flight gave each running request 1.40 tokens a step in
104.6 ms, plain decoding 1 in 73.0 (the median round's steps): 2 % apart, a tie step for step. But
the chain admitted its 16 requests in 7 prefill steps against plain decoding's 3 and ran at a mean
batch of 6.72 against 7.62, and ``auto``, taking the chain on such ties, was 0.91x ``off`` in
tokens/s. With the margin at ``stay / sqrt(B)`` (3.5 % at 8), the next run
(docs/bench/archive/load-cpu-avx512-2026-12-07-2326.md) still ran a speculative setting on 10-32 %
of its steps at 8 in flight, enough to put its requests out of step: 6-7 prefill steps against
``off``'s 3, and 0.92x ``off``'s tokens/s by median.

Every ``Choice`` says why, with numbers: ``eagle2:4/3/2: 2.1 tok/step / 61 ms = 34 tok/s > off
1.0 tok/step / 40 ms = 25 tok/s``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from workbench.cost_model import StepCost
from workbench.engine.config import SpecConfig
from workbench.engine.policy.base import OFF, Choice, draft_source_of, parse_setting, setting_label
from workbench.engine.request import Request

AUTO_CANDIDATES = "linear:1,eagle2:4/3/2,eagle2:8/5/4"  # bare ``auto``: small trees, cheap enough for a CPU
PRIOR_ACCEPT = 0.5  # the prior's chance that the walk goes one level deeper
PACE_WEIGHT = 0.5  # the newest step's weight in the machine's pace: the last two or three steps
OVERHEAD_WEIGHT = 1 / 16  # the newest step's weight in its setting's overhead, after the first
CATCH_UP = 16  # pending draft pairs past which a speculative step is taken to run a prompt through the draft


def committed(batch: list[Request]) -> float:
    """The committed tokens a running request holds, on average: what its attention reads each
    step (the cost model's ``context``)."""
    return sum(len(r.prompt_ids) + len(r.output_ids) for r in batch) / len(batch)


def prior_tokens(spec: SpecConfig) -> float:
    """Tokens a step is expected to emit under ``spec`` before anything was seen: the bonus token
    and each level the walk can reach (``num_steps``, at most ``num_draft_tokens - 1`` drafts)
    accepted with chance ``PRIOR_ACCEPT`` given the one above."""
    levels = min(spec.num_steps, spec.num_draft_tokens - 1)
    return 1 + sum(PRIOR_ACCEPT ** i for i in range(1, levels + 1))


@dataclass
class Evidence:
    """Accepted lengths seen under one setting, faded (see the module docstring); for the steps'
    clock, ``tokens`` is the ms the steps took and ``steps`` the ms the curves predicted."""

    tokens: float = 0.0
    steps: float = 0.0

    def mean(self, prior: float, weight: float) -> float:
        return (prior * weight + self.tokens) / (weight + self.steps)

    def fade(self, keep: float) -> None:
        self.tokens, self.steps = self.tokens * keep, self.steps * keep


@dataclass
class Auto:
    """Off or one of ``candidates`` at each step, by expected tokens per second (module docstring).

    ``cost`` must be set before the first ``choose`` (the load benchmark and the app measure
    it, ``measure/step_cost.py``; tests give one). ``prior_steps``: the weight, in steps, of each
    estimate's prior; ``horizon``: steps over which a request's own evidence of a setting fades
    while the setting is idle; ``memory``: the same for the evidence pooled over the requests;
    ``correct``: scale the curves by the steps' own clock; ``stay``: how much more another
    setting must promise than the last step's (once that one was timed) to replace it, at one
    request (``stay / sqrt(B)`` for B);
    ``plain``: how much more a speculative setting must promise than plain decoding to run, at
    every batch ("Plain decoding at a near-tie");
    ``clock``: seconds, monotonic."""

    candidates: tuple[SpecConfig, ...]
    cost: StepCost | None = None
    prior_steps: float = 4.0
    horizon: int = 16
    memory: int = 256
    correct: bool = True
    stay: float = 0.1
    plain: float = 0.1
    clock: object = field(default=time.perf_counter, repr=False)
    name = "auto"
    grammar = "auto[:NAME,NAME,...]"
    about = f"off or one of its settings by expected tokens/s from this machine's step cost; bare: {AUTO_CANDIDATES}"
    default = AUTO_CANDIDATES
    needs_cost = True  # ``cost`` is set before the first step (grammar.NamedPolicy.build)

    @classmethod
    def from_text(cls, arg: str, spec: SpecConfig | None = None) -> Auto:
        """Settings separated by commas (empty: ``AUTO_CANDIDATES``); ``off`` among them is
        allowed and changes nothing: off is always a candidate."""
        names = [n.strip() for n in (arg or AUTO_CANDIDATES).split(",")]
        return cls(tuple(parse_setting(n) for n in names if n))

    def __post_init__(self) -> None:
        self.candidates = tuple(dict.fromkeys(s for s in self.candidates if s.speculative))
        if not self.candidates:
            raise ValueError("auto needs one or more speculative settings to weigh against off "
                             "(off is always a candidate)")
        draft_source_of(self.candidates)
        if self.stay < 0 or self.plain < 0:
            raise ValueError(f"the margins stay and plain are shares (0.1: 10 %) and cannot be negative, got "
                             f"{self.stay}, {self.plain}")
        if self.prior_steps <= 0 or self.horizon < 1 or self.memory < self.horizon:
            raise ValueError(f"prior_steps must be > 0, horizon >= 1 and memory >= horizon, got {self.prior_steps}, "
                             f"{self.horizon}, {self.memory}")
        self.pooled: dict[SpecConfig, Evidence] = {s: Evidence() for s in self.candidates}
        self.verified: dict[SpecConfig, Evidence] = {s: Evidence() for s in self.candidates}  # tokens per verify
        self.mine: dict[int, dict[SpecConfig, Evidence]] = {}  # request id -> its own evidence
        self.overheads: dict[SpecConfig, float] = {}  # setting -> ms its steps take at pace 1 / ms predicted
        self.pace = 1.0  # the machine's pace: ms a step takes / ms its setting's overhead and the curves say
        self._started: tuple[SpecConfig, int, float, float] | None = None  # the step under way: setting, batch, predicted ms, clock
        self.last: SpecConfig | None = None  # the setting of the step before

    def settings(self) -> tuple[SpecConfig, ...]:
        return (OFF, *self.candidates)

    def expected_tokens(self, spec: SpecConfig, batch: list[Request]) -> float:
        """Tokens the batch is expected to emit in one step under ``spec``."""
        if not spec.speculative:
            return float(len(batch))
        pooled = self.pooled[spec].mean(prior_tokens(spec), self.prior_steps)
        total = 0.0
        for r in batch:
            own = self.mine.get(r.rid, {}).get(spec, Evidence()).mean(pooled, self.prior_steps)
            total += min(own, max(1, r.max_new_tokens - len(r.output_ids)))
        return total

    def expected_nodes(self, spec: SpecConfig) -> float | None:
        """Tokens a request's verify is expected to hold under ``spec``, root included (None: plain
        decoding, one): the pooled mean of what its steps verified, shrunk towards
        ``num_draft_tokens`` (module docstring)."""
        if not spec.speculative:
            return None
        return self.verified[spec].mean(float(spec.num_draft_tokens), self.prior_steps)

    def rates(self, batch: list[Request]) -> list[tuple[SpecConfig, float, float]]:
        """(setting, expected tokens per step, step ms) for every candidate, off first; a
        speculative setting's ms hold the catch-up its requests owe the draft, each a step's
        share (``owed_ms``)."""
        if self.cost is None:
            raise ValueError("auto weighs each setting by its measured step cost, and none was given: measure one "
                             "(workbench.measure.step_cost.step_cost_for) or pass Auto(cost=StepCost(...))")
        out, context = [], committed(batch)
        for s in self.settings():
            tokens = self.expected_tokens(s, batch)
            tau = tokens / len(batch)
            owed = self.owed_ms(batch, tau) if s.speculative else 0.0
            out.append((s, tokens, self.step_ms(s, len(batch), tau, context) + owed))
        return out

    def owed_ms(self, batch: list[Request], tau: float) -> float:
        """What the draft's catch-up the running requests owe costs a speculative step, at the
        machine's pace: each request's extend over its pending pairs beyond a step's own over
        ``tau`` rows (the draft curve over up to ``CATCH_UP`` pairs: the tokens plain steps decoded
        since it last speculated; ``StepCost.catch_up_ms`` over more: a newcomer's prompt),
        spread over the steps it has left at ``tau`` tokens a step (module docstring, "What
        speculating owes")."""
        owed = 0.0
        for r in batch:
            pending = len(r.pending_tokens)
            extra = (self.cost.catch_up_ms(pending, tau) if pending > CATCH_UP
                     else max(0.0, self.cost.draft_ms(pending) - self.cost.draft_ms(max(1.0, tau))))
            if extra:
                owed += extra / max(1.0, (r.max_new_tokens - len(r.output_ids)) / max(1.0, tau))
        return owed * self.pace

    def overhead(self, spec: SpecConfig) -> float:
        """What ``spec``'s steps took over what the curves predicted, at the machine's pace of
        the moment; 1 (the curves' word) until a step of it was timed, or when ``correct`` is off."""
        return self.overheads.get(spec, 1.0)

    def ratio(self, spec: SpecConfig) -> float:
        """What a step of ``spec`` is expected to take over what the curves predict: its overhead
        times the machine's pace (module docstring)."""
        return self.overhead(spec) * self.pace

    def step_ms(self, spec: SpecConfig, batch: int, tau: float | None = None, context: float | None = None) -> float:
        """What a step of ``batch`` requests under ``spec`` is expected to take when each emits
        ``tau`` tokens, each request holding ``context`` committed tokens (a mean; None: the
        curves'): the cost model's prediction, scaled by the steps' own clock (module docstring)."""
        return self.cost.step_ms(spec, batch, tau, self.expected_nodes(spec), context=context) * self.ratio(spec)

    def stay_margin(self, batch: int) -> float:
        """How much more than the last step's setting another must promise for ``batch`` running
        requests to replace it: ``stay / sqrt(batch)`` (module docstring, "Staying")."""
        return self.stay / math.sqrt(max(1, batch))

    def choose(self, batch: list[Request]) -> Choice:
        scored = self.rates(batch)
        rate = lambda x: x[1] / x[2]  # noqa: E731
        best = max(scored, key=rate)  # ties go to the first: off
        said = lambda s, tok, ms: f"{setting_label(s)} {tok:.1f} tok/step / {ms:.0f} ms = {tok / ms * 1e3:.0f} tok/s"  # noqa: E731
        runner = max((x for x in scored if x is not best), key=rate)
        last = next((x for x in scored if x[0] == self.last and x is not best), None)
        margin = self.stay_margin(len(batch))
        if last is not None and self.last in self.overheads and rate(best) < (1 + margin) * rate(last):
            best, runner, why = last, best, f" (stays: within {margin:.1%})"  # a flip on noise costs more than it wins
        else:
            why = ""
        off = scored[0]
        if best[0].speculative and rate(best) < (1 + self.plain) * rate(off):  # a near-tie goes to plain decoding
            best, runner, why = off, best, f" (plain: speculation within {self.plain:.1%})"
        self.last = best[0]
        if self.correct:  # a step that runs the draft over a newcomer's prompt is not timed (docstring)
            prompt = best[0].speculative and any(len(r.pending_tokens) > CATCH_UP for r in batch)
            predicted = self.cost.step_ms(best[0], len(batch), best[1] / len(batch), self.expected_nodes(best[0]),
                                          context=committed(batch))  # before the clock's scaling
            self._started = None if prompt else (best[0], len(batch), predicted, self.clock())
        return Choice(self.name, best[0], f"{said(*best)}{' <' if why else ' >'} {said(*runner)}{why}")

    def observe(self, choice: Choice, batch: list[Request]) -> None:
        keep, keep_pooled = 1 - 1 / self.horizon, 1 - 1 / self.memory
        if self._started is not None:
            spec, size, predicted, started = self._started
            self._started = None
            if spec == choice.spec and size == len(batch):
                self._time(spec, (self.clock() - started) * 1e3, predicted)
        running = {r.rid for r in batch}
        self.mine = {rid: ev for rid, ev in self.mine.items() if rid in running}  # the finished leave
        if choice.spec in self.overheads:  # the idle settings' overheads drift to the curves' word (docstring)
            now = self.overheads[choice.spec]
            for spec in self.overheads:
                if spec != choice.spec:
                    self.overheads[spec] += (now - self.overheads[spec]) / self.horizon
        for spec in self.candidates:
            if spec == choice.spec:
                continue
            self.pooled[spec].fade(keep_pooled)
            self.verified[spec].fade(keep_pooled)
            for ev in self.mine.values():
                if spec in ev:
                    ev[spec].fade(keep)
        if not choice.spec.speculative:
            return
        verified = self.verified[choice.spec]
        for r in (r for r in batch if r.drafts_verified):  # every verify counts, a request's last one too
            verified.tokens += r.drafts_verified[-1] + 1
            verified.steps += 1
        for r in batch:
            if r.finished:  # its last step was cut by its end, not by a rejected draft
                continue
            n = r.accept_lengths[-1]
            for ev in (self.pooled[choice.spec], self.mine.setdefault(r.rid, {}).setdefault(choice.spec, Evidence())):
                ev.tokens += n
                ev.steps += 1

    def _time(self, spec: SpecConfig, took_ms: float, predicted_ms: float) -> None:
        """Split one timed step into the machine's pace and ``spec``'s overhead (module docstring)."""
        ratio = took_ms / predicted_ms
        if not self.overheads and ratio < 1:  # the run's first step, faster than the curves: the machine's pace
            self.pace, self.overheads[spec] = ratio, 1.0
            return
        if spec not in self.overheads:  # its first step: its overhead at today's pace, the pace unmoved
            self.overheads[spec] = ratio / self.pace
            return
        self.pace += PACE_WEIGHT * (ratio / self.overheads[spec] - self.pace)
        self.overheads[spec] += OVERHEAD_WEIGHT * (ratio / self.pace - self.overheads[spec])
