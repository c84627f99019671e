"""``experiments/kv_runs.py``: a batch decoded with a run of slots per request against the shared
free list alone, interleaved, on the tiny model."""

import pytest

from experiments import kv_runs


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from workbench.testing.tiny import make_tiny_app_model

    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-runs"))


def test_runs_make_every_step_a_view_and_change_no_output(tiny_dir, capsys):
    rc = kv_runs.main(["--target", str(tiny_dir), "--draft", "random", "--methods", "vanilla,eagle2:4/2/2",
                       "--batch", "3", "--rounds", "2", "--max-new-tokens", "6", "--threads", "1"])
    assert rc == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0]: line for line in out.splitlines() if line.startswith("| `")}
    assert set(rows) == {"| `vanilla`", "| `eagle2:4/2/2`"}
    for row in rows.values():
        views = row.split(" | ")[1]
        runs, shared = (int(x.strip().rstrip("%")) for x in views.split("/"))
        assert runs == 100 and shared < 100  # three requests on one shared list interleave their slots
        assert row.endswith("| yes |")  # where rows live changes no output
    assert "2 interleaved rounds" in out and "3 requests together" in out


def test_bad_methods_get_one_clear_line(capsys):
    assert kv_runs.main(["--methods", "hf-greedy"]) == 2
    assert "give one engine method per name" in capsys.readouterr().err
    assert kv_runs.main(["--methods", " , "]) == 2  # none at all: one line, before any model loads
    assert "give at least one method" in capsys.readouterr().err
