"""Spec-Bench questions: loading, the six tasks, the subsets the benchmark runs, chat encoding.

Spec-Bench (hemingkx/Spec-Bench) has 480 questions in 13 categories, reported as six tasks:
``mt_bench`` (the eight MT-bench categories, 10 questions each, two turns), ``translation``,
``summarization``, ``qa``, ``math_reasoning`` and ``rag`` (80 each, one turn).

Subsets:

==========  ===========================================================================
``quick``   ``per_category`` questions (default 1) of each of the six tasks, first turn: the
            first ones in file order; MT-bench's picks go round its eight categories
``mtbench`` MT-bench first turns (the turn the EAGLE papers report tau on): ``per_category``
            questions (default all 10) of each of its eight categories
``all``     all 480 questions; MT-bench with both turns, the second turn answering after the
            method's own first answer, as Spec-Bench runs it
==========  ===========================================================================

The data is for evaluation only (``workbench/data/README.md``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
SUBSETS = ("quick", "mtbench", "all")
DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "spec_bench_questions.jsonl"


@dataclass(frozen=True)
class Question:
    question_id: int
    category: str
    turns: tuple[str, ...]  # user messages; the benchmark may run only the first

    @property
    def task(self) -> str:
        """The Spec-Bench task this question is reported under."""
        return "mt_bench" if self.category in MT_BENCH_CATEGORIES else self.category


def load_questions(path: str | Path | None = None) -> list[Question]:
    """All questions of a Spec-Bench JSONL file (default: the packaged copy), in file order."""
    out = []
    for line in Path(path or DATA_FILE).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out.append(Question(int(row["question_id"]), row["category"], tuple(row["turns"])))
    return out


def select(questions: list[Question], subset: str, per_category: int | None = None) -> list[Question]:
    """The questions of ``subset`` (see the module docstring), each cut to the turns it runs."""
    if subset not in SUBSETS:
        raise ValueError(f"unknown subset {subset!r}; choose one of {', '.join(SUBSETS)}")
    if per_category is not None and per_category < 1:
        raise ValueError(f"per_category must be >= 1, got {per_category}")
    if subset == "all":
        return list(questions)
    if subset == "mtbench":
        chosen = _first_of_each([q for q in questions if q.task == "mt_bench"], lambda q: q.category,
                                per_category or len(questions))
    else:
        mt = _round_robin([q for q in questions if q.task == "mt_bench"])
        rest = [q for q in questions if q.task != "mt_bench"]
        chosen = _first_of_each(mt + rest, lambda q: q.task, per_category or 1)
    return [Question(q.question_id, q.category, q.turns[:1]) for q in chosen]


def first_turns_by_task(questions: list[Question]) -> list[str]:
    """The questions' first turns, the tasks taken in turn (the first of each task, then the
    second of each, ...): any prefix of the list mixes the tasks (the load benchmark's requests)."""
    by_task: dict[str, list[str]] = {}
    for q in questions:
        by_task.setdefault(q.task, []).append(q.turns[0])
    longest = max((len(v) for v in by_task.values()), default=0)
    return [v[i] for i in range(longest) for v in by_task.values() if i < len(v)]


def spread(questions: list[Question], n: int) -> list[Question]:
    """``n`` questions taken at an even stride through ``questions`` (file order kept)."""
    return questions[:: max(1, len(questions) // n)][:n]


def mt_bench_first_turns(n: int, path: str | Path | None = None) -> list[Question]:
    """``n`` MT-bench questions (its eight categories) spread evenly over them, first turn only:
    the questions head evaluations report τ on."""
    mt = [q for q in load_questions(path) if q.task == "mt_bench"]
    return [Question(q.question_id, q.category, q.turns[:1]) for q in spread(mt, n)]


def _first_of_each(questions: list[Question], key, n: int) -> list[Question]:
    """The first ``n`` questions of each ``key(q)`` group, keeping the input order."""
    seen: dict[str, int] = {}
    out = []
    for q in questions:
        if seen.get(key(q), 0) < n:
            seen[key(q)] = seen.get(key(q), 0) + 1
            out.append(q)
    return out


def _round_robin(questions: list[Question]) -> list[Question]:
    """Interleave by category: first of each category, then second of each, ..."""
    groups: dict[str, list[Question]] = {}
    for q in questions:
        groups.setdefault(q.category, []).append(q)
    longest = max((len(g) for g in groups.values()), default=0)
    return [g[i] for i in range(longest) for g in groups.values() if i < len(g)]


def add_subset_args(p) -> None:
    """The flags that pick the questions a benchmark runs (``select``) onto parser ``p``."""
    from workbench.flags import positive

    p.add_argument("--subset", choices=SUBSETS, default="quick",
                   help="quick: one question of each of the six Spec-Bench tasks; mtbench: MT-bench "
                        "first turns; all: 480 questions, MT-bench with both turns")
    p.add_argument("--per-category", type=positive("--per-category"),
                   help="questions per task (quick, default 1) or per MT-bench category (mtbench, default 10)")
    p.add_argument("--limit", type=positive("--limit"), help="run only the first N questions of the subset "
                   "(default: all of them)")
