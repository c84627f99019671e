"""``generate --policy`` and ``--kv-slots``: a policy changes which setting each step runs, never
the greedy text; a capacity too small for a request is one clear line; a bad policy is refused
before anything loads."""

import json

import pytest

from workbench.testing.tiny import make_tiny_app_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-cli-policy"))


def _generate(tiny_dir, *extra) -> int:
    from workbench.cli import main

    return main(["generate", "--target", str(tiny_dir), "--draft", "random", "--prompt", "the cat sat on the mat",
                 "--max-new-tokens", "10", "--json", *extra])


def _record(capsys) -> tuple[dict, str]:
    out, err = capsys.readouterr()
    return json.loads(out.strip().splitlines()[-1]), err


def test_a_policy_runs_and_keeps_the_greedy_output(tiny_dir, capsys):
    assert _generate(tiny_dir, "--method", "vanilla") == 0
    plain, _ = _record(capsys)
    assert "tau" not in plain  # vanilla: nothing speculated
    assert _generate(tiny_dir, "--policy", "schedule:1-1=linear:3,2+=off", "--kv-slots", "256") == 0
    scheduled, err = _record(capsys)
    assert scheduled["output_ids"] == plain["output_ids"]
    assert "policy schedule:1-1=linear:3,2+=off" in err
    assert scheduled["tau"] >= 1.0 and sum(scheduled["accept_lengths"]) + 1 == len(scheduled["output_ids"])


def test_auto_measures_its_step_cost_and_keeps_the_output(tiny_dir, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))  # the step cost is measured here, not read from a cache
    assert _generate(tiny_dir, "--method", "vanilla") == 0
    plain, _ = _record(capsys)
    assert _generate(tiny_dir, "--policy", "auto:linear:2") == 0
    auto, err = _record(capsys)
    assert auto["output_ids"] == plain["output_ids"]
    assert "[cost] timing" in err  # it said it was timing the forwards and engine steps


@pytest.mark.parametrize("extra,message", [
    (["--policy", "sometimes"], "--policy: unknown speculation policy 'sometimes'"),
    (["--kv-slots", "0"], "--kv-slots"),
    (["--policy", "fixed:linear:3", "--kv-slots", "4"], "slots"),
])
def test_bad_policies_and_capacities_are_one_line(tiny_dir, capsys, extra, message):
    try:
        code = _generate(tiny_dir, *extra)
    except SystemExit as stop:  # refused by the flag parser
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
