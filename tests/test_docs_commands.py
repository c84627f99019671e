"""Every command in the README and in docs/*.md runs as written.

The shell blocks (```sh) are read line by line, continuations joined and comments dropped:

* every ``python -m MODULE ...`` / ``python app.py ...`` is parsed by the command's own argument
  parser (run in-process up to the point where its arguments are parsed), so a renamed or
  removed flag, an unknown sub-command or a bad choice fails here;
* every ``make TARGET``, script, test file and example file a command names must exist;
* no command writes into a file git tracks unless its comment says it ``rewrites`` it;
* the cheap commands run for real, as written, with tiny sizes (marked slow: they load the model).
"""

from __future__ import annotations

import argparse
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_WORDS = {"mkdir", "cp", "tail", "echo", "kill", "for", "do", "done", "nohup", "nice", "pip", "jupyter", "cat",
               ".", "source"}
WRITE_FLAGS = ("--out", "--png", "--trace")
READ_FLAGS = ("--prompts",)  # of `generate`: a JSONL file (bench plain's --prompts is a count)


class Parsed(Exception):
    """Raised instead of running a command once its arguments parsed."""


def shell_commands(page: Path) -> list[tuple[str, str]]:
    """(``page:line``, command) for every command of every ```sh / ```bash block of ``page``."""
    out, in_block, pending, start = [], False, "", 0
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            in_block = line.strip() in ("```sh", "```bash") and not in_block
            continue
        if not in_block or not line.strip():
            continue
        start = start or n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((f"{page.relative_to(ROOT)}:{start}", pending + line))
        pending, start = "", 0
    return out


def split_comment(command: str) -> tuple[str, str]:
    """The command and its trailing ``# comment`` (a ``#`` inside quotes is not one)."""
    quote = None
    for i, ch in enumerate(command):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i].strip(), command[i + 1:].strip()
    return command.strip(), ""


def simple_commands(command: str) -> list[list[str]]:
    """The words of each simple command of a line (split at ``&&``, ``;``, ``|``, ``&``), with
    leading ``VAR=value`` assignments and ``nohup`` / ``nice -n N`` wrappers removed."""
    parts = re.split(r"\s*(?:&&|;|\||&(?!>)|>>?\s*\S+|2>&1)\s*", command)
    out = []
    for part in parts:
        if not part.strip():
            continue
        words = shlex.split(part)
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        while words and words[0] in ("nohup", "nice"):
            words = words[3:] if words[0] == "nice" and len(words) > 2 and words[1] == "-n" else words[1:]
        if words:
            out.append(words)
    return out


ALL = [(where, cmd) for page in PAGES for where, cmd in shell_commands(page)]


def test_the_pages_have_commands():
    pages = {where.split(":")[0] for where, _ in ALL}
    assert "README.md" in pages and len(ALL) >= 20, pages


def _python(words: list[str]) -> tuple[str, str, list[str]] | None:
    """("module"|"path", name, argv) for a python invocation, else None."""
    if not words or not re.fullmatch(r"(\.venv/bin/)?python3?", words[0]):
        return None
    if len(words) > 2 and words[1] == "-m":
        return "module", words[2], words[3:]
    return "path", words[1], words[2:]


def parse_only(kind: str, name: str, argv: list[str], monkeypatch) -> argparse.Namespace | None:
    """Run the command in-process until its parser has parsed ``argv``; None when it parsed
    without reaching argparse's parse_args (it must not get further)."""
    original = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_and_stop)
    monkeypatch.setattr(sys, "argv", [name, *argv])
    try:
        if kind == "module":
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(str(ROOT / name), run_name="__main__")
    except Parsed as done:
        return done.args[0]
    pytest.fail(f"{kind} {name} {argv} ran past its argument parser")


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w-]*):", text, re.M)}


@pytest.mark.parametrize("where,command", ALL, ids=[w for w, _ in ALL])
def test_command_runs_as_written(where, command, monkeypatch):
    line, comment = split_comment(command)
    for words in simple_commands(line):
        py = _python(words)
        if py is not None:
            kind, name, argv = py
            if name == "pytest":
                files = [a for a in argv if a.startswith("tests/")]
                assert files and all((ROOT / f).exists() for f in files), f"{where}: {command}"
                continue
            if kind == "path":
                assert (ROOT / name).exists(), f"{where}: no {name}"
            inputs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in READ_FLAGS and argv[0] == "generate"]
            assert all((ROOT / f).exists() for f in inputs), f"{where}: `{line}` reads a file that does not ship"
            try:
                parse_only(kind, name, argv, monkeypatch)
            except SystemExit as err:  # argparse refused the flags
                if err.code not in (0, None):
                    pytest.fail(f"{where}: `{line}` does not parse (exit {err.code})")
            continue
        if words[0] == "make":
            missing = {w for w in words[1:] if "=" not in w} - makefile_targets()
            assert not missing, f"{where}: no make target {missing}"
            continue
        assert words[0] in SHELL_WORDS, f"{where}: unknown command {words[0]!r} in `{line}`"


def tracked_files() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    return set(out.stdout.split()) if out.returncode == 0 else set()


@pytest.mark.parametrize("where,command", ALL, ids=[w for w, _ in ALL])
def test_no_command_silently_writes_tracked_files(where, command):
    tracked = tracked_files()
    if not tracked:
        pytest.skip("not a git checkout")
    line, comment = split_comment(command)
    words = shlex.split(line)
    targets = [words[i + 1] for i, w in enumerate(words[:-1]) if w in WRITE_FLAGS]
    targets += [w.split("=", 1)[1] for w in words if w.startswith("WORKBENCH_SCREENSHOTS=")]
    for target in targets:
        target = target.rstrip("/")
        hits = [f for f in tracked if f == target or f.startswith(target + "/")]
        assert not hits or "rewrites" in comment, (
            f"{where}: `{line}` writes tracked {hits[:3]}; say so in its comment (`# rewrites ...`)")


def test_examples_named_by_commands_ship():
    named = {w for _, cmd in ALL for w in shlex.split(split_comment(cmd)[0]) if w.startswith("examples/")}
    assert named, "the README names no example file"
    assert all((ROOT / w).is_file() for w in named), named


def test_helpers_read_shell_the_way_a_shell_does():
    assert split_comment('python -m x --a "b # c"  # note') == ('python -m x --a "b # c"', "note")
    assert simple_commands("D=/tmp/x; mkdir -p $D") == [["mkdir", "-p", "$D"]]
    assert simple_commands("OMP_NUM_THREADS=1 nohup nice -n 19 python -m m --x 1 >> log 2>&1 &") == \
        [["python", "-m", "m", "--x", "1"]]
    assert _python(["python", "app.py", "--port", "1"]) == ("path", "app.py", ["--port", "1"])


def test_a_renamed_flag_fails(monkeypatch):
    with pytest.raises(SystemExit) as err:
        parse_only("module", "workbench", ["generate", "--prompt", "x", "--num-stepz", "3"], monkeypatch)
    assert err.value.code == 2
    ns = parse_only("module", "workbench", ["generate", "--prompt", "x", "--num-steps", "3"], monkeypatch)
    assert ns.num_steps == 3


# ---- the cheap commands, run for real -------------------------------------------------------------
CHEAP = [(where, cmd) for where, cmd in ALL
         if re.match(r"(\.venv/bin/)?python -m workbench (generate|fetch)\b|python -m workbench\.lessons\.notebooks check",
                     cmd)]


@pytest.mark.slow
@pytest.mark.parametrize("where,command", CHEAP, ids=[w for w, _ in CHEAP])
def test_cheap_command_runs(where, command, smollm2_dir):
    line, _ = split_comment(command)
    argv = shlex.split(line)[1:]
    if "generate" in argv:
        argv += ["--max-new-tokens", "4"]  # tiny sizes: the last value of a flag wins
    run = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{where}: `{line}`\n{run.stderr[-2000:]}"
    assert "Traceback" not in run.stderr
