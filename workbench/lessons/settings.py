"""One source for the τ, speed and latency of a speculative setting, wherever a notebook quotes them.

Notebooks 6 and 7 both measure a chain of 3; measured on different prompts or lengths they would
print two answers for one configuration. Both call ``measure_settings`` on ``lesson_prompts`` with
``MAX_NEW_TOKENS``: greedy decoding is deterministic in one dtype, so a setting's τ is the same
number in both, and only its timings move, by the noise each prints as a range.

The prompts are Spec-Bench's shortest first turn of each of ``CATEGORIES`` (a cheap prefill).
Timings are interleaved (``workbench.timing.interleaved``): batch 1, each round runs every setting
on every prompt, the first setting rotating, so a slow spell hits all of them; a round's value is
the mean over the prompts, its speedup over plain decoding (same temperature) in the same round.
Per request: TTFT, end-to-end time and TPOT, as ``workbench/metrics.py`` defines them.

Sampled settings (temperature > 0) draw with seed ``sampling.seed + round``: every round is
another sample, and τ has a range over the rounds as the timings do.

Given a list ``probes``, each round also gives one turn to a probe of the target's part after
each prompt (``workbench/measure/probe.py``: the prompt's prefill, a verify of each setting's size
and of ``probe_sizes``, the head's forwards), appended to it: ``probe.probed(cost, probes)`` is the
step cost read at the runs' own pace, for a prediction set beside them. A probe of every prompt in
every round, not of one: on these two cores the pace moves within a minute, and three probes of
one prompt had priced plain decoding 10 % under its measured TPOT in one execution of notebook 6
and 1 % in the one before it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workbench import metrics
from workbench.measure.specbench import load_questions
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons import smoke
from workbench.measure.probe import TURN, ProbePlan
from workbench.metrics import tau as pooled_tau
from workbench.timing import Spread, interleaved, spread

CATEGORIES = ("coding", "translation", "math_reasoning")
MAX_NEW_TOKENS = 32
GREEDY = SamplingParams()
METRICS = ("tok_s", "ttft_ms", "tpot_ms", "e2e_ms")  # per round: the mean over the prompts


def lesson_prompts(wb, categories: tuple[str, ...] = CATEGORIES) -> dict[str, list[int]]:
    """Token ids of the shortest first turn of each category, through the chat template (the
    first ``smoke.PROMPTS`` categories at smoke size)."""
    questions = load_questions()
    prompts = {}
    for category in smoke.prompts(categories):
        mine = [q for q in questions if q.category == category]
        if not mine:
            raise ValueError(f"no Spec-Bench question of category {category!r}")
        prompts[category] = wb.encode(min(mine, key=lambda q: len(q.turns[0])).turns[0])
    return prompts


def all_categories() -> tuple[str, ...]:
    """Every category of the packaged Spec-Bench questions, in the order they first appear."""
    return tuple(dict.fromkeys(q.category for q in load_questions()))


def label(spec: SpecConfig, sampling: SamplingParams = GREEDY) -> str:
    """The setting's name in the method grammar the bench reads (``vanilla``, ``linear:S``,
    ``eagle2:D/S/K``: ``SpecConfig.name``), with `` T=t`` when it samples."""
    return spec.name if sampling.greedy else f"{spec.name} T={sampling.temperature:g}"


@dataclass(frozen=True)
class TimedAnswer:
    """One request at batch 1, decoded and timed (``timed_generate``)."""

    output_ids: list[int]
    accept_lengths: list[int]
    drafts_accepted: list[int]
    ttft_ms: float  # the prefill, which emits the first token
    e2e_ms: float  # from the prefill's start to the last token

    @property
    def tpot_ms(self) -> float | None:
        """Per output token after the first (``workbench.metrics.tpot_ms``; None for one token)."""
        return metrics.tpot_ms(ttft_ms=self.ttft_ms, e2e_ms=self.e2e_ms, tokens=len(self.output_ids))


def timed_generate(wb, ids: list[int], *, spec: SpecConfig, sampling: SamplingParams,
                   max_new_tokens: int) -> TimedAnswer:
    """One request at batch 1, with its time to the first token and its end-to-end time. The
    first step is the prefill alone (``Engine.step``); its first token is read back to the host,
    so the time after it is taken once the device has finished."""
    first: list[float] = []
    (r,), seconds = wb.generate([ids], spec, sampling, max_new_tokens,
                                on_step=lambda reqs, s: first.append(s) if not first else None)
    return TimedAnswer(list(r.output_ids), list(r.accept_lengths), list(r.drafts_accepted), ttft_ms=1e3 * first[0],
                       e2e_ms=1e3 * seconds)


def _metrics(runs: list[TimedAnswer]) -> dict[str, float]:
    """A round's values: the mean over the prompts of tokens/s, TTFT, TPOT and end-to-end ms
    (TPOT over the answers longer than one token; a one-token answer has none)."""
    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    return {"tok_s": mean([1e3 * len(t.output_ids) / t.e2e_ms for t in runs]),
            "ttft_ms": mean([t.ttft_ms for t in runs]),
            "tpot_ms": mean([t.tpot_ms for t in runs if t.tpot_ms is not None]),
            "e2e_ms": mean([t.e2e_ms for t in runs])}


@dataclass(frozen=True)
class Setting:
    spec: SpecConfig
    sampling: SamplingParams
    tau: float  # tokens per target forward, pooled over the prompts and rounds (1.0 for vanilla)
    taus: tuple[float, ...]  # per round, pooled over the prompts (all equal when greedy)
    accept_lengths: dict[str, list[int]]  # category -> tokens each verify step emitted, first round
    walk_lengths: dict[str, list[int]]  # category -> n + 1 the walk accepted per verify step (chain_model's)
    outputs: dict[str, list[int]]  # category -> output ids, first round
    rounds: dict[str, tuple[float, ...]]  # metric (METRICS) -> one value per round
    speedups: tuple[float, ...]  # per round: tokens/s over plain decoding's at this temperature, same round
    equal_to_plain: int | None  # greedy: prompts whose output equals plain decoding's; None when sampled

    @property
    def label(self) -> str:
        return label(self.spec, self.sampling)

    def spread(self, metric: str) -> Spread:
        """Median and range over the rounds of one of ``METRICS``."""
        return spread(self.rounds[metric])

    @property
    def tok_s(self) -> Spread:
        return self.spread("tok_s")

    @property
    def speedup(self) -> Spread:
        return spread(self.speedups)

    @property
    def tau_spread(self) -> Spread:
        return spread(self.taus)

    def faster_than(self, other: "Setting", metric: str) -> Spread:
        """Per round, ``other``'s ms of ``metric`` over this setting's (> 1: this one is faster)."""
        return spread(o / s for o, s in zip(other.rounds[metric], self.rounds[metric]))

    def tau_of(self, category: str) -> float:
        """τ on one prompt, first round (1.0 for vanilla: one token per target forward)."""
        return pooled_tau(self.accept_lengths[category]) if self.spec.speculative else 1.0


def measure_settings(wb, specs: list, prompts: dict[str, list[int]], rounds: int,
                     max_new_tokens: int = MAX_NEW_TOKENS, probes: list | None = None,
                     probe_sizes=()) -> dict[str, Setting]:
    """Each setting, by label. A setting is a ``SpecConfig`` (greedy) or a pair ``(SpecConfig,
    SamplingParams)``; the first greedy one must be vanilla, and so must one of every other
    sampling: every speedup is over plain decoding at the same temperature. At smoke size
    (``workbench.lessons.smoke``), fewer new tokens. ``probes``: a list that gets a probe of each
    prompt a round (module docstring), at the settings' verify sizes and ``probe_sizes``."""
    max_new_tokens = smoke.new_tokens(max_new_tokens)
    pairs = [s if isinstance(s, tuple) else (s, GREEDY) for s in specs]
    if not pairs or pairs[0][0].speculative:
        raise ValueError("the first setting must be vanilla: every speedup is measured against it")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    names = {label(sp, sa): (sp, sa) for sp, sa in pairs}
    for sp, sa in pairs:
        if label(SpecConfig("vanilla"), sa) not in names:
            raise ValueError(f"{label(sp, sa)} samples at temperature {sa.temperature:g}, but no vanilla does: "
                             "add (SpecConfig('vanilla'), that SamplingParams) to compare with")
    first = next(iter(prompts.values()))
    for sp, sa in pairs:  # warm-up: each setting's first forwards of each shape are slow
        wb.generate([first], sp, sa, 4)
    done: dict[str, list[dict[str, TimedAnswer]]] = {n: [] for n in names}  # label -> per round: category -> run

    def one_round(name: str) -> float:
        spec, sampling = names[name]
        sampling = sampling if sampling.greedy else replace(sampling, seed=sampling.seed + len(done[name]))
        runs = {c: timed_generate(wb, ids, spec=spec, sampling=sampling, max_new_tokens=max_new_tokens) for c,
                ids in prompts.items()}
        done[name].append(runs)
        return _metrics(list(runs.values()))["tok_s"]

    turns = {n: (lambda n=n: one_round(n)) for n in names}
    plan = ProbePlan.of([sp for sp, _ in pairs], wb, extra_sizes=probe_sizes) if probes is not None else None
    if plan is not None:
        turns[TURN] = lambda: probes.extend(plan.take(wb, ids) for ids in prompts.values()) or 0.0
    interleaved(turns, rounds)
    plain = {label(SpecConfig("vanilla"), sa): done[label(SpecConfig("vanilla"), sa)] for _, sa in pairs}
    out = {}
    for name, (spec, sampling) in names.items():
        per_round = [_metrics(list(r.values())) for r in done[name]]
        base = [_metrics(list(r.values()))["tok_s"] for r in plain[label(SpecConfig("vanilla"), sampling)]]
        lengths = [[a for t in r.values() for a in t.accept_lengths] for r in done[name]]
        first_round = done[name][0]
        equal = None
        if sampling.greedy:
            reference = plain[label(SpecConfig("vanilla"))][0]
            equal = sum(first_round[c].output_ids == reference[c].output_ids for c in prompts)
        out[name] = Setting(
            spec=spec, sampling=sampling,
            tau=pooled_tau([a for r in lengths for a in r]) if spec.speculative else 1.0,
            taus=tuple(pooled_tau(r) if spec.speculative else 1.0 for r in lengths),
            accept_lengths={c: t.accept_lengths for c, t in first_round.items()},
            walk_lengths={c: [n + 1 for n in t.drafts_accepted] for c, t in first_round.items()},
            outputs={c: t.output_ids for c, t in first_round.items()},
            rounds={m: tuple(r[m] for r in per_round) for m in METRICS},
            speedups=tuple(r["tok_s"] / b for r, b in zip(per_round, base)),
            equal_to_plain=equal)
    return out
