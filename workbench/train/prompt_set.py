"""The training prompts: the large template set (10,000+ distinct prompts), a user's own prompts
read from a JSON-lines file, and the follow-up turns built on the target's own answers.

``build_prompt_set(seed, n)`` is deterministic and shuffled by ``seed`` so any prefix is a
balanced sample of every kind: writing, roleplay, reasoning, math, coding, extraction, STEM,
humanities (Spec-Bench's categories, with prompts of our own), plus advice, comparisons and
translation, from the templates and topics of ``prompt_templates.py``. Every prompt carries its
``kind`` so a follow-up fits it (``followup``). Word problems and paragraphs draw their numbers
and names from a seeded generator; nothing is taken from an evaluation set
(``tests/test_train_data.py`` checks the Spec-Bench questions, and pins the digest of the set each
seed builds).

``read_prompts(path)`` reads ``generate --prompts FILE``: one JSON object a line,
``{"text": "...", "kind": "coding"}`` (``kind`` optional), in the file's order.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path

from workbench.jsonl import read_rows
from workbench.train.prompt_templates import TEMPLATES as T


@dataclass(frozen=True)
class Prompt:
    kind: str  # writing, roleplay, reasoning, math, coding, extraction, stem, humanities, advice, translation
    text: str


GENERAL = "general"  # the kind of a file's prompt that names none: it gets the follow-ups any prompt fits


def _math(rng: random.Random, n: int) -> list[str]:
    """Word problems with fresh numbers (every one distinct)."""
    out = []
    for _ in range(n):
        a, b, c, d = rng.randint(20, 900), rng.randint(10, 59), rng.randint(2, 12), rng.randint(2, 9)
        out.append(rng.choice(T.MATH_T).format(a=a, b=b, c=c, d=d, e=a + rng.randint(5, 200), c2=c + rng.randint(1, 5),
                                             d2=d + rng.randint(1, 6)))
    return out


def _arithmetic(rng: random.Random, n: int) -> list[str]:
    """Shorter word problems with smaller numbers."""
    out = []
    for _ in range(n):
        a, b, c, d = rng.randint(20, 400), rng.randint(10, 90), rng.randint(2, 12), rng.randint(2, 9)
        out.append(rng.choice(T.ARITHMETIC_T).format(a=a, b=b, c=c, d=d))
    return out


def _reasoning(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        a, b, c = rng.sample(T.PEOPLE, 3)
        x = rng.randint(1, 6)
        y = x + rng.randint(1, 5)
        out.append(rng.choice(T.REASONING_T).format(a=a, b=b, c=c, x=x, y=y, z=y * rng.randint(3, 9)))
    return out


def _logic(rng: random.Random, n: int) -> list[str]:
    """Order, age and sequence puzzles over the first names of ``T.NAMES``."""
    first = [name.split()[0] for name in T.NAMES]
    out = []
    for _ in range(n):
        a, b, c = rng.sample(first, 3)
        x = rng.randint(2, 9)
        step = rng.randint(2, 7)
        out.append(rng.choice(T.LOGIC_T).format(a=a, b=b, c=c, x=x, y=x + step, z=x + 2 * step))
    return out


def _paragraph(rng: random.Random) -> str:
    """A short made-up news paragraph with names, places, dates and numbers."""
    a, b = rng.sample(T.NAMES, 2)
    org, city, ev = rng.choice(T.ORGS), rng.choice(T.CITIES), rng.choice(T.EVENTS)
    month, year, n = rng.choice(T.MONTHS), rng.randint(2015, 2024), rng.randint(12, 480)
    return (f"In {month} {year}, {org} based in {city} {ev}. According to its director, {a}, the change "
            f"took almost {rng.randint(2, 11)} months of planning and cost about {n} thousand dollars. "
            f"{b}, who joined the team in {year - rng.randint(1, 6)}, said the staff were proud of the result "
            f"and hoped to expand the work to {rng.choice([c for c in T.CITIES if c != city])} next year.")


def _fixed() -> list[Prompt]:
    p = [Prompt("writing", f"Write {f.format(t=t)}.") for f, t in itertools.product(T.FORMS, T.TOPICS)]
    p += [Prompt("writing", w.format(x=x)) for w, x in itertools.product(T.WRITING_TASKS, T.WRITING_FILL)]
    p += [Prompt("roleplay", f"{frame.format(r=r)} {task}") for frame, r, task in
          itertools.product(["Pretend you are {r}.", "You are {r}. Stay in character."], T.ROLES, T.ROLE_TASKS)]
    p += [Prompt("stem", e.format(c=c)) for e, c in itertools.product(T.EXPLAIN, T.CONCEPTS)]
    p += [Prompt("humanities", h.format(h=x)) for h, x in itertools.product(T.HUM_T, T.HUMANITIES)]
    p += [Prompt("coding", c.format(l=lang, k=k)) for c, lang, k in itertools.product(T.CODE_T, T.LANGS, T.CODE_TASKS)]
    p += [Prompt("coding", c) for c in T.CODE_MISC]
    p += [Prompt("translation", f"Translate into {lang}: \"{s}\"")
          for lang, s in itertools.product(T.TARGET_LANGS, T.SENTENCES)]
    p += [Prompt("advice", t.format(s=s[0].upper() + s[1:])) for t, s in itertools.product(T.ADVICE_T, T.SITUATIONS)]
    p += [Prompt("humanities" if i % 2 else "stem", t.format(a=a, b=b))
          for i, (t, (a, b)) in enumerate(itertools.product(T.COMPARE_T, T.PAIRS))]
    return p


# How many of each template-product kind to keep, so the big products do not swamp the rest.
CAPS = {"writing": 2200, "roleplay": 1300, "stem": 1600, "humanities": 1000, "coding": 1800, "translation": 250,
        "advice": 180}


def build_prompt_set(seed: int = 0, n: int | None = None) -> list[Prompt]:
    """Distinct prompts (10,000+ with ``n=None``), shuffled by ``seed``; the first ``n``."""
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1 (or None for all), got {n}")
    rng = random.Random(seed)
    fixed = _fixed()
    rng.shuffle(fixed)
    kept, count = [], dict.fromkeys(CAPS, 0)
    for p in fixed:
        if count[p.kind] < CAPS[p.kind]:
            count[p.kind] += 1
            kept.append(p)
    kept += [Prompt("math", t) for t in _math(rng, 1100) + _arithmetic(rng, 300)]
    kept += [Prompt("reasoning", t) for t in _logic(rng, 300) + _reasoning(rng, 900)]
    kept += [Prompt("extraction", rng.choice(T.PARAGRAPH_T).format(p=_paragraph(rng))) for _ in range(1200)]
    seen, out = set(), []
    for p in kept:
        if p.text not in seen:
            seen.add(p.text)
            out.append(p)
    rng.shuffle(out)
    return out if n is None else out[:n]


def read_prompts(path: Path) -> list[Prompt]:
    """The prompts of a JSON-lines file, in its order: each line an object with a non-empty
    ``"text"`` string and, optionally, a ``"kind"`` string (the kinds of ``FOLLOWUPS`` get
    follow-ups that fit them; any other, or none, the general ones); blank lines are skipped.
    A bad line is a ``ValueError`` naming ``path:line``."""
    out = []
    for n, row in read_rows(path):
        if not isinstance(row, dict) or not _words(row.get("text")) or not _words(row.get("kind", GENERAL)):
            raise ValueError(f'{path}:{n}: expected an object with a non-empty "text" string and an optional '
                             f'"kind" string, got {json.dumps(row)[:60]}')
        out.append(Prompt(row.get("kind", GENERAL), row["text"]))
    if not out:
        raise ValueError(f'{path}: no prompts (one JSON object a line: {{"text": ..., "kind": ...}})')
    return out


def _words(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


FOLLOWUPS = {
    "any": ["Explain that more simply.", "Give me a concrete example.", "Can you make it shorter?",
            "Summarise your answer in three bullet points.", "What is the most important point in your answer, and why?",
            "Can you expand on that with more detail?", "Rewrite your answer for a ten-year-old."],
    "writing": ["Make it funnier.", "Rewrite it in a more formal tone.", "Give it a title and make it rhyme.",
                "Continue the text with one more paragraph."],
    "roleplay": ["Stay in character and tell me more.", "What would you say to someone who disagrees with you?"],
    "coding": ["Add comments to the code.", "What is the time complexity of your solution?",
               "Write a few unit tests for it.", "How would you handle invalid input?"],
    "math": ["Check your answer with a different method.", "Explain each step in more detail.",
             "Make a similar problem with different numbers and solve it."],
    "reasoning": ["Are you sure? Check your reasoning step by step.", "Explain it as a short proof."],
    "extraction": ["Now list only the numbers mentioned.", "Write the answer as a table."],
    "stem": ["What is a common misconception about this?", "How is this used in everyday life?"],
    "humanities": ["What happened next?", "How does this relate to today?"],
}


def followup(p: Prompt, rng: random.Random) -> str:
    """A second user turn that builds on the target's first answer to ``p``."""
    return rng.choice(FOLLOWUPS["any"] + FOLLOWUPS.get(p.kind, []))
