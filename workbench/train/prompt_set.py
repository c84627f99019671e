"""The large training prompt set (10,000+ distinct prompts) and the follow-up turns built on
the target's own answers.

``build_prompt_set(seed, n)`` is deterministic and shuffled by ``seed`` so any prefix is a
balanced sample of every kind: writing, roleplay, reasoning, math, coding, extraction, STEM,
humanities (Spec-Bench's categories, with prompts of our own), plus advice, comparisons and
translation, from the templates and topics of ``prompt_templates.py``. Every prompt carries its
``kind`` so a follow-up fits it (``followup``). Word problems and paragraphs draw their numbers
and names from a seeded generator; nothing is taken from an evaluation set
(``tests/test_train_data.py`` checks the Spec-Bench questions, and pins the digest of the set each
seed builds).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from workbench.train.prompt_templates import TEMPLATES as T


@dataclass(frozen=True)
class Prompt:
    kind: str  # writing, roleplay, reasoning, math, coding, extraction, stem, humanities, advice, translation
    text: str


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


def _paragraph_tasks(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(T.PARAGRAPH_T).format(p=_paragraph(rng)) for _ in range(n)]


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
    kept += [Prompt("extraction", t) for t in _paragraph_tasks(rng, 1200)]
    seen, out = set(), []
    for p in kept:
        if p.text not in seen:
            seen.add(p.text)
            out.append(p)
    rng.shuffle(out)
    return out if n is None else out[:n]


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


# The word-seeded prompt set: the template set above names a few hundred topics, and a head
# trained on it agrees clearly less on topics it never saw (docs/bench/head-training.md §5). Here
# the topic of each prompt is one whole English word of the target's own vocabulary, so about
# 11,000 topics, each with a template of some kind.
WORD_TEMPLATES = [
    ("stem", "What is {w}?"), ("stem", "Explain {w} to a beginner."), ("stem", "How does {w} work?"),
    ("humanities", "Tell me three interesting facts about {w}."), ("humanities", "Why does {w} matter?"),
    ("humanities", "How has {w} changed over time?"), ("reasoning", "What are the pros and cons of {w}?"),
    ("writing", "Write a short story that involves {w}."), ("writing", "Write a poem about {w}."),
    ("writing", "Write a short blog post about {w}."), ("writing", "Write an email to a friend about {w}."),
    ("advice", "Give me practical tips about {w}."), ("coding", "Write a Python class that models {w}, and explain it."),
    ("roleplay", "Pretend you are an expert on {w}. Introduce yourself and your work."),
    ("math", "Write and solve a short math word problem about {w}."),
    ("extraction", "List five words related to {w} and say how each one relates to it."),
]


def vocabulary_words(vocab) -> list[str]:
    """Whole lower-case English words of a byte-level BPE vocabulary (``Ġword`` tokens of six
    letters or more), sorted; forms ending in -ed, -ly, -ing are left out as poor topics. Some
    are word pieces (``earthqu``); the target answers those too."""
    words = {t[1:] for t in vocab if t.startswith("Ġ") and len(t) >= 7 and t[1:].isascii() and t[1:].isalpha()
             and t[1:].islower() and not t.endswith(("ed", "ly", "ing"))}
    return sorted(words)


def build_word_prompt_set(words: list[str], seed: int = 0, n: int | None = None) -> list[Prompt]:
    """One prompt per word, with a template drawn by ``seed``; shuffled; the first ``n``."""
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1 (or None for all), got {n}")
    if not words:
        raise ValueError("no words to build prompts from")
    rng = random.Random(seed)
    out = [Prompt(kind, template.format(w=w)) for w in sorted(set(words))
           for kind, template in [rng.choice(WORD_TEMPLATES)]]
    rng.shuffle(out)
    return out if n is None else out[:n]


# Prompts that bring material to work on. MT-bench's prompts often hand the assistant a text (a
# passage to extract from, a paragraph to edit, code to review) and its answers copy from it; ours
# rarely do, and a head trained on them agrees 0.40 where an MT-bench answer continues a token pair
# of its prompt against 0.73 on our held-out answers (docs/bench/head-training.md §8). Here the
# material is one of the target's own finished answers, handed back inside a new first user turn
# with a task on it, so the reply copies, condenses or rewrites text that sits in its prompt.
MATERIAL_TASKS = {
    "any": ["Summarise the following text in two sentences.",
            "Extract every name, place, number and date from the text below and present them as JSON.",
            "List the main points of the following text as bullet points.",
            "Edit the following text to improve its grammar and style, then briefly explain your main changes.",
            "Rewrite the following text so that a ten-year-old can understand it.",
            "Give the following text a title, then rate how clear it is from 1 to 10 and explain why.",
            "Write three questions about the following text, each followed by its answer.",
            "Rewrite the following text as a formal email to a colleague.",
            "What is the main idea of the following text? Answer in one paragraph, quoting it where useful.",
            "Identify one weakness of the following text and suggest how to fix it.",
            "Turn the following text into a short dialogue between two people.",
            "Find the three most important sentences in the text below and copy them exactly."],
    "writing": ["Make the following text more persuasive, keeping its structure.",
                "Shorten the following text to half its length without losing its key points."],
    "roleplay": ["Reply to the following message in character as a cheerful pirate.",
                 "Read the following as a strict editor would and give your feedback in character."],
    "coding": ["Review the following answer: point out any bugs in its code and suggest improvements.",
               "Explain what the code in the following text does, line by line.",
               "Rewrite the code in the following text with clearer variable names and comments."],
    "math": ["Check the following solution step by step. Is the final answer correct?",
             "Explain the following solution to a student who found it confusing."],
    "reasoning": ["Check the reasoning in the following text step by step and point out any flaw."],
    "extraction": ["Turn the information in the following text into a Markdown table."],
    "stem": ["Find any scientific mistakes in the following explanation and correct them."],
    "humanities": ["Which claims in the following text would need a source? List them."],
}
MATERIAL_LAYOUTS = ["{task}\n\n{text}", "{task}\n\n\"\"\"\n{text}\n\"\"\"", "Here is a text:\n\n{text}\n\n{task}",
                    "{text}\n\n---\n{task}"]


def material_prompt(p: Prompt, text: str, rng: random.Random) -> str:
    """A first user turn that hands ``text`` (the target's answer to ``p``) back with a task on it."""
    task = rng.choice(MATERIAL_TASKS["any"] + MATERIAL_TASKS.get(p.kind, []))
    return rng.choice(MATERIAL_LAYOUTS).format(task=task, text=text.strip())
