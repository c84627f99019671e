"""The data arms of docs/bench/head-training.md (``experiments/data_arms.py``): the word prompt set
is the one arm B was made from, and material turns on a generate directory's greedy answers
are the ones the generator's former option drew, written as a prompts file that
``python -m workbench.train generate --prompts`` decodes greedily."""

import json
import random

import pytest
import torch

from experiments.data_arms import (MATERIAL_TASKS, WORD_TEMPLATES, build_word_prompt_set, greedy_answers, main,
                                   material_prompt, material_prompts, source_prompts, vocabulary_words, write_prompts)
from helpers import STOP, FakeChat, digest, read, small_config
from workbench.measure.specbench import DATA_FILE as SPEC_BENCH
from workbench.errors import UserError
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint
from workbench.train.generate import decode_batch, run, shard_seed
from workbench.train.prompt_set import build_prompt_set, read_prompts
from workbench.train.shards import shard_path

# The words arm's prompts, as its data on disk was made from them (by the generator's former
# word-set option, in this order).
WORD_SET_DIGEST = "743702ec1455fed9b837bb6556d587a045664958def19893bee7a725e604faf0"
SMOLLM2_WORD_SET_DIGEST = (11_775, "c9ed25c155386fecd55a37595b289e1d8f3eabaa8432323230063726d572ca56")


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    return load_target(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=2), torch.float32)


def quiet(*args, **kwargs):
    pass


def test_word_prompt_set_takes_whole_words_of_the_vocabulary_one_prompt_each():
    vocab = ["Ġvolcano", "Ġtelescope", "Ġquickly", "Ġwalked", "Ġsinging", "Ġcat", "volcano", "ĠParis",
             "Ġcafeteria", "Ġcafé", "Ġtele2", "Ġvolcano"]
    assert vocabulary_words(vocab) == ["cafeteria", "telescope", "volcano"]
    words = [f"topic{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(400)]
    a = build_word_prompt_set(words, 0)
    assert len(a) == 400 and len({p.text for p in a}) == 400
    assert sorted(next(w for w in words if w in p.text.split(" ") or w + "?" in p.text or w + "." in p.text
                       or w + "," in p.text) for p in a) == sorted(words)  # each word is the topic of one prompt
    assert a == build_word_prompt_set(list(reversed(words)), 0) and build_word_prompt_set(words, 0, 50) == a[:50]
    assert build_word_prompt_set(words, 1) != a
    assert {p.kind for p in a} == {k for k, _ in WORD_TEMPLATES}  # 400 draws reach every template
    with pytest.raises(ValueError, match="n must be"):
        build_word_prompt_set(words, 0, 0)
    with pytest.raises(ValueError, match="no words"):
        build_word_prompt_set([], 0)
    eight = ["apple", "banana", "cherry", "delta", "echo", "foxtrot", "garden", "harbour"]
    assert digest(build_word_prompt_set(eight, 0)) == WORD_SET_DIGEST


def test_words_writes_the_arms_prompt_set_as_a_prompts_file(smollm2_dir, tmp_path, capsys):
    out = tmp_path / "words.jsonl"
    assert main(["words", "--target", str(smollm2_dir), "--out", str(out)]) == 0
    assert "11775 prompts in" in capsys.readouterr().out
    assert (len(read_prompts(out)), digest(read_prompts(out))) == SMOLLM2_WORD_SET_DIGEST


@pytest.mark.skipif(not SPEC_BENCH.exists(), reason="Spec-Bench questions not present")
def test_no_word_prompt_is_a_spec_bench_question(smollm2_dir):
    from transformers import AutoTokenizer

    words = vocabulary_words(AutoTokenizer.from_pretrained(smollm2_dir).get_vocab())
    assert len(words) >= 10_000
    bench = {" ".join(json.loads(line)["turns"][0].lower().split())
             for line in SPEC_BENCH.read_text().splitlines() if line.strip()}
    prompts = build_word_prompt_set(words, 0)
    assert not {" ".join(p.text.lower().split()) for p in prompts} & bench
    assert (len(prompts), digest(prompts)) == SMOLLM2_WORD_SET_DIGEST  # the words arm's prompts


def test_a_word_prompts_file_decodes_in_the_arms_order(tiny_target, tmp_path):
    vocab = {f"Ġword{chr(97 + i)}x": i for i in range(26)}
    words = build_word_prompt_set(vocabulary_words(vocab), 0)
    write_prompts(tmp_path / "words.jsonl", words)
    assert read_prompts(tmp_path / "words.jsonl") == words
    cfg = small_config(tmp_path / "data", prompts_file=tmp_path / "words.jsonl", num_prompts=None, shard_size=8,
                       samples=0)
    lines = []
    t = run(cfg, tiny_target, FakeChat(), STOP, log=lambda m, **k: lines.append(m))
    assert t["shards"] == 4 and lines[0].startswith("26 prompts in 4 shards of 8")
    sh = read(shard_path(tmp_path / "data", 0))
    first = FakeChat().encode([{"role": "user", "content": words[0].text}])
    assert sh["tokens"][: sh["prompt_lens"][0]].tolist() == first


def test_material_prompts_carry_the_text_and_a_task_of_the_kind():
    p = build_prompt_set(0, 200)
    code = next(q for q in p if q.kind == "coding")
    rng = random.Random(0)
    texts = [material_prompt(code, "  def f(x):\n    return x + 1\n", rng) for _ in range(60)]
    assert all("def f(x):\n    return x + 1" in t for t in texts)
    tasks = MATERIAL_TASKS["any"] + MATERIAL_TASKS["coding"]
    assert all(any(task in t for task in tasks) for t in texts)
    assert any(task in t for t in texts for task in MATERIAL_TASKS["coding"])  # the kind's own tasks are drawn
    assert not any(task in t for t in texts for task in MATERIAL_TASKS["math"])


class WholeChat(FakeChat):
    """FakeChat that keeps every character of a turn (a material turn is long)."""

    def encode(self, messages):
        ids = [1]
        for m in messages:
            ids += [3 + ord(c) % 60 for c in m["content"]] + [1]
        return ids


def test_material_turns_hand_the_greedy_answers_back_and_decode_greedily(tiny_target, tmp_path):
    src, chat = tmp_path / "src", WholeChat()
    cfg = small_config(src, samples=1, followup_frac=1.0)  # sampled answers and follow-ups beside the greedy ones
    run(cfg, tiny_target, chat, STOP, log=quiet)
    prompts, seed = source_prompts(src)
    assert prompts == build_prompt_set(0, 6) and seed == 0
    answers = list(greedy_answers(src))
    assert [(shard, index) for shard, index, _ in answers] == [(i // 2, i) for i in range(6)]
    for shard, index, answer in answers:  # the greedy first answer, not a sampled one or a follow-up
        context = chat.encode([{"role": "user", "content": prompts[index].text}])
        assert answer == decode_batch(tiny_target, [context], temperature=0.0, seed=0, max_new=6, stop_ids=STOP)[0]
    made = material_prompts(src, prompts, seed, chat, STOP, 1.0, val_every=0)
    want = []
    for shard in range(3):  # the stream the generator's material option drew from, replayed
        rng = random.Random(f"material {shard_seed(cfg, shard, 0)}")
        for _, index, answer in answers[2 * shard : 2 * shard + 2]:
            rng.random()
            if answer[-1] in STOP:
                want.append((index, material_prompt(prompts[index], chat.decode(answer), rng)))
                assert chat.decode(answer).strip() in want[-1][1]  # the answer, handed back
    assert 0 < len(made) == len(want) and [p.text for p in made] == [text for _, text in want]
    assert [p.kind for p in made] == [prompts[index].kind for index, _ in want]
    write_prompts(tmp_path / "material.jsonl", made)
    out = tmp_path / "material"
    run(small_config(out, prompts_file=tmp_path / "material.jsonl", num_prompts=None, samples=0, followup_frac=0.0),
        tiny_target, chat, STOP, log=quiet)
    contexts = [chat.encode([{"role": "user", "content": p.text}]) for p in made]
    replies = decode_batch(tiny_target, contexts, temperature=0.0, seed=0, max_new=6, stop_ids=STOP)
    got = []
    for i in range(-(-len(made) // 2)):
        sh = read(shard_path(out, i))
        starts, plens = sh["starts"].tolist(), sh["prompt_lens"].tolist()
        assert sh["temperature"].tolist() == [0.0] * len(plens) and sh["turn"].tolist() == [1] * len(plens)
        got += [(sh["tokens"][s : s + p].tolist(), sh["tokens"][s + p : e].tolist())
                for s, e, p in zip(starts, starts[1:], plens)]
    assert got == list(zip(contexts, replies))  # each material turn and the target's greedy reply to it
    kept = material_prompts(src, prompts, seed, chat, STOP, 1.0, val_every=3)  # prompts 0 and 3 are held out
    assert 0 < len(kept) < len(made) and [p.text for p in kept] == [text for index, text in want if index % 3]


def test_material_needs_the_prompts_the_directory_was_made_from(tiny_target, tmp_path):
    rows = [{"text": f"Tell me about topic {i}.", "kind": "stem"} for i in range(4)]
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run(small_config(tmp_path / "data", prompts_file=tmp_path / "mine.jsonl", num_prompts=None, samples=0),
        tiny_target, FakeChat(), STOP, log=quiet)
    prompts, _ = source_prompts(tmp_path / "data", tmp_path / "mine.jsonl")
    assert [p.text for p in prompts] == [r["text"] for r in rows]
    with pytest.raises(UserError, match="other prompts than the template set"):
        source_prompts(tmp_path / "data")
    with pytest.raises(UserError, match="no config.json"):
        source_prompts(tmp_path)
