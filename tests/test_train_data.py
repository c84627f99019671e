"""Self-distillation data at scale: the prompt set is big, distinct and not Spec-Bench; a user's
own prompts file is read line by line, with one clear message for a bad line; the generator's
shards are the target's own decoding, resumable and deterministic; features are recomputed from
the ids and the held-out split is by prompt."""

import json
import random
from pathlib import Path

import pytest
import torch

from helpers import STOP, FakeChat, digest, read, small_config
from workbench.measure.specbench import DATA_FILE as SPEC_BENCH
from workbench.attention.batch import extend_batch
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint
from workbench.train.generate import (DEFAULT_OUT, GenConfig, data_identity, decode_batch, parse_worker,
                                      prompts_for, run)
from workbench.train.prompt_set import GENERAL, Prompt, build_prompt_set, followup, read_prompts
from workbench.train.shards import feature_path, shard_path


def test_prompt_set_is_large_distinct_and_deterministic():
    a = build_prompt_set(0)
    texts = [p.text for p in a]
    assert len(texts) >= 10_000 and len(set(texts)) == len(texts)
    assert a == build_prompt_set(0) and build_prompt_set(0, 100) == a[:100] and build_prompt_set(1) != a
    kinds = {p.kind for p in a}
    assert {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"} <= kinds
    assert all(sum(p.kind == k for p in a[:1000]) >= 10 for k in kinds)  # any prefix is a balanced sample
    with pytest.raises(ValueError, match="n must be"):
        build_prompt_set(0, 0)


# The sets as the data on disk was made from them: a shard i holds prompts [i*G, (i+1)*G) of one of
# these lists, so an edit that reorders or changes a prompt would silently change what a shard means.
TEMPLATE_SET_DIGESTS = {0: (10_772, "01dbbe502a9f2899dce0f12ff36a726a10e30b2d57aa046e47c527456003f821"),
                        1: (10_753, "905aa16f3e26d4cb24bc04558a6cfcfbf76c147e566c4abbae9a391bc8d8cb59")}


def test_prompt_sets_are_the_ones_the_data_was_made_from():
    for seed, (n, want) in TEMPLATE_SET_DIGESTS.items():
        prompts = build_prompt_set(seed)
        assert (len(prompts), digest(prompts)) == (n, want), seed


def test_followups_fit_the_prompt_kind():
    rng = random.Random(0)
    code = next(p for p in build_prompt_set(0) if p.kind == "coding")
    asks = {followup(code, rng) for _ in range(200)}
    assert "Add comments to the code." in asks and "Explain that more simply." in asks
    assert "Make it funnier." not in asks


@pytest.mark.skipif(not SPEC_BENCH.exists(), reason="Spec-Bench questions not present")
def test_no_prompt_of_the_set_is_a_spec_bench_question():
    def norm(text: str) -> str:
        return " ".join(text.lower().split())

    bench = [norm(json.loads(line)["turns"][0]) for line in SPEC_BENCH.read_text().splitlines() if line.strip()]
    heads = {b[:60] for b in bench}
    for p in build_prompt_set(0):
        t = norm(p.text)
        assert t[:60] not in heads and t not in bench, p.text


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    return load_target(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=2), torch.float32)


def test_generator_writes_the_targets_own_answers(tiny_target, tmp_path):
    cfg = small_config(tmp_path)
    totals = run(cfg, tiny_target, FakeChat(), STOP, log=lambda *a, **k: None)
    assert totals["shards"] == 3 and (tmp_path / "config.json").exists()
    sh = read(shard_path(tmp_path, 1))
    prompts = build_prompt_set(0, 6)[2:4]
    contexts = [FakeChat().encode([{"role": "user", "content": p.text}]) for p in prompts]
    greedy = decode_batch(tiny_target, contexts, temperature=0.0, seed=0, max_new=6, stop_ids=STOP)
    starts, plens = sh["starts"].tolist(), sh["prompt_lens"].tolist()
    seqs = [sh["tokens"][s:e].tolist() for s, e in zip(starts, starts[1:])]
    assert sh["prompt_index"].tolist()[:2] == [2, 3] and sh["temperature"].tolist()[:2] == [0.0, 0.0]
    assert seqs[:2] == [c + g for c, g in zip(contexts, greedy)] and plens[:2] == [len(c) for c in contexts]
    assert sorted(set(sh["temperature"].tolist()[2:6])) == pytest.approx([0.85, 1.0])  # shard 1: 2nd and 3rd
    turn2 = [i for i, t in enumerate(sh["turn"].tolist()) if t == 2]
    finished = [j for j, g in enumerate(greedy) if g[-1] in STOP]
    assert len(turn2) == len(finished) > 0  # a follow-up after every finished greedy answer
    for i in turn2:  # the follow-up context holds the first answer
        j = sh["prompt_index"][i] - 2
        assert seqs[i][: len(contexts[j]) - 1] == contexts[j][:-1] and plens[i] > len(contexts[j])
        assert sh["temperature"][i] == 0.0


def test_generator_resumes_and_is_deterministic(tiny_target, tmp_path):
    cfg = small_config(tmp_path)
    run(cfg, tiny_target, FakeChat(), STOP, log=lambda *a, **k: None)
    before = {i: {**read(shard_path(tmp_path, i)), **read(feature_path(tmp_path, i))} for i in range(3)}
    shard_path(tmp_path, 1).unlink()  # as if killed while writing shard 1
    shard_path(tmp_path, 1).with_name("shard_00001.safetensors.tmp").write_bytes(b"half a file")
    lines = []
    run(cfg, tiny_target, FakeChat(), STOP, log=lambda m, **k: lines.append(m))
    assert "2 done" in lines[0] and lines[-1].startswith("shard 00001") and len(lines) == 6  # greedy, 2 sampled, follow-ups
    for i in range(3):
        for k, v in {**read(shard_path(tmp_path, i)), **read(feature_path(tmp_path, i))}.items():
            torch.testing.assert_close(v, before[i][k])
    with pytest.raises(ValueError, match="other settings"):
        run(small_config(tmp_path, max_new=7), tiny_target, FakeChat(), STOP)


def test_workers_split_the_shards_and_together_make_the_same_data(tiny_target, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    run(small_config(one), tiny_target, FakeChat(), STOP, log=lambda *a, **k: None)
    lines = []
    t = run(small_config(two, worker=(1, 2)), tiny_target, FakeChat(), STOP, log=lambda m, **k: lines.append(m))
    assert t["shards"] == 1 and shard_path(two, 1).exists() and "(1 of them for worker 1/2)" in lines[0]
    assert run(small_config(two, worker=(0, 2)), tiny_target, FakeChat(), STOP, log=lambda *a, **k: None)["shards"] == 3
    for i in range(3):
        for path in (shard_path, feature_path):
            a, b = read(path(one, i)), read(path(two, i))
            assert a.keys() == b.keys()
            for k in a:
                torch.testing.assert_close(a[k], b[k])


def test_first_shard_makes_only_the_shards_from_it_on(tiny_target, tmp_path):
    t = run(small_config(tmp_path, first_shard=1), tiny_target, FakeChat(), STOP, log=lambda *a, **k: None)
    assert t["shards"] == 2 and not shard_path(tmp_path, 0).exists() and shard_path(tmp_path, 2).exists()


def write_lines(path: Path, rows: list) -> Path:
    """A prompts file: each row a JSON object on its own line, or a raw line as given."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_prompts_file_is_read_in_its_order_with_optional_kinds(tmp_path):
    rows = [{"text": "Write a haiku about rain.", "kind": "writing"}, "", {"text": "Why is the sea salty?", "id": 7},
            {"text": "Sort a list in Go."}]
    path = write_lines(tmp_path / "p.jsonl", rows)
    assert read_prompts(path) == [Prompt("writing", "Write a haiku about rain."),
                                  Prompt(GENERAL, "Why is the sea salty?"), Prompt(GENERAL, "Sort a list in Go.")]
    cfg = GenConfig(out=tmp_path, prompts_file=path, num_prompts=2)
    assert prompts_for(cfg) == read_prompts(path)[:2]
    assert prompts_for(GenConfig(out=tmp_path, num_prompts=5)) == build_prompt_set(0, 5)  # no file: the template set
    rng = random.Random(0)
    asks = {followup(Prompt(GENERAL, "x"), rng) for _ in range(100)}
    assert "Explain that more simply." in asks and "Add comments to the code." not in asks


@pytest.mark.parametrize("rows, says", [
    ([{"text": "fine"}, "{not json"], ":2: not JSON"),
    ([{"prompt": "the other command's key"}], ':1: expected an object with a non-empty "text" string'),
    ([{"text": "  "}], ":1: expected"),
    ([{"text": "fine"}, {"text": "fine", "kind": 3}], ':2: expected an object with a non-empty "text" string and '
                                                      'an optional "kind" string'),
    (['["a list"]'], ":1: expected"),
    (["", "  "], ": no prompts"),
])
def test_a_bad_prompts_file_is_one_message_naming_the_line(tmp_path, rows, says):
    path = write_lines(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError) as err:
        prompts_for(GenConfig(out=tmp_path, prompts_file=path))
    assert str(err.value).startswith(f"--prompts {path}") and says in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="No such file"):
        prompts_for(GenConfig(out=tmp_path, prompts_file=tmp_path / "missing.jsonl"))


def test_generate_cli_refuses_a_bad_prompts_file_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from workbench.train.__main__ import main

    def refuse(*args, **kwargs):
        raise AssertionError("the model was looked up, though the file's mistake could be seen before")

    monkeypatch.setattr("workbench.store.resolve_target", refuse)  # the first step towards loading it
    path = write_lines(tmp_path / "bad.jsonl", [{"text": "fine"}, {"text": "fine"}, {"txt": "typo"}])
    assert main(["generate", "--prompts", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --prompts {path}:3: expected an object")
    assert main(["generate", "--num-prompts", "0", "--out", str(tmp_path / "out")]) == 2
    assert "error: --num-prompts must be >= 1" in capsys.readouterr().err


def test_generate_decodes_a_prompts_file_and_resumes_only_with_the_same_prompts(tiny_target, tmp_path):
    rows = [{"text": f"Tell me about topic {i}.", "kind": "stem" if i % 2 else "writing"} for i in range(5)]
    path = write_lines(tmp_path / "mine.jsonl", rows)
    cfg = small_config(tmp_path / "data", prompts_file=path, num_prompts=None, samples=0)
    lines = []
    t = run(cfg, tiny_target, FakeChat(), STOP, log=lambda m, **k: lines.append(m))
    assert t["shards"] == 3 and lines[0].startswith("5 prompts in 3 shards of 2")
    for i in range(3):  # shard i holds lines [2i, 2i + 2) of the file, in its order
        sh = read(shard_path(tmp_path / "data", i))
        want = [FakeChat().encode([{"role": "user", "content": r["text"]}]) for r in rows[2 * i : 2 * i + 2]]
        starts, plens = sh["starts"].tolist(), sh["prompt_lens"].tolist()
        assert [sh["tokens"][starts[k] : starts[k] + plens[k]].tolist() for k in range(len(want))] == want
        assert sh["prompt_index"].tolist()[: len(want)] == list(range(2 * i, 2 * i + len(want)))
    moved = write_lines(tmp_path / "moved.jsonl", rows)  # the same prompts from another path: the same data
    assert run(small_config(tmp_path / "data", prompts_file=moved, num_prompts=None, samples=0), tiny_target,
               FakeChat(), STOP, log=lambda *a, **k: None)["shards"] == 3
    other = write_lines(tmp_path / "other.jsonl", rows[:4] + [{"text": "Something else."}])
    for refused in (small_config(tmp_path / "data", prompts_file=other, num_prompts=None, samples=0),
                    small_config(tmp_path / "data", num_prompts=5, samples=0)):  # another file, the template set
        with pytest.raises(ValueError, match="other settings"):
            run(refused, tiny_target, FakeChat(), STOP)
    run(small_config(tmp_path / "templates", samples=0), tiny_target, FakeChat(), STOP, log=lambda *a, **k: None)
    with pytest.raises(ValueError, match="other settings"):  # nor the file into a template-set directory
        run(small_config(tmp_path / "templates", prompts_file=path, num_prompts=None, samples=0), tiny_target,
            FakeChat(), STOP)
    assert data_identity(cfg, read_prompts(path)) == data_identity(cfg, read_prompts(moved))


def test_generator_rejects_bad_settings(tmp_path):
    with pytest.raises(ValueError, match="num-prompts"):
        GenConfig(out=tmp_path, num_prompts=0)
    with pytest.raises(ValueError, match="followup-frac"):
        GenConfig(out=tmp_path, followup_frac=1.5)
    with pytest.raises(ValueError, match="temperatures"):
        GenConfig(out=tmp_path, temperatures=(0.0,))
    with pytest.raises(ValueError, match="dtype"):
        GenConfig(out=tmp_path, dtype="fp16")
    with pytest.raises(ValueError, match="0 <= K < N"):
        GenConfig(out=tmp_path, worker=(2, 2))
    with pytest.raises(ValueError, match="first-shard"):
        GenConfig(out=tmp_path, first_shard=-1)
    with pytest.raises(ValueError, match="K/N"):
        parse_worker("half")


def test_bf16_shards_join_an_fp32_directory_and_say_their_dtype_and_attention(tiny_target, tmp_path):
    from safetensors import safe_open

    run(small_config(tmp_path, num_prompts=2), tiny_target, FakeChat(), STOP, log=lambda *a, **k: None)
    bf16 = load_target(make_tiny_checkpoint(tmp_path / "tiny", seed=2), torch.bfloat16)
    with pytest.raises(ValueError, match="other settings"):  # the prompt count is part of the data's identity
        run(small_config(tmp_path, num_prompts=4, dtype="bf16"), bf16, FakeChat(), STOP)
    shard_path(tmp_path, 0).unlink()  # regenerate shard 0 in bf16 into the fp32 directory
    bf16.attention_backend = "padded"
    run(small_config(tmp_path, num_prompts=2, dtype="bf16"), bf16, FakeChat(), STOP, log=lambda *a, **k: None)
    with safe_open(str(shard_path(tmp_path, 0)), "pt") as f:
        assert f.metadata()["dtype"] == "bf16" and f.metadata()["attention"] == "padded"
    with safe_open(str(feature_path(tmp_path, 0)), "pt") as f:
        assert f.get_tensor("features").dtype == torch.float16 and f.metadata()["dtype"] == "bf16"


def test_features_are_the_targets_prefill_and_held_out_is_by_prompt(tiny_target, tmp_path):
    from workbench.train.features import load_sequences

    run(small_config(tmp_path), tiny_target, FakeChat(), (95,), log=lambda *a, **k: None)  # long answers
    assert (tmp_path / "features" / "feat_00000.safetensors").exists()  # recorded while decoding
    train, val = load_sequences(tmp_path, tiny_target, val_every=3)
    # prompts 0 and 3 are held out: only their greedy first answers, and none of them in train
    assert len(val) == 2 and all(len(s.tokens) > s.prompt_len for s in val)
    val_tokens = {tuple(s.tokens[: s.prompt_len].tolist()) for s in val}
    assert not any(tuple(s.tokens[: len(next(iter(val_tokens)))].tolist()) in val_tokens for s in train)
    s = train[0]
    batch = extend_batch(tokens=[s.tokens.tolist()], prefix_slots=[[]], new_slots=[list(range(len(s.tokens)))],
                         device="cpu")
    want = tiny_target(batch, tiny_target.new_kv_pool(len(s.tokens)))
    torch.testing.assert_close(s.features[:-1].float(), want[:-1], rtol=2e-3, atol=2e-3)  # last: never fed
    ids_only = tmp_path / "ids"  # --no-features: features.py computes them (and caches them)
    run(small_config(ids_only, features=False), tiny_target, FakeChat(), (95,), log=lambda *a, **k: None)
    assert not (ids_only / "features").exists()
    computed, _ = load_sequences(ids_only, tiny_target, val_every=3)
    assert (ids_only / "features" / "feat_00000.safetensors").exists()
    for a, b in zip(computed, train):
        assert torch.equal(a.tokens, b.tokens)
        torch.testing.assert_close(a.features[:-1].float(), b.features[:-1].float(), rtol=2e-3, atol=2e-3)
    few, _ = load_sequences(tmp_path, tiny_target, max_response_tokens=1, val_every=3)
    assert 0 < len(few) < len(train)


def test_training_reads_several_data_directories_in_turn(tiny_target, tmp_path):
    """``train --shards A B``: the template set's data and a prompts file's, each with its own held-out prompts."""
    from workbench.train.__main__ import build_parser, load_sequences

    mine = write_lines(tmp_path / "mine.jsonl", [{"text": f"Tell me about topic {i}."} for i in range(4)])
    a, b = tmp_path / "a", tmp_path / "b"
    run(small_config(a, num_prompts=4), tiny_target, FakeChat(), (95,), log=lambda *k, **kw: None)
    run(small_config(b, prompts_file=mine, num_prompts=None), tiny_target, FakeChat(), (95,), log=lambda *k, **kw: None)

    def tokens(argv):
        args = build_parser().parse_args(["train", "--val-every", "3", "--shards", *map(str, argv)])
        train, val = load_sequences(args, tiny_target)
        return [s.tokens.tolist() for s in train], [s.tokens.tolist() for s in val]

    (train_a, val_a), (train_b, val_b) = tokens([a]), tokens([b])
    assert tokens([a, b]) == (train_a + train_b, val_a + val_b) and len(val_b) == 2  # prompts 0 and 3 of each
    assert build_parser().parse_args(["train"]).shards == [DEFAULT_OUT]


def test_val_positions_caps_the_held_out_conversations_training_validates_on(tiny_target, tmp_path, capsys):
    from workbench.train.__main__ import build_parser, first_positions, load_sequences, main

    run(small_config(tmp_path, num_prompts=8), tiny_target, FakeChat(), (95,), log=lambda *a, **k: None)
    base = ["train", "--shards", str(tmp_path), "--val-every", "3"]
    train, val = load_sequences(build_parser().parse_args(base), tiny_target)
    assert len(val) >= 3 and train
    cap = val[0].num_targets + val[1].num_targets
    assert [s.tokens.tolist() for s in first_positions(val, cap)] == [s.tokens.tolist() for s in val[:2]]
    assert len(first_positions(val, 1)) == 1  # never empty
    assert main(base + ["--val-positions", "0"]) == 2
    assert "error: --val-positions" in capsys.readouterr().err


def test_scaling_trains_one_head_per_point_and_resumes(tiny_target, tmp_path):
    from experiments import scaling
    from experiments.head_studies import cut_answers
    from workbench.train.evaluate import answer_sequences, held_out_sequences, measure_head

    data = tmp_path / "data"
    run(small_config(data, num_prompts=12), tiny_target, FakeChat(), (95,), log=lambda *a, **k: None)
    tiny_dir = tmp_path / "tiny"
    make_tiny_checkpoint(tiny_dir, seed=2)  # the same weights as tiny_target
    argv = ["--shards", str(data), "--out", str(tmp_path / "curve"), "--points", "20,60", "--epochs", "1",
            "--val-every", "4", "-n", "0", "--target", str(tiny_dir), "--max-tokens", "64", "--warmup", "1"]
    scaling.main(argv)
    rows = json.loads((tmp_path / "curve" / "scaling.json").read_text())
    assert [r["point"] for r in rows] == [20, 60] and rows[0]["sequences"] < rows[1]["sequences"]
    assert all(r["response_tokens"] >= r["point"] and "top1_step3" in r["val"] for r in rows)
    assert (tmp_path / "curve" / "tokens_60" / "head" / "model.safetensors").exists()
    assert (tmp_path / "curve" / "scaling.md").read_text().count("\n") == 4
    # the held-out figures `python -m workbench.train evaluate --held-out` prints for an exported (fp16) head are training's own
    head = tmp_path / "curve" / "tokens_60" / "head"
    v = measure_head(head, tiny_target, held_out_sequences(data, tiny_target, max_response_tokens=60, val_every=4))
    from workbench.train.features import load_sequences

    assert v["conversations"] == len(load_sequences(data, tiny_target, 60, 4)[1]) > 0 and v["positions"] > 0
    for k in ("top1", "top1_step2", "top1_step3", "feat"):
        assert v[k] == pytest.approx(rows[1]["val"][k], abs=0.02), k
    with pytest.raises(FileNotFoundError, match="no shard_"):
        held_out_sequences(tmp_path / "curve", tiny_target, max_response_tokens=60, val_every=4)
    # coverage: k=1 is top-1, larger k catches more, the whole vocabulary catches all; bins share 100 %
    cov = measure_head(head, tiny_target, held_out_sequences(data, tiny_target, max_response_tokens=60, val_every=4),
                       (1, 2, 128))
    assert cov["in_top1"] == pytest.approx(cov["top1"]) and cov["in_top1"] <= cov["in_top2"] <= cov["in_top128"] == 1
    assert sum(b["share"] for b in cov["confidence"]) == pytest.approx(1)
    # teacher-forced agreement on given answers (features from a fresh prefill) = held-out's
    val = load_sequences(data, tiny_target, 60, 4)[1]
    prompts = [s.tokens[: s.prompt_len].tolist() for s in val]
    answers = [s.tokens[s.prompt_len :].tolist() for s in val]
    tf = measure_head(head, tiny_target, answer_sequences(tiny_target, prompts, answers), (1, 2, 128))
    assert (tf["conversations"], tf["positions"]) == (cov["conversations"], cov["positions"])
    for k in ("top1", "top1_step2", "in_top2"):
        assert tf[k] == pytest.approx(cov[k], abs=0.02), k
    # head_studies agreement --answer-tokens 3: each answer cut to its first 3 tokens (3 loss positions at most),
    # the same as agreement on answers cut there
    cut = cut_answers(held_out_sequences(data, tiny_target, max_response_tokens=60, val_every=4), 3)
    assert [len(c.tokens) for c in cut] == [min(len(s.tokens), s.prompt_len + 3) for s in val]
    assert all(0 < c.num_targets <= 3 for c in cut) and sum(c.num_targets for c in cut) < cov["positions"]
    tf3 = measure_head(head, tiny_target, answer_sequences(tiny_target, prompts, [a[:3] for a in answers]))
    v3 = measure_head(head, tiny_target, cut)
    assert v3["positions"] == tf3["positions"] and v3["top1"] == pytest.approx(tf3["top1"], abs=0.02)
    scaling.main(argv)  # finished points are skipped
    assert json.loads((tmp_path / "curve" / "scaling.json").read_text()) == rows
    with pytest.raises(SystemExit):
        scaling.main(argv[:-6] + ["--points", "x"])
    with pytest.raises(SystemExit):
        scaling.main(argv + ["--trees", "eagle2:9/9/9"])
    assert scaling.parse_args(argv + ["--trees", "eagle2:8/5/4"]).trees == ("eagle2:8/5/4",)


def test_time_limit_stops_before_a_new_shard_and_the_same_command_continues(tiny_target, tmp_path):
    lines = []
    t = run(small_config(tmp_path, minutes=1e-9), tiny_target, FakeChat(), STOP, log=lambda m, **k: lines.append(m))
    assert t["shards"] == 1 and shard_path(tmp_path, 0).exists()  # the first shard always runs
    assert lines[-1].startswith("stopping before shard 00001") and "2 shards left" in lines[-1]
    assert run(small_config(tmp_path), tiny_target, FakeChat(), STOP, log=lambda *a, **k: None)["shards"] == 3
    with pytest.raises(ValueError, match="--minutes must be > 0"):
        small_config(tmp_path, minutes=0)
