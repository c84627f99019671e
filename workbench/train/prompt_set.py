"""The large training prompt set (10,000+ distinct prompts) and the follow-up turns built on
the target's own answers.

``build_prompt_set(seed, n)`` is deterministic and shuffled by ``seed`` so any prefix is a
balanced sample of every kind: writing, roleplay, reasoning, math, coding, extraction, STEM,
humanities (Spec-Bench's categories, with prompts of our own), plus advice, comparisons and
translation. Every prompt carries its ``kind`` so a follow-up fits it (``followup``). Word
problems and paragraphs draw their numbers and names from a seeded generator; nothing is taken
from an evaluation set (``tests/test_train.py`` checks the Spec-Bench questions).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from workbench.train import prompts as base


@dataclass(frozen=True)
class Prompt:
    kind: str  # writing, roleplay, reasoning, math, coding, extraction, stem, humanities, advice, translation
    text: str


TOPICS = base.TOPICS + [
    "a quiet library", "an abandoned amusement park", "a village festival", "the last day of summer",
    "a jazz club at midnight", "a broken clock", "a family reunion", "a fishing boat at dawn", "a new neighbour",
    "a secret garden", "the smell of fresh bread", "a thunderstorm", "a childhood toy", "an empty stadium",
    "a market in Marrakesh", "a lost dog finding its way home", "a volcano waking up", "a paper airplane",
    "a hospital night shift", "a wedding in the rain", "an old photograph", "the first snowfall",
    "a spaceship leaving Earth", "a violin teacher", "a road trip across the desert", "a bee colony",
    "a retired astronaut", "a bookshop cat", "a tree house", "a river in flood", "a town without cars",
    "a hidden waterfall", "the morning commute", "a chess club", "a long-distance phone call",
    "a kite festival", "a storm at sea", "a haunted house", "a penguin colony", "a night market",
    "a farmer's first harvest", "a sunrise over the mountains", "a time traveller", "a tiny apartment",
    "a marathon runner", "an ancient map", "a school science fair", "the last bus home", "a lighthouse in fog",
    "a dragon who is afraid of fire", "a coral reef", "a city at night", "a piano in an empty hall",
    "a first job", "a street food stall",
]
FORMS = base.FORMS + [
    "a sonnet about {t}", "a free-verse poem about {t}", "a 100-word flash fiction piece about {t}",
    "a dialogue between two friends about {t}", "a news headline and a short article about {t}",
    "a song chorus about {t}", "a letter to a future self about {t}", "a riddle whose answer is {t}",
    "a movie plot summary about {t}", "a travel-guide paragraph about {t}",
]
WRITING_TASKS = base.WRITING_TASKS + [
    "Write a short apology email about {x}.", "Write a formal complaint letter about {x}.",
    "Write a two-paragraph newsletter item about {x}.", "Write a short LinkedIn post about {x}.",
    "Write a text message inviting friends to {x}.", "Write a short press release about {x}.",
    "Outline a five-minute presentation about {x}.", "Write a friendly reminder email about {x}.",
    "Write an advertisement for {x}.",
]
WRITING_FILL = base.WRITING_FILL + [
    "a missed meeting", "a broken washing machine", "our team's quarterly results", "a charity bake sale",
    "a new yoga class", "a software update", "a neighbourhood book club", "a late delivery",
    "an internship at a museum", "a surprise birthday party", "a new recycling rule at the office",
    "a summer reading challenge", "a local farmers' market", "a power cut in our building",
    "a photography workshop", "a hiking trip next month", "a change of office hours", "a lost and found box",
    "a fundraising run", "a new bicycle lane",
]
ROLES = [r for r, _ in base.ROLES] + [
    "a museum curator", "a zookeeper", "a ship's navigator", "a Victorian inventor", "a park ranger",
    "a nervous first-time pilot", "a baker who only speaks in food metaphors", "a sports commentator",
    "a kind nurse", "a strict but fair teacher", "a news reporter at a festival", "a gardener",
    "a retired detective", "a dragon guarding a library", "a barista", "a mountain guide",
    "a time-travelling historian", "a robot butler",
]
ROLE_TASKS = [task for _, task in base.ROLES] + [
    "Introduce yourself and describe a typical day.", "What is the hardest part of your work?",
    "Tell me about the most memorable day of your career.", "Give a newcomer three pieces of advice.",
    "Describe the place where you work.", "Explain what you would change about your job.",
    "Answer a child who asks you why your work matters.", "Describe a mistake you once made and what you learned.",
]
CONCEPTS = base.CONCEPTS + [
    "osmosis", "entropy", "the Doppler effect", "photosynthesis versus respiration", "neural networks",
    "the periodic table", "quantum entanglement", "the carbon cycle", "vectors", "derivatives", "integrals",
    "statistical significance", "the central limit theorem", "hash tables", "sorting algorithms",
    "the theory of relativity", "buoyancy", "friction", "chemical bonds", "acids and bases", "evolution",
    "the nervous system", "cell division", "the solar system", "exoplanets", "renewable energy", "batteries",
    "semiconductors", "radio waves", "sound waves", "rainbows", "earthquakes", "hurricanes", "ocean currents",
    "the ozone layer", "prime numbers", "fractals", "game theory", "opportunity cost", "interest rates",
    "exchange rates", "taxes", "the placebo effect", "memory in the brain", "habits", "vaccines and herd immunity",
    "3D printing", "GPS", "solar panels", "wind turbines", "the Fibonacci sequence", "matrix multiplication",
    "logarithms", "exponential growth", "the scientific method", "peer review", "data compression", "caching",
    "operating systems", "compilers",
]
EXPLAIN = base.EXPLAIN + [
    "Define {c} briefly and give an analogy.", "Write a short lesson plan that teaches {c}.",
    "What would happen if {c} did not exist or stopped working?", "Explain {c} in exactly three sentences.",
    "What questions do students usually ask about {c}, and how would you answer them?",
    "Explain {c} and how scientists discovered or developed it.", "Write a short quiz about {c}, with answers.",
]
HUMANITIES = base.HUMANITIES + [
    "the Reformation", "the Meiji Restoration", "the Mongol Empire", "the American Civil War", "the Ottoman Empire",
    "the Scientific Revolution", "the civil rights movement", "the Cuban Missile Crisis", "the Magna Carta",
    "the Byzantine Empire", "the Inca Empire", "the Age of Exploration", "existentialism", "Confucianism",
    "Buddhist philosophy", "the social contract", "Romanticism in literature", "modernist architecture",
    "the Bauhaus", "Shakespeare's tragedies", "the epic of Gilgamesh", "the Olympic Games in antiquity",
    "the history of the alphabet", "the Great Depression", "the Marshall Plan", "the fall of the Berlin Wall",
    "decolonisation in Africa", "the Mughal Empire", "the Viking Age", "the Black Death", "baroque music",
    "the invention of photography", "surrealism", "the history of democracy",
]
HUM_T = base.HUM_T + [
    "Give a short timeline of {h}.", "Who were the key figures of {h}, and what did they do?",
    "Explain {h} to a high-school student.", "What are common myths about {h}?",
    "How do historians disagree about {h}?", "Write a short debate opening arguing that {h} changed the world.",
    "Suggest three books or sources for learning about {h}, and say why.",
]
CODE_TASKS = base.CODE_TASKS + [
    "reverses the words of a sentence", "counts the vowels in a string", "checks whether two strings are anagrams",
    "computes the greatest common divisor of two numbers", "converts a decimal number to binary",
    "finds the second largest number in a list", "rotates a list by k positions", "checks balanced parentheses",
    "returns all permutations of a string", "implements a stack with push and pop",
    "implements a simple queue", "computes the sum of the digits of a number",
    "finds the intersection of two lists", "capitalises the first letter of every word",
    "counts how many times each word appears in a text", "generates the first n prime numbers",
    "implements bubble sort", "implements quicksort", "computes the mean and median of a list",
    "parses a date string and prints the day of the week", "transposes a matrix", "checks for a leap year",
    "finds the longest word in a sentence", "removes all whitespace from a string",
]
LANGS = base.LANGS + ["TypeScript", "C++"]
CODE_T = base.CODE_T + [
    "Write {l} code that {k}. Keep it short.", "Show me an idiomatic {l} function that {k}, with comments.",
    "Write a {l} function that {k}, and explain its time complexity.",
]
CODE_MISC = base.CODE_MISC + [
    "What is the difference between a stack and a queue?", "Explain what a hash function is.",
    "What is dependency injection?", "Explain REST versus GraphQL.", "What is the difference between TCP and UDP?",
    "Explain what a Docker container is.", "What is a memory leak and how do you find one?",
    "Explain the difference between SQL and NoSQL databases.", "What does a load balancer do?",
    "Explain unit tests versus integration tests.", "What is functional programming?",
    "What is the difference between == and is in Python?", "Explain how garbage collection works.",
    "What is a deadlock and how can it be avoided?", "What is the difference between an interface and a class?",
    "Explain what a virtual environment in Python is for.", "What is continuous integration?",
    "Explain the model-view-controller pattern.", "What is a closure in JavaScript?", "Explain recursion with code.",
]
SENTENCES = base.SENTENCES + [
    "Can you recommend a good restaurant nearby?", "The meeting has been moved to Thursday.",
    "I am learning to play the guitar.", "Please close the window, it is cold.", "Our flight was delayed by two hours.",
    "She reads a book every week.", "Is there a pharmacy open on Sunday?", "I need a ticket to the city centre.",
    "The children are playing in the park.", "This soup tastes delicious.", "What time does the last train leave?",
    "I have lived here for five years.", "We should plant more trees in our street.", "My phone battery is empty.",
    "Do you know where I can buy stamps?", "It was a pleasure to meet you.", "The library is closed on Mondays.",
    "He wants to become a doctor.", "Let's meet in front of the cinema.", "I am allergic to peanuts.",
]
TARGET_LANGS = base.TARGET_LANGS + ["Dutch"]
SITUATIONS = [
    "I can't fall asleep at night", "I want to start running", "I have a job interview tomorrow",
    "I keep procrastinating on my homework", "I want to save money each month", "I just moved to a new city",
    "my houseplants keep dying", "I want to learn a new language", "I feel stressed at work",
    "I want to eat healthier on a budget", "I have to give a speech at a wedding", "I want to read more books",
    "my teenager spends too much time on the phone", "I want to start a small online business",
    "I am planning my first camping trip", "I want to get better at chess", "I need to organise a team meeting",
    "I want to reduce my plastic waste", "I am nervous about flying", "I want to learn to cook",
    "I have too many emails", "I want to make new friends as an adult", "I am preparing for a math exam",
    "I want to adopt a dog", "I want to improve my handwriting", "I am starting university next month",
    "I want to build a daily writing habit", "my laptop is very slow", "I want to plan a birthday party",
    "I need to negotiate a salary",
]
ADVICE_T = [
    "{s}. What should I do?", "{s}. Give me a step-by-step plan.", "{s}. What are five practical tips?",
    "{s}. What mistakes should I avoid?", "{s}. Can you make me a one-week plan?",
    "My friend says: '{s}.' How can I help them?",
]
PAIRS = [
    ("cats", "dogs"), ("tea", "coffee"), ("trains", "planes"), ("renting", "buying a home"), ("Python", "Java"),
    ("e-books", "paper books"), ("city life", "country life"), ("solar power", "wind power"),
    ("working from home", "working in an office"), ("electric cars", "petrol cars"), ("summer", "winter"),
    ("capitalism", "socialism"), ("the violin", "the piano"), ("running", "swimming"), ("Mars", "Venus"),
    ("viruses", "bacteria"), ("weather", "climate"), ("a democracy", "a monarchy"), ("mitosis", "meiosis"),
    ("stocks", "bonds"), ("RAM", "storage"), ("impressionism", "expressionism"), ("Plato", "Aristotle"),
    ("football", "basketball"), ("lakes", "seas"),
]
COMPARE_T = [
    "Compare {a} and {b}.", "What are the pros and cons of {a} versus {b}?",
    "Write a short table comparing {a} and {b}.", "Which is better for a beginner, {a} or {b}? Explain.",
]
MATH_T = [
    "A bookshop sells {b} books on Monday and {a} books on Tuesday. How many books did it sell in total, "
    "and what is the average per day?",
    "A car uses {c} litres of fuel per 100 km. How much fuel does it need for {a} km?",
    "A class has {b} students and {d}0% of them passed an exam. How many students passed?",
    "A water tank holds {a} litres and leaks {c} litres per hour. How long until it is empty?",
    "Find the average of {c}, {d}, {b} and {a}.", "What is {a} divided by {c}, rounded to two decimals?",
    "A garden is {c} m by {d} m. How many square metres of grass seed are needed, and how long is the fence?",
    "A phone plan costs ${c} per month plus ${d} per gigabyte. What is the bill for {b} gigabytes?",
    "Sam reads {c} pages a day. How many days does he need for a {a}-page book?",
    "A bus leaves at 8:{b} and the trip takes {a} minutes. When does it arrive?",
    "The price of a bike rose from ${a} to ${e}. What is the percentage increase?",
    "Solve the system: x + y = {b}, x - y = {c}.", "What is the area of a circle with radius {c} cm?",
    "A triangle has sides {c}, {d} and {c2} cm. Is it a right triangle? Explain.",
    "If {d} workers build a wall in {c} days, how long would {d2} workers take?",
    "A store offers buy {d} get 1 free on items costing ${c}. How much do {b} items cost?",
    "Convert {a} minutes into hours and minutes.", "What is the probability of rolling a total of {c} with two dice?",
    "Simplify the fraction {b}/{a}.", "A population of {a} grows by {d}% per year. What is it after {c} years?",
]


PEOPLE = ["Ava", "Ben", "Chloe", "Diego", "Elif", "Farah", "George", "Hana", "Ivan", "Julia", "Kofi", "Lena"]
REASONING_T = [
    "{a} finishes a race before {b}, and {c} finishes after {b}. Who came second? Explain.",
    "{a} has {x} more marbles than {b}. Together they have {z}. How many does each have? Reason step by step.",
    "Every friend of {a} likes music. {b} is a friend of {a}. What can we conclude about {b}? What can we not?",
    "{a}, {b} and {c} each own one pet: a cat, a dog and a fish. {a} is allergic to fur and {b} does not own "
    "the dog. Who owns which pet?",
    "A clock shows {x}:00. What angle do the hour and minute hands make? Explain your reasoning.",
    "If {a} is twice as old as {b} and {b} is {y} years old, how old will {a} be in {x} years?",
    "{a} says {b} is lying. {b} says {c} is lying. {c} says both {a} and {b} are lying. Who tells the truth?",
    "A snail climbs {y} metres up a wall each day and slides back {x} metres each night. The wall is {z} metres "
    "high. On which day does it reach the top?",
]


def _reasoning(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        a, b, c = rng.sample(PEOPLE, 3)
        x = rng.randint(1, 6)
        y = x + rng.randint(1, 5)
        out.append(rng.choice(REASONING_T).format(a=a, b=b, c=c, x=x, y=y, z=y * rng.randint(3, 9)))
    return out


def _stem(rng: random.Random, n: int) -> list[str]:
    """Word problems and arithmetic with fresh numbers (every one distinct)."""
    out = []
    for _ in range(n):
        a, b, c, d = rng.randint(20, 900), rng.randint(10, 59), rng.randint(2, 12), rng.randint(2, 9)
        out.append(rng.choice(MATH_T).format(a=a, b=b, c=c, d=d, e=a + rng.randint(5, 200), c2=c + rng.randint(1, 5),
                                             d2=d + rng.randint(1, 6)))
    return out


def _fixed() -> list[Prompt]:
    p = [Prompt("writing", f"Write {f.format(t=t)}.") for f, t in itertools.product(FORMS, TOPICS)]
    p += [Prompt("writing", w.format(x=x)) for w, x in itertools.product(WRITING_TASKS, WRITING_FILL)]
    p += [Prompt("roleplay", f"{frame.format(r=r)} {task}") for frame, r, task in
          itertools.product(["Pretend you are {r}.", "You are {r}. Stay in character."], ROLES, ROLE_TASKS)]
    p += [Prompt("stem", e.format(c=c)) for e, c in itertools.product(EXPLAIN, CONCEPTS)]
    p += [Prompt("humanities", h.format(h=x)) for h, x in itertools.product(HUM_T, HUMANITIES)]
    p += [Prompt("coding", c.format(l=lang, k=k)) for c, lang, k in itertools.product(CODE_T, LANGS, CODE_TASKS)]
    p += [Prompt("coding", c) for c in CODE_MISC]
    p += [Prompt("translation", f"Translate into {lang}: \"{s}\"") for lang, s in itertools.product(TARGET_LANGS, SENTENCES)]
    p += [Prompt("advice", t.format(s=s[0].upper() + s[1:])) for t, s in itertools.product(ADVICE_T, SITUATIONS)]
    p += [Prompt("humanities" if i % 2 else "stem", t.format(a=a, b=b))
          for i, (t, (a, b)) in enumerate(itertools.product(COMPARE_T, PAIRS))]
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
    kept += [Prompt("math", t) for t in _stem(rng, 1100) + base._math_prompts(rng, 300)]
    kept += [Prompt("reasoning", t) for t in base._reasoning_prompts(rng, 300) + _reasoning(rng, 900)]
    kept += [Prompt("extraction", t) for t in base._context_prompts(rng, 1200)]
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
