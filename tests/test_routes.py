"""The route table the app shows beside τ comes from a bench result, one row per speculative
method with its draft source, tree and per-task figures."""

import json

import pytest

from experiments.routes import main, route_table


def _result():
    per_task = {"math_reasoning": {"tau": 3.1, "speedup_vs_vanilla": 2.0, "questions": 1},
                "summarization": {"tau": 1.5, "speedup_vs_vanilla": 0.9, "questions": 1}}
    return {"meta": {"command": "python -m workbench bench ...", "date": "2026-12-02T19:00:00",
                     "machine": {"cpu": "AMD EPYC"}, "dtype": "fp32", "max_new_tokens": 64, "questions": 6},
            "summary": {"vanilla": {"tau": None, "per_task": {}},
                        "eagle2:4/3/2": {"per_task": per_task},
                        "eagle2:4/3/2@ngram": {"per_task": per_task},
                        "linear:3@exit:28": {"per_task": per_task},
                        "hf-greedy": {"per_task": {}}}}


def test_one_route_per_speculative_method():
    table = route_table(_result(), "docs/bench/routes.md")
    assert set(table["routes"]) == {"head 4/3/2", "ngram:1-12 4/3/2", "exit:28 4/3/1"}
    head = table["routes"]["head 4/3/2"]
    assert head["draft"] == "head" and head["tree"] == "4/3/2" and head["method"] == "eagle2:4/3/2"
    assert head["per_task"]["math_reasoning"] == {"tau": 3.1, "speedup": 2.0}
    assert table["meta"]["cpu"] == "AMD EPYC" and table["meta"]["dtype"] == "fp32"
    assert table["meta"]["record"] == "docs/bench/routes.md"  # what the app names beside every figure


def test_command_writes_the_table_and_refuses_other_files(tmp_path, capsys):
    src, out = tmp_path / "results.json", tmp_path / "routes.json"
    src.write_text(json.dumps(_result()))
    assert main([str(src), "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert set(table["routes"]) >= {"head 4/3/2"}
    assert table["meta"]["record"] == str(src.resolve())  # no --record: the results file (outside the repository)
    assert main([str(src), "--out", str(out), "--record", "docs/bench/routes.md"]) == 0
    assert json.loads(out.read_text())["meta"]["record"] == "docs/bench/routes.md"
    src.write_text(json.dumps({"summary": {}}))
    assert main([str(src), "--out", str(out)]) == 2
    assert "not a bench result" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json"), "--out", str(out)]) == 2


def test_a_result_without_speculation_is_refused():
    result = _result()
    result["summary"] = {"vanilla": {"per_task": {}}}
    with pytest.raises(ValueError, match="no speculative method"):
        route_table(result, "docs/bench/routes.md")


def test_the_app_reads_what_the_command_writes(tmp_path):
    from workbench.app.draft_bench import load_draft_bench
    from workbench.engine.config import SpecConfig

    src, out = tmp_path / "results.json", tmp_path / "routes.json"
    src.write_text(json.dumps(_result()))
    assert main([str(src), "--out", str(out)]) == 0
    bench = load_draft_bench(out)
    route = bench.route_for(SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=4, draft="ngram"))
    assert route.draft == "ngram:1-12" and route.per_task["math_reasoning"] == (3.1, 2.0)
    head = SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=4)
    line = bench.note_html(head)
    assert "math reasoning 3.10" in line and f"the bench run of 2026-12-02 ({src.resolve()})" in line
