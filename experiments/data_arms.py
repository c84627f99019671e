"""The two data arms of docs/bench/head-training.md, as prompts files for
``python -m workbench.train generate --prompts FILE``:

    python -m experiments.data_arms words --out ~/.cache/workbench/word-prompts.jsonl
    python -m workbench.train generate --prompts ~/.cache/workbench/word-prompts.jsonl --out ~/.cache/workbench/ab-B
    python -m experiments.data_arms material --data ~/.cache/workbench/ab-C --out ~/.cache/workbench/material.jsonl
    python -m workbench.train generate --prompts ~/.cache/workbench/material.jsonl --samples 0 --followup-frac 0 \\
        --out ~/.cache/workbench/ab-C-material

``words`` (arm B, head-training.md §6: does topic breadth close the MT-bench gap?): the template
set names a few hundred topics, and a head trained on it agrees clearly less on topics it never
saw (§5). Here the topic of each prompt is one whole English word of the target's own vocabulary,
about 11,800 topics for SmolLM2, each with one of 16 templates (``build_word_prompt_set``),
shuffled by ``--seed``: the file's order is the order the arm's shards were made in.

``material`` (arm C, §8: do prompts that bring material teach the head to copy from its
prompt?): MT-bench's prompts often hand the assistant a text (a passage to extract from, a
paragraph to edit, code to review) and its answers copy from it; ours rarely do. Here the
material is one of the target's own finished greedy answers from a ``generate`` directory
(``--data``), handed back inside a new first user turn with a task on it (``material_prompt``),
for a ``--frac`` share of its prompts; ``generate --prompts`` then decodes the replies greedily.
The share and the tasks are drawn from the stream the generator's ``--material-frac`` option
drew from when the arm was measured, so the same greedy answers give the same material turns.
The answers of prompts that training holds out (every ``--val-every``-th) are not handed back.
"""

from __future__ import annotations

import json
import random
from itertools import groupby
from pathlib import Path

from workbench.errors import ArgumentParser, UserError, as_user_error, reports_user_errors
from workbench.train.prompt_set import Prompt

# One prompt per word: each template's kind picks the follow-ups that fit it.
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


# The tasks a material turn sets on the text it hands back: any kind's, and the source prompt's kind's own.
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
MATERIAL_MAX_TOKENS = 320  # longer answers are not handed back (the reply would start past 350 context tokens)


def material_prompt(p: Prompt, text: str, rng: random.Random) -> str:
    """A first user turn that hands ``text`` (the target's answer to ``p``) back with a task on it."""
    task = rng.choice(MATERIAL_TASKS["any"] + MATERIAL_TASKS.get(p.kind, []))
    return rng.choice(MATERIAL_LAYOUTS).format(task=task, text=text.strip())


def greedy_answers(data: Path):
    """(shard, prompt index, answer ids) of each prompt's greedy first answer in the shards of
    ``data``, shard by shard, in the order the generator decoded them."""
    from safetensors.torch import load_file

    from workbench.train.shards import shard_files

    for path in shard_files(data):
        sh, seen = load_file(str(path)), set()
        starts, plens = sh["starts"].tolist(), sh["prompt_lens"].tolist()
        for i, index in enumerate(sh["prompt_index"].tolist()):
            if float(sh["temperature"][i]) == 0.0 and int(sh["turn"][i]) == 1 and index not in seen:
                seen.add(index)  # the first such row; later ones are replies to other turns on the prompt
                yield int(path.stem.split("_")[1]), index, sh["tokens"][starts[i] + plens[i] : starts[i + 1]].tolist()


def source_prompts(data: Path, prompts_file: Path | None = None) -> tuple[list[Prompt], int]:
    """The prompts ``data`` was generated from, and the seed it was generated with: the template
    set (or ``prompts_file``) as its ``config.json`` names it, checked against its fingerprint."""
    from workbench.train.generate import GenConfig, data_identity, prompts_for

    try:
        made = json.loads((data / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        raise UserError(f"--data {data}: no config.json of python -m workbench.train generate") from None
    cfg = GenConfig(out=data, seed=made["seed"], num_prompts=made["num_prompts"], prompts_file=prompts_file)
    with as_user_error():
        prompts = prompts_for(cfg)
    if data_identity(cfg, prompts)["prompt_set"] != made["prompt_set"]:
        given = f"--prompts {prompts_file}" if prompts_file else "the template set"
        raise UserError(f"--data {data} was made from other prompts than {given}: give the file it was made "
                        f"from with --prompts")
    return prompts, made["seed"]


def material_prompts(data: Path, prompts: list[Prompt], seed: int, chat, stop_ids: tuple[int, ...], frac: float,
                     val_every: int) -> list[Prompt]:
    """Material turns on the finished greedy answers (``MATERIAL_MAX_TOKENS`` at most) of a
    ``frac`` share of the prompts of ``data`` (``prompts`` and ``seed``: what it was generated
    from, ``source_prompts``), each of the kind of the prompt it answered, in shard order; none
    on a held-out prompt's answer. ``chat.decode`` turns ids into text."""
    from workbench.train.features import is_held_out
    from workbench.train.generate import GenConfig, shard_seed

    out = []
    for shard, answers in groupby(greedy_answers(data), key=lambda row: row[0]):
        rng = random.Random(f"material {shard_seed(GenConfig(out=data, seed=seed), shard, 0)}")
        for _, index, answer in answers:
            take = rng.random() < frac
            if take and answer and answer[-1] in stop_ids and len(answer) <= MATERIAL_MAX_TOKENS:
                text = material_prompt(prompts[index], chat.decode(answer), rng)  # drawn either way: one stream
                if not is_held_out(index, val_every):
                    out.append(Prompt(prompts[index].kind, text))
    return out


def write_prompts(path: Path, prompts: list[Prompt]) -> None:
    """``prompts`` as ``generate --prompts`` reads them: one ``{"text", "kind"}`` object a line."""
    lines = [json.dumps({"text": p.text, "kind": p.kind}, ensure_ascii=False) + "\n" for p in prompts]
    path.write_text("".join(lines), encoding="utf-8")


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m experiments.data_arms", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("words", help="arm B: one prompt per whole word of the target's vocabulary",
                       description="Write arm B's word prompt set as a prompts file.")
    w.add_argument("--seed", type=int, default=0, help="which template each word gets, and the file's order")
    m = sub.add_parser("material", help="arm C: the greedy answers of a generate directory handed back with a task",
                       description="Write arm C's material turns on the greedy answers of --data as a prompts file.")
    m.add_argument("--data", type=Path, required=True, help="a python -m workbench.train generate --out directory")
    m.add_argument("--prompts", type=Path, default=None,
                   help="the prompts file --data was generated from (default: the template set)")
    m.add_argument("--frac", type=float, default=0.5, help="share of the prompts whose answer is drawn")
    m.add_argument("--val-every", type=int, default=50,
                   help="leave out the answers of every N-th prompt, which training with this --val-every holds out")
    for p in (w, m):
        p.add_argument("--out", type=Path, required=True, help="the prompts file to write (JSON lines)")
        p.add_argument("--target", default=None, help="target model directory (default: SmolLM2-135M-Instruct)")
    return ap


@reports_user_errors
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.out.is_dir() or not args.out.parent.is_dir():
        raise UserError(f"--out {args.out}: give a file name in an existing folder")
    if args.command == "material":
        if not 0.0 < args.frac <= 1.0:
            raise UserError(f"--frac must be in (0, 1], got {args.frac:g}")
        source, seed = source_prompts(args.data, args.prompts)
    from transformers import AutoTokenizer

    from workbench import store
    from workbench.train.generate import Chat, stop_ids

    target_dir = store.resolve_target(args.target)
    tok = AutoTokenizer.from_pretrained(target_dir)
    if args.command == "words":
        prompts = build_word_prompt_set(vocabulary_words(tok.get_vocab()), args.seed)
    else:
        try:
            prompts = material_prompts(args.data, source, seed, Chat(tok), stop_ids(target_dir, tok), args.frac,
                                       args.val_every)
        except FileNotFoundError as err:  # a directory with no finished shard yet
            raise UserError(f"--data {err}") from None
        if not prompts:
            raise UserError(f"--data {args.data}: no finished greedy answer of at most {MATERIAL_MAX_TOKENS} tokens "
                            f"was drawn (a larger --frac, or answers made with a larger --max-new)")
    write_prompts(args.out, prompts)
    print(f"{len(prompts)} prompts in {args.out}: python -m workbench.train generate --prompts {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
