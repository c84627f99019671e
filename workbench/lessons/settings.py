"""One source for the τ and speedup of a speculative setting, wherever a notebook quotes them.

Notebooks 6 and 7 both measure a chain of 3; measured on different prompts or lengths they would
print two answers for one configuration. Both call ``measure_settings`` on ``lesson_prompts`` with
``MAX_NEW_TOKENS``: greedy decoding is deterministic in one dtype, so a setting's τ is the same
number in both, and only its speedup moves, by the timing noise each prints as a range.

The prompts are Spec-Bench's (the packaged copy), the shortest first turn of each of
``CATEGORIES`` (a cheap prefill); speeds are measured as Spec-Bench does: batch 1, greedy, tokens
per second averaged over the questions, every setting run ``runs`` times, interleaved so that a
slow spell of the machine hits all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.bench.specbench import load_questions
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.tau import tau
from workbench.timing import Spread, spread
from workbench.metrics import tau as pooled_tau

CATEGORIES = ("coding", "translation", "math_reasoning")
MAX_NEW_TOKENS = 20


def lesson_prompts(wb, categories: tuple[str, ...] = CATEGORIES) -> dict[str, list[int]]:
    """Token ids of the shortest first turn of each category, through the chat template."""
    questions = load_questions()
    prompts = {}
    for category in categories:
        mine = [q for q in questions if q.category == category]
        if not mine:
            raise ValueError(f"no Spec-Bench question of category {category!r}")
        prompts[category] = wb.encode(min(mine, key=lambda q: len(q.turns[0])).turns[0])
    return prompts


def label(spec: SpecConfig) -> str:
    """The setting's name in the method grammar the bench reads: ``vanilla``, ``linear:S``,
    ``eagle2:D/S/K`` (``SpecConfig.name``)."""
    return spec.name


@dataclass(frozen=True)
class Setting:
    spec: SpecConfig
    tau: float  # tokens per target forward, pooled over the prompts (1.0 for vanilla)
    accept_lengths: dict[str, list[int]]  # category -> tokens each verify step emitted (empty for vanilla)
    walk_lengths: dict[str, list[int]]  # category -> n + 1 the walk accepted per verify step (chain_model's)
    tok_s: Spread  # per run: the mean over the prompts of tokens per second
    speedup: Spread  # per run over vanilla's tokens per second in the same run
    outputs: dict[str, list[int]]  # category -> output ids

    @property
    def label(self) -> str:
        return label(self.spec)

    def tau_of(self, category: str) -> float:
        """τ on one prompt (1.0 for vanilla: one token per target forward)."""
        return pooled_tau(self.accept_lengths[category]) if self.spec.speculative else 1.0


def measure_settings(wb, specs: list[SpecConfig], prompts: dict[str, list[int]], runs: int,
                     max_new_tokens: int = MAX_NEW_TOKENS) -> dict[str, Setting]:
    """Each setting of ``specs`` (the first must be vanilla: the speedups' baseline), by label."""
    if not specs or specs[0].speculative:
        raise ValueError("the first setting must be vanilla: every speedup is measured against it")
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    greedy = SamplingParams()
    wb.generate([next(iter(prompts.values()))], specs[-1], greedy, max_new_tokens=4)  # warm-up
    speeds = {label(s): [] for s in specs}  # label -> tokens per second of each run
    first_run: dict[str, dict] = {label(s): {} for s in specs}  # label -> category -> request
    for _ in range(runs):
        for spec in specs:
            per_prompt = []
            for category, ids in prompts.items():
                (r,), seconds = wb.generate([ids], spec, greedy, max_new_tokens=max_new_tokens)
                per_prompt.append(len(r.output_ids) / seconds)
                first_run[label(spec)].setdefault(category, r)
            speeds[label(spec)].append(sum(per_prompt) / len(per_prompt))
    base = speeds[label(specs[0])]
    out = {}
    for spec in specs:
        requests = list(first_run[label(spec)].values())  # greedy: every run emits the same
        runs = first_run[label(spec)]
        out[label(spec)] = Setting(
            spec=spec, tau=tau(requests) if spec.speculative else 1.0,
            accept_lengths={c: list(r.accept_lengths) for c, r in runs.items()},
            walk_lengths={c: [n + 1 for n in r.drafts_accepted] for c, r in runs.items()},
            tok_s=spread(speeds[label(spec)]), speedup=spread(s / b for s, b in zip(speeds[label(spec)], base)),
            outputs={c: r.output_ids for c, r in runs.items()})
    return out
