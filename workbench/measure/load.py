"""One load, timed: requests submitted to one Engine as a closed or an open loop, each stamped
with when it arrived, when its first token came and when it finished. The load benchmark
(``load_run.py``: ``python -m workbench.bench load``) and the app's Load tab both run their
loads through ``LoadRun``; there is no second driver.

==========  ===========================================================================
closed      ``concurrency`` requests in flight: that many are submitted at the start and a
            new one each time one finishes (or is refused), until ``requests`` were submitted
open        requests arrive at seeded Poisson times, ``rate`` per second on average
            (exponential gaps, the first at 0); each is submitted once the clock passes its
            arrival, between steps, and the engine batches whatever has arrived. With
            nothing running, the clock waits for the next arrival
==========  ===========================================================================

Request k of a load asks prompt ``k mod len(prompts)`` under every policy, so outputs compare
request by request. The engine's KV capacity holds every request that can be in flight at once
(closed: the ``concurrency`` largest worst cases; open: all; ``Engine.slots_needed``), unless
``kv_slots`` is given: requests then wait for room, and one that could never fit is refused at
submit (its reason kept) while the others run on.

Times are seconds from the run's start (``time.perf_counter``, after a synchronise on CUDA):
**TTFT** = arrival -> the end of the step that emitted the first token (closed loop: arrival is
submission), **e2e** = arrival -> the end of the step that finished it, **TPOT** = (e2e - TTFT) /
(tokens - 1) (``workbench/metrics.py``). Throughput = every token emitted (unfinished requests'
included) / the run's wall time.

The driver does not trace (a record per request per step costs time): ``Watched`` passes every
call on to the real policy and notes the choice and the batch, so the timed loop is the one a
server runs. Decoding is greedy, so every policy's output must equal plain decoding's. What a
load is: ``load_spec.py``; how its policies are named: ``engine/policy/grammar.py``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from workbench.measure.load_spec import Load
from workbench.measure.metrics import percentile
from workbench.engine.config import check_context
from workbench.engine.engine import Engine
from workbench.engine.policy import Choice, NamedPolicy, SpecPolicy, StepCost
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.errors import UserError
from workbench import metrics


# ---- the engine a run gets ---------------------------------------------------------------------------
def make_engine(wb, policy: SpecPolicy, kv_slots: int | None = None) -> Engine:
    """A greedy engine for ``policy`` on the loaded target (``kv_slots``: its KV capacity; None:
    no pools, for ``slots_needed`` only). UserError when a setting drafts with a head or a draft
    model that is not loaded, or names an exit the target cannot take (``Workbench.engine``)."""
    return wb.engine(sampling=SamplingParams(), policy=policy, kv_slots=kv_slots)


def plan_capacity(wb, policy: NamedPolicy, *, prompts: list[list[int]], load: Load, max_new_tokens: int,
                  kv_slots: int | None = None) -> tuple[list[int], int]:
    """(each request's worst case in KV slots, the capacity the run's engine gets): ``kv_slots``,
    or room for every request that can be in flight at once (see the module docstring)."""
    probe = make_engine(wb, policy.build())
    needs = [probe.slots_needed(len(prompts[k % len(prompts)]), max_new_tokens) for k in range(load.requests)]
    if kv_slots is not None:
        return needs, kv_slots
    in_flight = int(load.value) if load.mode == "closed" else load.requests
    return needs, sum(sorted(needs)[-in_flight:])


def check_load(wb, policy: NamedPolicy, *, prompts: list[list[int]], load: Load, max_new_tokens: int,
               kv_slots: int | None = None) -> None:
    """UserError naming the first request the engine would refuse: a prompt that, with
    ``max_new_tokens``, exceeds the model's context or could never fit the KV capacity."""
    needs, capacity = plan_capacity(wb, policy, prompts=prompts, load=load, max_new_tokens=max_new_tokens,
                                    kv_slots=kv_slots)
    settings = policy.build().settings()
    for k, need in enumerate(needs):
        i = k % len(prompts)
        try:
            for spec in settings:
                check_context(spec, wb.target.config.max_position_embeddings, len(prompts[i]), max_new_tokens)
            if need > capacity:
                raise ValueError(f"it needs up to {need} KV slots under {policy.name} (its {len(prompts[i])} tokens, "
                                 f"max_new_tokens={max_new_tokens} and one step's verify block and draft scratch), "
                                 f"but the pool holds {capacity}: it could never run; give more --kv-slots or a "
                                 "shorter prompt")
        except ValueError as err:
            raise UserError(f"prompt {i}: {err}") from None


# ---- one run -------------------------------------------------------------------------------------------
class Watched:
    """The policy the engine is given: every call goes on to ``policy``; ``observe`` also keeps
    what the decode step just ran and for how many requests (``last``)."""

    def __init__(self, policy: SpecPolicy):
        self.policy, self.name = policy, policy.name
        self.last: tuple[Choice, int] | None = None

    def settings(self):
        return self.policy.settings()

    def choose(self, batch: list[Request]) -> Choice:
        return self.policy.choose(batch)

    def observe(self, choice: Choice, batch: list[Request]) -> None:
        self.policy.observe(choice, batch)
        self.last = (choice, len(batch))


@dataclass
class TimedRequest:
    """One request of a load and when things happened to it (seconds from the run's start)."""

    index: int  # k: its place in the load
    prompt_index: int  # k mod len(prompts)
    arrival: float | None  # open loop: when it was due; closed: set when it is submitted
    submitted: float | None = None
    first_token: float | None = None  # the end of the step that emitted its first token
    finished: float | None = None
    request: Request | None = None  # the engine's, once submitted
    refused: str | None = None  # why the engine refused it at submit

    @property
    def output_ids(self) -> list[int]:
        return list(self.request.output_ids) if self.request is not None else []

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first_token is None else (self.first_token - self.arrival) * 1e3

    @property
    def e2e_ms(self) -> float | None:
        return None if self.finished is None else (self.finished - self.arrival) * 1e3

    @property
    def tpot_ms(self) -> float | None:
        if self.finished is None:
            return None
        return metrics.tpot_ms(ttft_ms=self.ttft_ms, e2e_ms=self.e2e_ms, tokens=len(self.output_ids))


@dataclass(frozen=True)
class StepLog:
    """One engine step as the load saw it."""

    step: int  # 1, 2, ...
    t: float  # seconds from the start, at the step's end
    kind: str  # "prefill" (newcomers' prompts) or "decode" (the running batch)
    batch: int  # requests the step ran
    setting: str  # what it ran: "off", "eagle2:4/3/2", ...; "prefill"
    speculative: bool
    tokens: int  # tokens it emitted, all requests together
    verified: int = 0  # tokens its target forward checked, each request's root included (plain: batch)
    verified_each: tuple[int, ...] = ()  # the same request by request (empty: a prefill step)

    @property
    def tau(self) -> float | None:
        """Tokens per request this decode step emitted (a speculative step's mean accept length)."""
        return self.tokens / self.batch if self.kind == "decode" else None


@dataclass
class LoadResult:
    """What one run of a load measured."""

    policy: str
    load: Load
    capacity: int  # the engine's KV slots
    seconds: float  # wall time: the start to the end of the last step
    timed: list[TimedRequest]
    steps: list[StepLog]
    stopped: bool  # the time limit came before every request finished
    # the engine's own phase clocks, summed per setting (``StepProfile.to_json``): its "prefill"
    # entry is the time the run's prefill steps took, which the load report sets beside the model
    profile: dict = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(len(t.output_ids) for t in self.timed)

    @property
    def throughput_tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def decode_steps(self) -> list[StepLog]:
        return [s for s in self.steps if s.kind == "decode"]

    @property
    def mean_batch(self) -> float | None:
        steps = self.decode_steps
        return sum(s.batch for s in steps) / len(steps) if steps else None

    @property
    def spec_step_share(self) -> float | None:
        steps = self.decode_steps
        return sum(s.speculative for s in steps) / len(steps) if steps else None

    @property
    def tau(self) -> float | None:
        """Tokens per request per speculative step, pooled over them (None: no such step)."""
        spec = [s for s in self.decode_steps if s.speculative]
        return sum(s.tokens for s in spec) / sum(s.batch for s in spec) if spec else None

    @property
    def nodes(self) -> float | None:
        """Tokens a request's verify held per speculative step, root included, pooled (None: no
        such step): ``num_draft_tokens`` for the head's trees, fewer where a draft filled its
        tree in part (the n-gram lookup proposes only what matches)."""
        spec = [s for s in self.decode_steps if s.speculative]
        return sum(s.verified for s in spec) / sum(s.batch for s in spec) if spec else None

    @property
    def nodes_mix(self) -> dict[int, int] | None:
        """{tokens: request-steps} of the speculative steps' verifies, request by request, the mix
        the cost model prices (``cost_model.verify_mix``): at one request each forward at its own
        count, at a batch one forward at the mix's mean (``nodes``) whose pace is each request's
        count's; None without a speculative step."""
        spec = [s for s in self.decode_steps if s.speculative]
        if not spec:
            return None
        return dict(sorted(Counter(n for s in spec for n in (s.verified_each or (s.verified,))).items()))

    def choices(self) -> Counter:
        """(batch size, setting) -> decode steps that ran it."""
        return Counter((s.batch, s.setting) for s in self.decode_steps)

    def record(self) -> dict:
        """The run as JSON: what the benchmark keeps and reports from."""
        r = lambda x, nd=2: None if x is None else round(x, nd)  # noqa: E731
        return {"seconds": r(self.seconds, 4), "tokens": self.tokens, "throughput_tok_s": r(self.throughput_tok_s),
                "mean_batch": r(self.mean_batch, 3), "spec_step_share": r(self.spec_step_share, 3),
                "tau": r(self.tau, 3), "nodes": r(self.nodes, 3), "nodes_mix": self.nodes_mix,
                "decode_steps": len(self.decode_steps), "capacity": self.capacity,
                "stopped": self.stopped, "choices": [[b, s, n] for (b, s), n in sorted(self.choices().items())],
                "profile": self.profile,
                "requests": [{"index": t.index, "prompt_index": t.prompt_index, "output_ids": t.output_ids,
                              "finish_reason": t.request.finish_reason if t.request is not None else None,
                              "refused": t.refused, "ttft_ms": r(t.ttft_ms), "tpot_ms": r(t.tpot_ms),
                              "e2e_ms": r(t.e2e_ms)} for t in self.timed]}


class LoadRun:
    """One load under one policy on a fresh engine: ``steps()`` runs it and yields each step's
    log as it ends (the app draws them live), ``run()`` runs it through; then ``result()``.
    ``cost``: this machine's step cost, which ``auto`` needs (``measure/step_cost.py``: measured
    once by the caller, so that no timed run pays for it)."""

    def __init__(self, wb, policy: NamedPolicy, *, prompts: list[list[int]], load: Load, max_new_tokens: int,
                 kv_slots: int | None = None, cost: StepCost | None = None):
        if not prompts:
            raise ValueError("a load needs at least one prompt")
        if policy.needs_cost and cost is None:
            raise ValueError(f"{policy.name} weighs settings by this machine's step cost: measure it first "
                             "(workbench.measure.step_cost.step_cost_for) and pass cost=")
        self.name, self.load, self.prompts, self.max_new_tokens = policy.name, load, prompts, max_new_tokens
        _, capacity = plan_capacity(wb, policy, prompts=prompts, load=load, max_new_tokens=max_new_tokens,
                                    kv_slots=kv_slots)
        self.watched = Watched(policy.build(cost))
        self.engine = make_engine(wb, self.watched, capacity)
        self.cuda = self.engine.device.type == "cuda"
        arrivals = load.arrivals() or [None] * load.requests
        self.timed = [TimedRequest(k, k % len(prompts), a) for k, a in enumerate(arrivals)]
        self.log: list[StepLog] = []
        self.seconds, self.stopped, self._next = 0.0, False, 0  # _next: the first request not submitted

    def _now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.engine.device)
        return time.perf_counter() - self.t0

    def _in_flight(self) -> list[TimedRequest]:
        return [t for t in self.timed[: self._next] if t.request is not None and t.finished is None]

    def _submit_due(self, now: float) -> None:
        """Closed loop: top the requests in flight up to the concurrency; open: submit every
        request whose arrival has passed."""
        while self._next < len(self.timed):
            t = self.timed[self._next]
            due = len(self._in_flight()) < self.load.value if self.load.mode == "closed" else t.arrival <= now
            if not due:
                return
            if t.arrival is None:
                t.arrival = now
            t.submitted = now
            try:
                t.request = self.engine.submit(self.prompts[t.prompt_index], self.max_new_tokens)
            except ValueError as err:  # it could never fit, or too long for the model: the rest run on
                t.refused = str(err)
            self._next += 1

    def steps(self, seconds: float | None = None) -> Iterator[StepLog]:
        """Run the load, yielding each step's log as the step ends. ``seconds``: stop once that
        long has passed (the requests not finished by then stay unfinished; the others keep their
        times). Runs once."""
        self.t0 = time.perf_counter()
        now = 0.0
        while True:
            self._submit_due(now)
            if seconds is not None and now >= seconds:
                self.stopped = any(t.finished is None and t.refused is None for t in self.timed)
                break
            if self.engine.done:
                if self._next == len(self.timed):
                    break
                wait = self.timed[self._next].arrival - now  # open loop: idle until the next arrival
                time.sleep(max(0.0, min(wait, seconds - now) if seconds is not None else wait))
                now = self._now()
                continue
            before = {t.index: (len(t.request.output_ids), len(t.request.drafts_verified)) for t in self._in_flight()}
            self.watched.last = None
            self.engine.step()
            now = self.seconds = self._now()
            self.log.append(self._stamp(now, before))
            yield self.log[-1]
        self.seconds = max(self.seconds, now) if self.stopped else self.seconds

    def _stamp(self, now: float, before: dict[int, tuple[int, int]]) -> StepLog:
        """Stamp first tokens and finishes of the step that just ended; its log. ``before``: each
        request in flight before the step, its output tokens and verify steps then."""
        tokens = firsts = verified = 0
        each = []
        for k, (n, steps) in before.items():
            t = self.timed[k]
            tokens += len(t.request.output_ids) - n
            checked = sum(d + 1 for d in t.request.drafts_verified[steps:])
            verified += checked
            if checked:
                each.append(checked)
            if t.first_token is None and t.request.output_ids:
                t.first_token, firsts = now, firsts + 1
            if t.request.finished:
                t.finished = now
        if self.watched.last is None:  # the policy was not asked: a prefill step
            return StepLog(len(self.log) + 1, now, kind="prefill", batch=firsts, setting="prefill", speculative=False,
                           tokens=tokens)
        choice, batch = self.watched.last
        return StepLog(len(self.log) + 1, now, kind="decode", batch=batch, setting=choice.label,
                       speculative=choice.spec.speculative, tokens=tokens, verified=verified, verified_each=tuple(each))

    def run(self, seconds: float | None = None) -> LoadResult:
        for _ in self.steps(seconds):
            pass
        return self.result()

    def result(self) -> LoadResult:
        return LoadResult(self.name, self.load, capacity=self.engine.capacity, seconds=self.seconds, timed=self.timed,
                          steps=list(self.log), stopped=self.stopped, profile=self.engine.profile.to_json())


def run_load(wb, policy: NamedPolicy, *, prompts: list[list[int]], load: Load, max_new_tokens: int,
             kv_slots: int | None = None, seconds: float | None = None, cost: StepCost | None = None) -> LoadResult:
    """Run one load through (see ``LoadRun``)."""
    return LoadRun(wb, policy, prompts=prompts, load=load, max_new_tokens=max_new_tokens, kv_slots=kv_slots,
                   cost=cost).run(seconds)


def equal_outputs(result: dict, reference: dict) -> bool:
    """Does every request that finished in both runs' records (``LoadResult.record``) have the
    same output ids in each? (A run a time limit cut is compared on what both finished.)"""
    ref = {q["index"]: q["output_ids"] for q in reference["requests"] if q["e2e_ms"] is not None}
    return all(q["output_ids"] == ref[q["index"]] for q in result["requests"]
               if q["e2e_ms"] is not None and q["index"] in ref)


WARMUP = Load("closed", 2, 2)  # the untimed run per policy before the timed rounds
WARMUP_TOKENS = 8


def round_figures(rec: dict) -> dict:
    """One run's figures: its throughput, the p50 / p90 of its requests' latencies, its steps."""
    out = {"throughput_tok_s": rec["throughput_tok_s"]}
    for key in ("tpot_ms", "ttft_ms", "e2e_ms"):
        values = [q[key] for q in rec["requests"] if q[key] is not None]
        out[f"{key}_p50"], out[f"{key}_p90"] = percentile(values, 50), percentile(values, 90)
    return {**out, "mean_batch": rec["mean_batch"], "spec_step_share": rec["spec_step_share"], "tau": rec["tau"],
            "nodes": rec.get("nodes")}  # a record kept before runs counted their verified tokens has none
