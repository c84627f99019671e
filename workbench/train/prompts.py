"""Training prompts: templates x topics over the kinds of things chat users ask.

``build_prompts(seed, n)`` is deterministic: the same seed gives the same list, shuffled so any
prefix is a balanced sample of all categories. Paragraphs for summaries, extraction and reading
questions are composed here from small fact tables, never taken from an evaluation set.
"""

from __future__ import annotations

import itertools
import random

TOPICS = [
    "the ocean", "a rainy afternoon", "friendship", "a lighthouse keeper", "autumn leaves", "a lost key",
    "the first day of school", "a small bakery", "city traffic", "a mountain village", "an old bicycle",
    "a robot learning to paint", "the night sky", "a garden in spring", "a long train journey", "a stray cat",
    "moving to a new country", "a forgotten letter", "winning a chess game", "a power outage", "the desert",
    "a grandmother's recipe", "a busy airport", "learning to swim", "a snowstorm", "a street musician",
]
FORMS = [
    "a short poem about {t}", "a haiku about {t}", "a limerick about {t}", "a 150-word short story about {t}",
    "the opening paragraph of a blog post about {t}", "a diary entry about {t}",
    "a persuasive paragraph on why people should care about {t}", "a product description inspired by {t}",
    "a short speech about {t}", "a children's bedtime story about {t}",
]
WRITING_TASKS = [
    "Write an email to my manager asking for {x}.", "Write a polite message to a neighbour about {x}.",
    "Draft a short cover letter for {x}.", "Write a thank-you note to {x}.",
    "Write a social media post announcing {x}.", "Give me five catchy titles for an article about {x}.",
]
WRITING_FILL = [
    "a day off next Friday", "noise late at night", "a junior data analyst job", "a teacher who helped me",
    "our new coffee shop opening", "healthy breakfast ideas", "a volunteer position at the library",
    "a delayed project deadline", "my sister's graduation", "a community clean-up event",
]
ROLES = [
    ("a pirate captain", "Describe the treasure you are searching for."),
    ("a tour guide in Rome", "Welcome a group of tourists and tell them the plan for the day."),
    ("a medieval knight", "Explain your code of honour to a young squire."),
    ("a friendly librarian", "Recommend three books to a teenager who loves adventure."),
    ("a detective", "Explain how you solved your latest case."),
    ("a personal fitness coach", "Give me a plan for my first week of training."),
    ("a chef on a cooking show", "Walk the audience through making a simple pasta dish."),
    ("an astronaut on the space station", "Describe your morning routine."),
    ("a customer support agent", "Help a customer whose package arrived damaged."),
    ("a wise old wizard", "Give advice to an apprentice who is afraid of failing."),
    ("a job interviewer", "Ask me the first three questions of an interview for a sales role."),
    ("a travel agent", "Plan a three-day trip to Japan for a family of four."),
]
CONCEPTS = [
    "photosynthesis", "gravity", "the water cycle", "inflation", "black holes", "vaccines", "electric current",
    "plate tectonics", "DNA replication", "supply and demand", "machine learning", "the greenhouse effect",
    "compound interest", "the immune system", "nuclear fusion", "natural selection", "the internet",
    "climate change", "blockchain", "the speed of light", "antibiotics", "the stock market", "volcanoes",
    "sleep", "recursion", "encryption", "the Pythagorean theorem", "probability", "magnetism", "tides",
]
EXPLAIN = [
    "Explain {c} in simple terms.", "How does {c} work?", "Explain {c} to a ten-year-old.",
    "What are the most common misconceptions about {c}?", "Give me three real-world examples of {c}.",
    "Why is {c} important?", "Summarise the key ideas behind {c} in a few bullet points.",
]
HUMANITIES = [
    "the fall of the Roman Empire", "the Renaissance", "the Industrial Revolution", "the French Revolution",
    "the invention of the printing press", "the Silk Road", "ancient Egyptian religion", "the Cold War",
    "the abolition of slavery", "impressionist painting", "Greek tragedy", "the Enlightenment",
    "utilitarianism", "Stoic philosophy", "the Harlem Renaissance", "the history of jazz",
]
HUM_T = [
    "What were the main causes and consequences of {h}?", "Describe the significance of {h}.",
    "Write a short essay introduction about {h}.", "What can we learn today from {h}?",
    "Compare {h} with a related period or movement of your choice.",
]
CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "returns the n-th Fibonacci number",
    "counts the words in a text", "removes duplicates from a list while keeping order",
    "merges two sorted lists", "finds the largest element of a list", "converts Celsius to Fahrenheit",
    "checks whether a string is a palindrome", "computes the factorial of a number",
    "sorts a list of dictionaries by a given key", "reads a CSV file and prints the average of a column",
    "returns the most frequent character in a string", "flattens a nested list",
    "validates an email address with a regular expression", "implements binary search",
]
LANGS = ["Python", "JavaScript", "C", "Java", "Rust", "Go"]
CODE_T = [
    "Write a {l} function that {k}.", "How would I write a program in {l} that {k}? Explain the code.",
    "Write a {l} function that {k}, and add a few test cases.",
]
CODE_MISC = [
    "What is the difference between a list and a tuple in Python?", "Explain what a SQL JOIN does with an example.",
    "Write a SQL query that finds the ten customers with the highest total order value.",
    "Write a bash command that counts the lines of all .txt files in a folder.",
    "What does the 'git rebase' command do?", "Explain Big-O notation with examples.",
    "What is the difference between a process and a thread?", "Explain what an API is.",
    "Write a regular expression that matches a date like 2024-03-15.", "What is a race condition?",
]
SENTENCES = [
    "Where is the nearest train station?", "I would like to book a table for two tonight.",
    "The weather is beautiful today.", "Could you help me carry these boxes?", "My brother works at a hospital.",
    "We are going to the beach this weekend.", "How much does this jacket cost?", "I forgot my umbrella at home.",
    "The museum opens at nine in the morning.", "Thank you very much for your kind help.",
]
TARGET_LANGS = ["French", "Spanish", "German", "Italian", "Portuguese"]
NAMES = ["Maria Lopez", "James Chen", "Aisha Khan", "Lukas Weber", "Sofia Rossi", "Daniel Okafor", "Emma Novak"]
CITIES = ["Lisbon", "Toronto", "Nairobi", "Osaka", "Melbourne", "Prague", "Lima", "Oslo"]
ORGS = ["a solar panel startup", "a children's hospital", "a regional library", "a bicycle factory",
        "an online bookshop", "a coffee cooperative", "a marine research institute"]
EVENTS = ["opened a new office", "launched a recycling program", "hired forty new staff",
          "won a national award", "cut its energy use by a third", "started a free evening course"]
MONTHS = ["January", "March", "May", "July", "September", "November"]


def _paragraph(rng: random.Random) -> str:
    """A short made-up news paragraph with names, places, dates and numbers."""
    a, b = rng.sample(NAMES, 2)
    org, city, ev = rng.choice(ORGS), rng.choice(CITIES), rng.choice(EVENTS)
    month, year, n = rng.choice(MONTHS), rng.randint(2015, 2024), rng.randint(12, 480)
    return (f"In {month} {year}, {org} based in {city} {ev}. According to its director, {a}, the change "
            f"took almost {rng.randint(2, 11)} months of planning and cost about {n} thousand dollars. "
            f"{b}, who joined the team in {year - rng.randint(1, 6)}, said the staff were proud of the result "
            f"and hoped to expand the work to {rng.choice([c for c in CITIES if c != city])} next year.")


def _context_prompts(rng: random.Random, n: int) -> list[str]:
    asks = [
        "Summarise the following paragraph in two sentences:\n\n{p}",
        "Extract every person, place and date mentioned in this text, as a list:\n\n{p}",
        "Read the text and answer: who is the director, and what did the organisation do?\n\n{p}",
        "Rewrite this paragraph in a more formal tone:\n\n{p}",
        "{p}\n\nWhat is the main point of this paragraph? Answer in one sentence.",
        "Turn this paragraph into a JSON object with the fields organisation, city, year and people:\n\n{p}",
        "Write three quiz questions, with answers, about this text:\n\n{p}",
    ]
    return [rng.choice(asks).format(p=_paragraph(rng)) for _ in range(n)]


def _math_prompts(rng: random.Random, n: int) -> list[str]:
    """Word problems with random numbers (so every one is distinct)."""
    t = [
        "A shop sells pencils at {a} cents each. How much do {b} pencils cost in dollars?",
        "A train travels {a} km in {c} hours. What is its average speed? Show your steps.",
        "Tom has {b} apples. He gives {c} to each of his {d} friends. How many apples are left?",
        "A rectangle is {a} cm long and {c} cm wide. What are its area and perimeter?",
        "If a jacket costs ${a} and is on sale for {d}0% off, what is the sale price?",
        "Solve for x: {c}x + {a} = {b}. Explain each step.",
        "A recipe needs {c} eggs for {d} people. How many eggs are needed for {b} people?",
        "What is {d}0% of {a}? Then add {c} to the result.",
        "Anna saves ${c} every week. How many weeks does she need to save ${a}?",
        "The sum of two numbers is {a} and their difference is {c}. What are the numbers?",
    ]
    out = []
    for _ in range(n):
        a, b, c, d = rng.randint(20, 400), rng.randint(10, 90), rng.randint(2, 12), rng.randint(2, 9)
        out.append(rng.choice(t).format(a=a, b=b, c=c, d=d))
    return out


def _reasoning_prompts(rng: random.Random, n: int) -> list[str]:
    t = [
        "{a} is taller than {b}, and {b} is taller than {c}. Who is the shortest? Explain your reasoning.",
        "If it takes {x} machines {x} minutes to make {x} widgets, how long would {y} machines take to make "
        "{y} widgets?",
        "{a} is older than {b} but younger than {c}. List the three from oldest to youngest.",
        "I have {x} coins, all dimes and nickels, worth {y}0 cents in total. Is that possible? Explain.",
        "{a} says: 'I always lie.' Is this statement true or false? Discuss.",
        "What comes next in the sequence {x}, {y}, {z}, ...? Explain the pattern.",
    ]
    first = [n.split()[0] for n in NAMES]
    out = []
    for _ in range(n):
        a, b, c = rng.sample(first, 3)
        x = rng.randint(2, 9)
        step = rng.randint(2, 7)
        out.append(rng.choice(t).format(a=a, b=b, c=c, x=x, y=x + step, z=x + 2 * step))
    return out


def _fixed_prompts() -> list[str]:
    out = [f"Write {f.format(t=t)}." for f, t in itertools.product(FORMS, TOPICS)]
    out += [w.format(x=x) for w, x in itertools.product(WRITING_TASKS, WRITING_FILL)]
    out += [f"Pretend you are {r}. {task}" for r, task in ROLES]
    out += [f"You are {r}. Stay in character. {task}" for r, task in ROLES]
    out += [e.format(c=c) for e, c in itertools.product(EXPLAIN, CONCEPTS)]
    out += [h.format(h=x) for h, x in itertools.product(HUM_T, HUMANITIES)]
    out += [c.format(l=lang, k=k) for c, lang, k in itertools.product(CODE_T, LANGS, CODE_TASKS)]
    out += CODE_MISC
    out += [f"Translate into {lang}: \"{s}\"" for lang, s in itertools.product(TARGET_LANGS, SENTENCES)]
    return out


def build_prompts(seed: int = 0, n: int | None = None) -> list[str]:
    """Distinct user prompts, shuffled by ``seed``; the first ``n`` (all if None)."""
    rng = random.Random(seed)
    fixed = _fixed_prompts()
    rng.shuffle(fixed)
    fixed = fixed[:900]  # keep the template-product categories from swamping the rest
    pool = fixed + _math_prompts(rng, 150) + _reasoning_prompts(rng, 80) + _context_prompts(rng, 200)
    seen, out = set(), []
    for p in pool:
        if p not in seen:
            seen.add(p)
            out.append(p)
    rng.shuffle(out)
    return out if n is None else out[:n]
