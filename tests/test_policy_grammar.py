"""One grammar of speculation policies (``engine/policy/grammar.py``): ``generate --policy``,
``bench load --policies`` and the app's Load tab read the same words as the same policy (a bare
``adaptive`` included), a bad one is one line in each, and every policy kind is listed where a
user reads the grammar."""

import json
import re
from argparse import Namespace

import pytest

from workbench.app.load_tab import parse_inputs
from workbench.testing.tiny import make_tiny_app_model
from workbench.bench import load_run
from workbench.cli import build_parser, main, policy_from_args
from workbench.engine.config import SpecConfig
from workbench.engine.policy import DEFAULT_LADDER, KINDS, parse_policies, parse_setting, read_policy

WORDS = ["off", "fixed:linear:2", "eagle2:4/3/2", "linear:3@ngram", "schedule:1-2=linear:2,3+=off", "adaptive",
         "adaptive:linear:1,linear:3", "auto", "auto:linear:2"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-grammar"), seed=1)


def _meaning(named) -> tuple:
    policy = named.build()
    return type(policy).__name__, policy.settings(), named.needs_cost, named.text


def _three(text: str) -> list:
    """``text`` read as generate --policy, as bench load --policies and as the Load tab's box
    (the last two as a list of one; ';' since the policy may hold commas)."""
    cli = policy_from_args(Namespace(policy=text), SpecConfig.linear(2))
    bench = parse_policies(f"{text};")[0]
    app = parse_inputs("closed", 2, policies=f"{text};", requests=4, max_new=8, kv_slots=0)[1][0]
    return [cli, bench, app]


@pytest.mark.parametrize("text", WORDS)
def test_the_same_words_are_the_same_policy_everywhere(text):
    cli, bench, app = _three(text)
    assert _meaning(cli) == _meaning(bench) == _meaning(app)
    assert cli.needs_cost == (text.startswith("auto"))  # said by the policy's kind, nowhere else


def test_a_bare_adaptive_climbs_the_default_ladder():
    named = read_policy("adaptive")
    assert named.text == f"adaptive:{DEFAULT_LADDER}"
    assert named.settings() == tuple(parse_setting(n) for n in DEFAULT_LADDER.split(","))


def _plain_and(tiny_dir, capsys, *policy) -> tuple[list, list]:
    argv = ["generate", "--target", str(tiny_dir), "--draft", "random:1", "--prompt", "the cat sat on the mat",
            "--max-new-tokens", "8", "--json"]
    assert main([*argv, "--method", "vanilla"]) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*argv, *policy]) == 0
    return plain["output_ids"], json.loads(capsys.readouterr().out.strip().splitlines()[-1])["output_ids"]


def test_generate_and_bench_load_run_a_bare_adaptive(tiny_dir, tmp_path, capsys, monkeypatch):
    plain, adaptive = _plain_and(tiny_dir, capsys, "--policy", "adaptive")
    assert adaptive == plain
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "the cat sat on the mat"}) + "\n")
    out = tmp_path / "out"
    assert load_run.main(["--target", str(tiny_dir), "--draft", "random:1", "--prompts", str(prompts), "--quick",
                          "--concurrency", "1", "--rate", "none", "--policies", "off,adaptive", "--threads", "1",
                          "--out", str(out)]) == 0
    result = json.loads((out / "load.json").read_text())
    assert result["settings"]["policies"]["adaptive"] == read_policy("adaptive").text
    assert all(r["equal_to_off"] for r in result["rows"])


@pytest.mark.parametrize("text,message", [
    ("sometimes", "unknown speculation policy 'sometimes'; write off (plain decoding"),
    ("adaptive:off", "adaptive:off: an adaptive ladder needs one or more speculative settings"),
    ("schedule:1-2=linear:2", "schedule:1-2=linear:2: batch-size ranges leave a gap: batches from 3 up"),
    ("off:now", "off:now: off takes no argument"),
])
def test_a_bad_policy_is_one_line_everywhere(tiny_dir, tmp_path, capsys, text, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        # the Load tab shows the same line
        parse_inputs("closed", 2, policies=f"off;{text}", requests=4, max_new=8, kv_slots=0)
    target = ["--target", str(tiny_dir), "--draft", "random:1"]
    assert main(["generate", *target, "--prompt", "hi", "--policy", text]) == 2
    assert load_run.main([*target, "--policies", f"off;{text}", "--out", str(tmp_path / "o")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"error: --policy: {lines[0].split(': ', 2)[2]}", f"error: --policies: {lines[1].split(': ', 2)[2]}"]
    assert all(message in line for line in lines) and "Traceback" not in "".join(lines)


def test_every_kind_is_in_the_help_and_the_load_tab():
    from workbench.app.load_tab import INTRO

    def unwrapped(text: str) -> str:  # argparse wraps lines, at hyphens too
        return re.sub(r"\s+", " ", text).replace("- ", "-")

    gen = unwrapped(build_parser()._subparsers._group_actions[0].choices["generate"].format_help())
    bench = unwrapped(load_run.build_parser().format_help())
    for kind in KINDS:
        assert kind.grammar in gen and kind.grammar in bench and kind.grammar in INTRO, f"a list lacks {kind.name}"
