"""Every command line answers a user's mistake with one ``error:`` line naming the flag and exit
status 2, before the model loads where the mistake can be seen then; and its ``--help`` gives
every flag a line of help and the default its parser really uses."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.errors import ArgumentParser

ROOT = Path(__file__).resolve().parents[1]
NOT_LOADED = "the model was loaded, though the mistake could be seen before"


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail any test that reaches the target's weights: each case here is refused before."""

    def refuse(*args, **kwargs):
        raise AssertionError(NOT_LOADED)

    monkeypatch.setattr("workbench.pipeline.load_target", refuse)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # benchmarks set theirs; keep the tests'


def exit_code(main, argv: list[str]) -> int:
    """What ``main(argv)`` returns, or the status argparse exits with."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


def assert_one_error(code: int, err: str, flag: str) -> None:
    """Exit 2 and exactly one line on stderr: ``error: ...`` naming ``flag``; no traceback."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert flag in lines[0], err


def app_module():
    spec = importlib.util.spec_from_file_location("workbench_app_launcher", ROOT / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------
# python -m workbench generate


def generate_cases(tmp: Path) -> list[tuple[list[str], str]]:
    """(extra argv for ``generate --prompt hi``, the flag its one error line must name)."""
    a_file = tmp / "file.txt"
    a_file.write_text("not a head\n")
    cases = [
        (["--trace", str(tmp / "missing" / "t.jsonl")], "--trace"),
        (["--trace", str(tmp)], "--trace"),
        (["--draft", "random:abc"], "--draft"),
        (["--draft", str(a_file)], "--draft"),
        (["--draft", str(tmp / "nowhere")], "--draft"),
        (["--top-p", "2"], "--top-p"),
        (["--top-p", "nan"], "--top-p"),
        (["--top-p", "x"], "--top-p"),
        (["--temperature", "-1"], "--temperature"),
        (["--temperature", "inf"], "--temperature"),
        (["--top-k", "-3"], "--top-k"),
        (["--seed", "1.5"], "--seed"),
        (["--max-new-tokens", "0"], "--max-new-tokens"),
        (["--num-steps", "x"], "--num-steps"),
        (["--num-steps", "99"], "--num-steps"),
        (["--num-draft-tokens", "1000"], "--num-draft-tokens"),
        (["--method", "linear", "--topk", "3"], "--topk"),
        (["--method", "static", "--tree", "[[9"], "--tree"),
        (["--method", "eagle2", "--tree", "[[0]]"], "--method"),
        (["--temperature", "500"], "--temperature"),
        (["--hot-tokens", "999999"], "--hot-tokens"),
        (["--method", "vanilla", "--chain-rule", "leviathan"], "--chain-rule"),
        (["--method", "eagle2", "--chain-rule", "leviathan"], "--chain-rule"),
        (["--method", "static", "--chain-rule", "leviathan"], "--chain-rule"),
        (["--method", "eagle2", "--chain-rule", "block"], "--chain-rule"),
        (["--method", "linear", "--chain-rule", "blocks"], "--chain-rule"),
        (["--method", "tree"], "--method"),
        (["--dtype", "fp64"], "--dtype"),
        (["--device", "tpu"], "--device"),
        (["--target", str(tmp)], "--target"),
        (["--target", str(a_file)], "--target"),
        (["--batch-size", "0"], "--batch-size"),
        (["--no-such-flag"], "--no-such-flag"),
        (["--attention", "torch", "--cuda-graphs"], "--cuda-graphs"),
    ]
    if not torch.cuda.is_available():
        cases += [(["--device", "cuda"], "--device"), (["--cuda-graphs"], "--cuda-graphs")]
    return cases


def test_generate_refuses_each_mistake_in_one_line_before_loading(tmp_path, capsys, no_model_load):
    from workbench.cli import main

    for extra, flag in generate_cases(tmp_path):
        code = exit_code(main, ["generate", "--prompt", "hi", *extra])
        assert_one_error(code, capsys.readouterr().err, flag)


def test_generate_prompts_file_mistakes(tmp_path, capsys, no_model_load):
    """``generate --prompts`` and ``bench load --prompts`` read a prompts file the same way: every
    kind of bad file is one line naming it, never a traceback."""
    from workbench.bench.__main__ import main as bench_main
    from workbench.cli import main

    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "no prompt key"}\n')
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"prompt": "caf\u00e9"}\n'.encode("latin-1"))
    broken, empty, wrong_turns = tmp_path / "broken.jsonl", tmp_path / "empty.jsonl", tmp_path / "turns.jsonl"
    broken.write_text('{"prompt": "fine"}\n{"prompt": \n')
    empty.write_text("\n  \n")
    wrong_turns.write_text('{"turns": []}\n')
    for prompts, says in ((tmp_path, ""), (tmp_path / "missing.jsonl", ""), (bad_json, ":1: expected"),
                          (latin, "not UTF-8"), (broken, ":2: not JSON"), (empty, "no prompts"),
                          (wrong_turns, ":1: expected")):
        for run, argv in ((main, ["generate"]), (bench_main, ["load", "--policies", "off"])):  # one reader
            err = (exit_code(run, [*argv, "--prompts", str(prompts)]), capsys.readouterr().err)
            assert_one_error(*err, "--prompts")
            assert says in err[1], (argv, err)


def test_argparse_errors_point_to_the_commands_help(capsys):
    from workbench.cli import main

    code = exit_code(main, ["generate", "--prompt", "hi", "--method", "tree"])
    err = capsys.readouterr().err
    assert_one_error(code, err, "--method")
    assert "(see python -m workbench generate --help)" in err and "usage:" not in err
    code = exit_code(main, ["generate"])  # neither --prompt nor --prompts
    assert_one_error(code, capsys.readouterr().err, "--prompt")
    code = exit_code(main, ["decode"])
    assert_one_error(code, capsys.readouterr().err, "decode")


def test_hot_tokens_within_the_heads_list_pass_the_check(tmp_path):
    from workbench.flags import check_hot_tokens
    from workbench.models.heads import default_draft_dir, load_hot_tokens

    listed = len(load_hot_tokens(default_draft_dir()))
    check_hot_tokens(listed, None)  # the whole list is allowed
    check_hot_tokens(5, str(tmp_path))  # a head without a list: the pipeline says so
    with pytest.raises(ValueError, match=f"give 1 to {listed}"):
        check_hot_tokens(listed + 1, None)


def test_a_user_runs_generate_with_a_bad_trace_folder_and_gets_one_line(tmp_path):
    """The command as typed: a separate Python, no model loaded (a fresh start takes seconds)."""
    args = ["--prompt", "hi", "--trace", str(tmp_path / "missing" / "t.jsonl")]
    proc = subprocess.run([sys.executable, "-m", "workbench", "generate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert_one_error(proc.returncode, proc.stderr, "--trace")
    assert proc.stdout == ""


# ------------------------------------------------------------------------------------------
# benchmarks


@pytest.mark.parametrize("module, argv, flag", [
    ("workbench.bench.suite", ["--methods", "vanilla,warp:3"], "--methods"),
    ("workbench.bench.suite", ["--best", "8/5"], "--best"),
    ("workbench.bench.suite", ["--calibration", "static:9", "--methods", "vanilla"], "--calibration"),
    ("workbench.bench.suite", ["--dtype", "fp8"], "--dtype"),
    ("workbench.bench.suite", ["--draft", "random:x"], "--draft"),
    ("workbench.bench.tune", ["--max-trees", "0"], "--max-trees"),
    ("workbench.bench.tune", ["--grid", "8/5/x"], "--grid"),
    ("workbench.bench.tune", ["--hot-tokens", "999999"], "--hot-tokens"),
    ("workbench.bench.calibration", ["--method", "vanilla"], "--method"),
    ("workbench.bench.calibration", ["--method", "eagle2:8/5/4,linear:3"], "--method"),
    ("workbench.bench.calibration", ["--method", "warp"], "--method"),
    ("workbench.bench.calibration", ["--per-category", "0"], "--per-category"),
    ("workbench.bench.calibration", ["--device", "tpu"], "--device"),
    ("experiments.linear_order", ["--rows", "0,x"], "--rows"),
    ("experiments.linear_order", ["--threads", "0"], "--threads"),
    ("experiments.plain_vs_generate", ["--dtypes", "fp32,fp64"], "--dtypes"),
    ("experiments.kernel", ["--hq", "3", "--hkv", "2"], "--hq"),
    ("experiments.gpu.check", ["--skip", "tests,bogus"], "--skip"),
    ("experiments.gpu.check", ["--prefix", "x"], "--prefix"),
])
def test_benchmarks_refuse_each_mistake_in_one_line(module, argv, flag, capsys, no_model_load):
    main = importlib.import_module(module).main
    assert_one_error(exit_code(main, argv), capsys.readouterr().err, flag)


def test_bench_dispatcher_names_its_commands(capsys):
    from workbench.bench.__main__ import main

    for argv, flag in (([], "choose one of"), (["speed"], "speed")):
        assert_one_error(main(argv), capsys.readouterr().err, flag)


def test_gpu_check_without_torch_says_which_python_lacks_what(monkeypatch, capsys):
    """``make gpu-check`` runs the system python3: without torch it gets one line, not a traceback."""
    import importlib.util as util

    from experiments.gpu import check as gpu

    real = util.find_spec
    monkeypatch.setattr(util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    err_code = gpu.main(["--dry-run"])
    err = capsys.readouterr().err
    assert_one_error(err_code, err, "torch")
    assert sys.executable in err and "PYTHON=" in err


# ------------------------------------------------------------------------------------------
# the app's launch and the training commands


def test_app_launch_mistakes_are_one_line_before_anything_loads(tmp_path):
    a_file = tmp_path / "head.bin"
    a_file.write_bytes(b"\0")
    for argv, flag in ((["--target", str(tmp_path)], "--target"), (["--draft", str(a_file)], "--draft"),
                       (["--draft", "random:seven"], "--draft"), (["--port", "http"], "--port")):
        proc = subprocess.run([sys.executable, str(ROOT / "app.py"), *argv], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert_one_error(proc.returncode, proc.stderr, flag)
        assert "[app" not in proc.stderr  # refused before the loading stages start


@pytest.mark.parametrize("module, argv, flag", [
    ("workbench.train.__main__", ["train", "--minutes", "0"], "--minutes"),
    ("workbench.train.__main__", ["train", "--shards", "/no/such/dir"], "--shards"),
    ("workbench.train.__main__", ["train", "--steps", "many"], "--steps"),
    ("workbench.train.__main__", ["export", "--shards", str(ROOT), "--target", "/no/such/model"], "--target"),
    ("workbench.train.__main__", ["generate", "--target", "/no/such/model", "--out", "/tmp/unused"], "--target"),
    ("workbench.train.__main__", ["evaluate", "-n", "0"], "-n"),
    ("workbench.train.__main__", ["evaluate", "--hot", "-1"], "--hot"),
    ("workbench.train.__main__", ["evaluate", "--questions", "/no/such/questions.jsonl"], "--questions"),
    ("workbench.train.__main__", ["generate", "--worker", "3/2", "--out", "/tmp/unused"], "--worker"),
    ("workbench.train.__main__", ["generate", "--prompts", "/no/such/prompts.jsonl", "--out", "/tmp/unused"],
     "--prompts"),
    ("workbench.train.__main__", ["generate", "--prompts", str(ROOT / "README.md"), "--out", "/tmp/unused"],
     "README.md:1"),
    ("experiments.data_arms", ["material", "--data", "/no/such/dir", "--out", "/tmp/unused.jsonl"], "--data"),
    ("experiments.data_arms", ["material", "--data", "/tmp", "--frac", "2", "--out", "/tmp/unused.jsonl"], "--frac"),
    ("experiments.data_arms", ["words", "--out", "/no/such/folder/words.jsonl"], "--out"),
    ("experiments.head_studies", ["trees", "--ceiling", "--early-exit", "x"], "--early-exit"),
    ("experiments.head_studies", ["agreement", "--mt-bench", "--coverage", "0"], "--coverage"),
    ("experiments.scaling", ["--shards", "/tmp", "--points", "x"], "--points"),
    ("experiments.gpu.recipe", ["run", "--arms", "warm,cold"], "--arms"),
])
def test_training_commands_refuse_each_mistake_in_one_line(module, argv, flag, capsys, no_model_load):
    main = importlib.import_module(module).main
    assert_one_error(exit_code(main, argv), capsys.readouterr().err, flag)


# ------------------------------------------------------------------------------------------
# --help


class _Parsed(Exception):
    """Raised in place of parsing: the parser a command built is all these tests want."""


def built_parser(main, monkeypatch) -> argparse.ArgumentParser:
    """The parser ``main`` builds, caught at its ``parse_args`` (nothing runs)."""
    seen = []

    def capture(self, args=None, namespace=None):
        seen.append(self)
        raise _Parsed

    monkeypatch.setattr(ArgumentParser, "parse_args", capture)
    with pytest.raises(_Parsed):
        main([])
    return seen[0]


def every_parser(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


ENTRY_POINTS = ("workbench.cli", "workbench.bench.calibration", "experiments.gpu.check", "experiments.kernel",
                "experiments.linear_order", "experiments.plain_vs_generate", "workbench.bench.suite", "workbench.bench.tune",
                "workbench.train.__main__", "experiments.head_studies", "experiments.scaling", "experiments.gpu.recipe",
                "tools.notebooks", "experiments.app_latency", "experiments.data_arms", "app")


def entry_main(name: str):
    return app_module().main if name == "app" else importlib.import_module(name).main


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_flag_has_help_and_shows_its_default(name, monkeypatch):
    missing = []
    for parser in every_parser(built_parser(entry_main(name), monkeypatch)):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            label = f"{parser.prog} {'/'.join(action.option_strings) or action.dest}"
            text = formatter._expand_help(action) if action.help else ""
            switch = action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction)
            in_required_group = any(action in g._group_actions and g.required
                                    for g in parser._mutually_exclusive_groups)
            if not text.strip():
                missing.append(f"{label}: no help")
            elif action.option_strings and not (switch or in_required_group or action.required) \
                    and "default" not in text:
                missing.append(f"{label}: no default in {text!r}")
            if "``" in text:
                missing.append(f"{label}: reST literal in {text!r}")
    assert missing == []


@pytest.mark.parametrize("argv", [["bench"], ["generate", "--prompt", "x"]])
def test_dtype_help_states_the_default_the_parser_uses(argv, capsys):
    from workbench.cli import build_parser, main

    parsed = build_parser().parse_args(argv).dtype
    assert exit_code(main, [argv[0], "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    dtype_help = text[text.index("--dtype {"):].split(" --attention")[0]
    assert f"(default: {parsed})" in dtype_help
    assert parsed == ("auto" if argv[0] == "bench" else "fp32")


def test_tune_and_calibration_help_state_their_dtype_default(capsys):
    from workbench.bench import calibration, tune

    for module, default in ((tune, "auto"), (calibration, "fp32")):
        assert exit_code(module.main, ["--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert f"else fp32 (default: {default})" in text


def test_top_level_help_is_plain_text_and_calibration_help_is_whole(capsys):
    from workbench.bench import calibration
    from workbench.cli import main

    assert exit_code(main, ["--help"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and "python -m workbench {fetch,generate,bench}" in out
    assert exit_code(calibration.main, ["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "acceptance, measured on Spec-Bench questions with step traces on." in text
