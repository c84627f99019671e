"""The template set's raw material: templates, the topics that fill them, and the names,
places and numbers that word problems and paragraphs draw from.

Plain lists, read by ``prompt_set.build_prompt_set``. Their order is part of the set: the
products are taken in list order and then shuffled by the seed, so a list edited in the middle
changes which prompt lands in which shard (``tests/test_train_data.py`` pins the set's digest).
"""

from __future__ import annotations


# writing: forms x topics, and everyday writing tasks x what they are about
TOPICS = [
    "the ocean", "a rainy afternoon", "friendship", "a lighthouse keeper", "autumn leaves", "a lost key",
    "the first day of school", "a small bakery", "city traffic", "a mountain village", "an old bicycle",
    "a robot learning to paint", "the night sky", "a garden in spring", "a long train journey", "a stray cat",
    "moving to a new country", "a forgotten letter", "winning a chess game", "a power outage", "the desert",
    "a grandmother's recipe", "a busy airport", "learning to swim", "a snowstorm", "a street musician",
    "a quiet library", "an abandoned amusement park", "a village festival", "the last day of summer",
    "a jazz club at midnight", "a broken clock", "a family reunion", "a fishing boat at dawn", "a new neighbour",
    "a secret garden", "the smell of fresh bread", "a thunderstorm", "a childhood toy", "an empty stadium",
    "a market in Marrakesh", "a lost dog finding its way home", "a volcano waking up", "a paper airplane",
    "a hospital night shift", "a wedding in the rain", "an old photograph", "the first snowfall",
    "a spaceship leaving Earth", "a violin teacher", "a road trip across the desert", "a bee colony",
    "a retired astronaut", "a bookshop cat", "a tree house", "a river in flood", "a town without cars",
    "a hidden waterfall", "the morning commute", "a chess club", "a long-distance phone call", "a kite festival",
    "a storm at sea", "a haunted house", "a penguin colony", "a night market", "a farmer's first harvest",
    "a sunrise over the mountains", "a time traveller", "a tiny apartment", "a marathon runner", "an ancient map",
    "a school science fair", "the last bus home", "a lighthouse in fog", "a dragon who is afraid of fire",
    "a coral reef", "a city at night", "a piano in an empty hall", "a first job", "a street food stall",
]
FORMS = [
    "a short poem about {t}", "a haiku about {t}", "a limerick about {t}", "a 150-word short story about {t}",
    "the opening paragraph of a blog post about {t}", "a diary entry about {t}",
    "a persuasive paragraph on why people should care about {t}", "a product description inspired by {t}",
    "a short speech about {t}", "a children's bedtime story about {t}", "a sonnet about {t}",
    "a free-verse poem about {t}", "a 100-word flash fiction piece about {t}",
    "a dialogue between two friends about {t}", "a news headline and a short article about {t}",
    "a song chorus about {t}", "a letter to a future self about {t}", "a riddle whose answer is {t}",
    "a movie plot summary about {t}", "a travel-guide paragraph about {t}",
]
WRITING_TASKS = [
    "Write an email to my manager asking for {x}.", "Write a polite message to a neighbour about {x}.",
    "Draft a short cover letter for {x}.", "Write a thank-you note to {x}.",
    "Write a social media post announcing {x}.", "Give me five catchy titles for an article about {x}.",
    "Write a short apology email about {x}.", "Write a formal complaint letter about {x}.",
    "Write a two-paragraph newsletter item about {x}.", "Write a short LinkedIn post about {x}.",
    "Write a text message inviting friends to {x}.", "Write a short press release about {x}.",
    "Outline a five-minute presentation about {x}.", "Write a friendly reminder email about {x}.",
    "Write an advertisement for {x}.",
]
WRITING_FILL = [
    "a day off next Friday", "noise late at night", "a junior data analyst job", "a teacher who helped me",
    "our new coffee shop opening", "healthy breakfast ideas", "a volunteer position at the library",
    "a delayed project deadline", "my sister's graduation", "a community clean-up event", "a missed meeting",
    "a broken washing machine", "our team's quarterly results", "a charity bake sale", "a new yoga class",
    "a software update", "a neighbourhood book club", "a late delivery", "an internship at a museum",
    "a surprise birthday party", "a new recycling rule at the office", "a summer reading challenge",
    "a local farmers' market", "a power cut in our building", "a photography workshop", "a hiking trip next month",
    "a change of office hours", "a lost and found box", "a fundraising run", "a new bicycle lane",
]

# role-play: every role with every task, in two framings
ROLES = [
    "a pirate captain", "a tour guide in Rome", "a medieval knight", "a friendly librarian", "a detective",
    "a personal fitness coach", "a chef on a cooking show", "an astronaut on the space station",
    "a customer support agent", "a wise old wizard", "a job interviewer", "a travel agent", "a museum curator",
    "a zookeeper", "a ship's navigator", "a Victorian inventor", "a park ranger", "a nervous first-time pilot",
    "a baker who only speaks in food metaphors", "a sports commentator", "a kind nurse", "a strict but fair teacher",
    "a news reporter at a festival", "a gardener", "a retired detective", "a dragon guarding a library", "a barista",
    "a mountain guide", "a time-travelling historian", "a robot butler",
]
ROLE_TASKS = [
    "Describe the treasure you are searching for.", "Welcome a group of tourists and tell them the plan for the day.",
    "Explain your code of honour to a young squire.", "Recommend three books to a teenager who loves adventure.",
    "Explain how you solved your latest case.", "Give me a plan for my first week of training.",
    "Walk the audience through making a simple pasta dish.", "Describe your morning routine.",
    "Help a customer whose package arrived damaged.", "Give advice to an apprentice who is afraid of failing.",
    "Ask me the first three questions of an interview for a sales role.",
    "Plan a three-day trip to Japan for a family of four.", "Introduce yourself and describe a typical day.",
    "What is the hardest part of your work?", "Tell me about the most memorable day of your career.",
    "Give a newcomer three pieces of advice.", "Describe the place where you work.",
    "Explain what you would change about your job.", "Answer a child who asks you why your work matters.",
    "Describe a mistake you once made and what you learned.",
]

# STEM and humanities: explanation templates x concepts and periods
CONCEPTS = [
    "photosynthesis", "gravity", "the water cycle", "inflation", "black holes", "vaccines", "electric current",
    "plate tectonics", "DNA replication", "supply and demand", "machine learning", "the greenhouse effect",
    "compound interest", "the immune system", "nuclear fusion", "natural selection", "the internet", "climate change",
    "blockchain", "the speed of light", "antibiotics", "the stock market", "volcanoes", "sleep", "recursion",
    "encryption", "the Pythagorean theorem", "probability", "magnetism", "tides", "osmosis", "entropy",
    "the Doppler effect", "photosynthesis versus respiration", "neural networks", "the periodic table",
    "quantum entanglement", "the carbon cycle", "vectors", "derivatives", "integrals", "statistical significance",
    "the central limit theorem", "hash tables", "sorting algorithms", "the theory of relativity", "buoyancy",
    "friction", "chemical bonds", "acids and bases", "evolution", "the nervous system", "cell division",
    "the solar system", "exoplanets", "renewable energy", "batteries", "semiconductors", "radio waves", "sound waves",
    "rainbows", "earthquakes", "hurricanes", "ocean currents", "the ozone layer", "prime numbers", "fractals",
    "game theory", "opportunity cost", "interest rates", "exchange rates", "taxes", "the placebo effect",
    "memory in the brain", "habits", "vaccines and herd immunity", "3D printing", "GPS", "solar panels",
    "wind turbines", "the Fibonacci sequence", "matrix multiplication", "logarithms", "exponential growth",
    "the scientific method", "peer review", "data compression", "caching", "operating systems", "compilers",
]
EXPLAIN = [
    "Explain {c} in simple terms.", "How does {c} work?", "Explain {c} to a ten-year-old.",
    "What are the most common misconceptions about {c}?", "Give me three real-world examples of {c}.",
    "Why is {c} important?", "Summarise the key ideas behind {c} in a few bullet points.",
    "Define {c} briefly and give an analogy.", "Write a short lesson plan that teaches {c}.",
    "What would happen if {c} did not exist or stopped working?", "Explain {c} in exactly three sentences.",
    "What questions do students usually ask about {c}, and how would you answer them?",
    "Explain {c} and how scientists discovered or developed it.", "Write a short quiz about {c}, with answers.",
]
HUMANITIES = [
    "the fall of the Roman Empire", "the Renaissance", "the Industrial Revolution", "the French Revolution",
    "the invention of the printing press", "the Silk Road", "ancient Egyptian religion", "the Cold War",
    "the abolition of slavery", "impressionist painting", "Greek tragedy", "the Enlightenment", "utilitarianism",
    "Stoic philosophy", "the Harlem Renaissance", "the history of jazz", "the Reformation", "the Meiji Restoration",
    "the Mongol Empire", "the American Civil War", "the Ottoman Empire", "the Scientific Revolution",
    "the civil rights movement", "the Cuban Missile Crisis", "the Magna Carta", "the Byzantine Empire",
    "the Inca Empire", "the Age of Exploration", "existentialism", "Confucianism", "Buddhist philosophy",
    "the social contract", "Romanticism in literature", "modernist architecture", "the Bauhaus",
    "Shakespeare's tragedies", "the epic of Gilgamesh", "the Olympic Games in antiquity",
    "the history of the alphabet", "the Great Depression", "the Marshall Plan", "the fall of the Berlin Wall",
    "decolonisation in Africa", "the Mughal Empire", "the Viking Age", "the Black Death", "baroque music",
    "the invention of photography", "surrealism", "the history of democracy",
]
HUM_T = [
    "What were the main causes and consequences of {h}?", "Describe the significance of {h}.",
    "Write a short essay introduction about {h}.", "What can we learn today from {h}?",
    "Compare {h} with a related period or movement of your choice.", "Give a short timeline of {h}.",
    "Who were the key figures of {h}, and what did they do?", "Explain {h} to a high-school student.",
    "What are common myths about {h}?", "How do historians disagree about {h}?",
    "Write a short debate opening arguing that {h} changed the world.",
    "Suggest three books or sources for learning about {h}, and say why.",
]

# coding: templates x languages x tasks, and questions of their own
CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "returns the n-th Fibonacci number",
    "counts the words in a text", "removes duplicates from a list while keeping order", "merges two sorted lists",
    "finds the largest element of a list", "converts Celsius to Fahrenheit",
    "checks whether a string is a palindrome", "computes the factorial of a number",
    "sorts a list of dictionaries by a given key", "reads a CSV file and prints the average of a column",
    "returns the most frequent character in a string", "flattens a nested list",
    "validates an email address with a regular expression", "implements binary search",
    "reverses the words of a sentence", "counts the vowels in a string", "checks whether two strings are anagrams",
    "computes the greatest common divisor of two numbers", "converts a decimal number to binary",
    "finds the second largest number in a list", "rotates a list by k positions", "checks balanced parentheses",
    "returns all permutations of a string", "implements a stack with push and pop", "implements a simple queue",
    "computes the sum of the digits of a number", "finds the intersection of two lists",
    "capitalises the first letter of every word", "counts how many times each word appears in a text",
    "generates the first n prime numbers", "implements bubble sort", "implements quicksort",
    "computes the mean and median of a list", "parses a date string and prints the day of the week",
    "transposes a matrix", "checks for a leap year", "finds the longest word in a sentence",
    "removes all whitespace from a string",
]
LANGS = ["Python", "JavaScript", "C", "Java", "Rust", "Go", "TypeScript", "C++"]
CODE_T = [
    "Write a {l} function that {k}.", "How would I write a program in {l} that {k}? Explain the code.",
    "Write a {l} function that {k}, and add a few test cases.", "Write {l} code that {k}. Keep it short.",
    "Show me an idiomatic {l} function that {k}, with comments.",
    "Write a {l} function that {k}, and explain its time complexity.",
]
CODE_MISC = [
    "What is the difference between a list and a tuple in Python?", "Explain what a SQL JOIN does with an example.",
    "Write a SQL query that finds the ten customers with the highest total order value.",
    "Write a bash command that counts the lines of all .txt files in a folder.",
    "What does the 'git rebase' command do?", "Explain Big-O notation with examples.",
    "What is the difference between a process and a thread?", "Explain what an API is.",
    "Write a regular expression that matches a date like 2024-03-15.", "What is a race condition?",
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

# translation: sentences x languages
SENTENCES = [
    "Where is the nearest train station?", "I would like to book a table for two tonight.",
    "The weather is beautiful today.", "Could you help me carry these boxes?", "My brother works at a hospital.",
    "We are going to the beach this weekend.", "How much does this jacket cost?", "I forgot my umbrella at home.",
    "The museum opens at nine in the morning.", "Thank you very much for your kind help.",
    "Can you recommend a good restaurant nearby?", "The meeting has been moved to Thursday.",
    "I am learning to play the guitar.", "Please close the window, it is cold.",
    "Our flight was delayed by two hours.", "She reads a book every week.", "Is there a pharmacy open on Sunday?",
    "I need a ticket to the city centre.", "The children are playing in the park.", "This soup tastes delicious.",
    "What time does the last train leave?", "I have lived here for five years.",
    "We should plant more trees in our street.", "My phone battery is empty.", "Do you know where I can buy stamps?",
    "It was a pleasure to meet you.", "The library is closed on Mondays.", "He wants to become a doctor.",
    "Let's meet in front of the cinema.", "I am allergic to peanuts.",
]
TARGET_LANGS = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch"]

# advice and comparisons
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

# math: word problems whose numbers a seeded generator draws (``{a}``..``{d}``; MATH_T also
# ``{e}``, ``{c2}``, ``{d2}``, derived from them)
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
ARITHMETIC_T = [
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

# reasoning: puzzles over drawn names and numbers
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
LOGIC_T = [
    "{a} is taller than {b}, and {b} is taller than {c}. Who is the shortest? Explain your reasoning.",
    "If it takes {x} machines {x} minutes to make {x} widgets, how long would {y} machines take to make "
    "{y} widgets?",
    "{a} is older than {b} but younger than {c}. List the three from oldest to youngest.",
    "I have {x} coins, all dimes and nickels, worth {y}0 cents in total. Is that possible? Explain.",
    "{a} says: 'I always lie.' Is this statement true or false? Discuss.",
    "What comes next in the sequence {x}, {y}, {z}, ...? Explain the pattern.",
]

# extraction: tasks on a made-up news paragraph (``prompt_set._paragraph``)
PARAGRAPH_T = [
    "Summarise the following paragraph in two sentences:\n\n{p}",
    "Extract every person, place and date mentioned in this text, as a list:\n\n{p}",
    "Read the text and answer: who is the director, and what did the organisation do?\n\n{p}",
    "Rewrite this paragraph in a more formal tone:\n\n{p}",
    "{p}\n\nWhat is the main point of this paragraph? Answer in one sentence.",
    "Turn this paragraph into a JSON object with the fields organisation, city, year and people:\n\n{p}",
    "Write three quiz questions, with answers, about this text:\n\n{p}",
]
NAMES = ["Maria Lopez", "James Chen", "Aisha Khan", "Lukas Weber", "Sofia Rossi", "Daniel Okafor", "Emma Novak"]
CITIES = ["Lisbon", "Toronto", "Nairobi", "Osaka", "Melbourne", "Prague", "Lima", "Oslo"]
ORGS = [
    "a solar panel startup", "a children's hospital", "a regional library", "a bicycle factory", "an online bookshop",
    "a coffee cooperative", "a marine research institute",
]
EVENTS = [
    "opened a new office", "launched a recycling program", "hired forty new staff", "won a national award",
    "cut its energy use by a third", "started a free evening course",
]
MONTHS = ["January", "March", "May", "July", "September", "November"]
