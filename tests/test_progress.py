"""``generate`` shows its progress on a terminal and nothing more elsewhere, and labels each
answer of a prompts file: the status line's decisions on fake streams, the per-step callback of
``Workbench.generate``, and the command on a tiny random model."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest

from workbench.progress import StatusLine, is_terminal


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_line_is_drawn_only_on_a_terminal():
    piped = io.StringIO()
    line = StatusLine(piped)
    line.update("[1/1] id 0: 3 tokens")
    line.finish("[1/1] id 0: 5 tokens")
    assert not line.enabled and piped.getvalue() == ""
    closed = io.StringIO()
    closed.close()  # its isatty raises
    assert is_terminal(FakeTerminal()) and not is_terminal(closed) and not is_terminal(object())


def test_the_line_redraws_in_place_at_most_every_interval_and_ends_with_a_newline():
    tty, clock = FakeTerminal(), Clock()
    line = StatusLine(tty, min_interval_s=0.1, clock=clock)
    line.update("a long first text")
    clock.now = 0.05
    line.update("skipped: too soon")
    clock.now = 0.2
    line.update("short")
    assert tty.getvalue() == "\ra long first text" + "\rshort" + " " * (len("a long first text") - len("short"))
    line.finish("done")  # drawn whatever the clock says, then the newline
    assert tty.getvalue().endswith("\rdone \n")
    line.finish()  # no line open: nothing more
    assert tty.getvalue().endswith("\rdone \n") and tty.getvalue().count("\n") == 1


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from workbench.testing.tiny import make_tiny_app_model

    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-progress"))


def test_generate_calls_back_after_every_step(tiny_dir):
    from workbench.engine.config import SpecConfig
    from workbench.engine.sampling import SamplingParams
    from workbench.pipeline import Workbench

    wb = Workbench.load(str(tiny_dir), "random", dtype="fp32")
    seen = []
    chain = SpecConfig.from_knobs("linear", num_steps=3)
    (req,), seconds = wb.generate([wb.encode("the cat sat")], chain, SamplingParams(), 12,
                                  on_step=lambda reqs, s: seen.append((len(reqs[0].output_ids), s)))
    assert len(seen) == req.target_forwards  # one call a step, the prefill included
    assert seen[0][0] == 1 and seen[-1][0] == len(req.output_ids)
    assert [s for _, s in seen] == sorted(s for _, s in seen) and seen[-1][1] <= seconds


def _generate(tiny_dir, tmp_path, *extra) -> int:
    from workbench.cli import main

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "q7", "prompt": "the cat sat"}) + "\n" +
                       json.dumps({"prompt": "the dog ran"}) + "\n")
    return main(["generate", "--target", str(tiny_dir), "--draft", "random", "--prompts", str(prompts),
                 "--method", "linear", "--num-steps", "2", "--max-new-tokens", "8", *extra])


def test_answers_of_a_prompts_file_are_labelled_and_stderr_stays_plain_off_a_terminal(tiny_dir, tmp_path, capsys):
    assert _generate(tiny_dir, tmp_path) == 0
    out, err = capsys.readouterr()
    blocks = out.split("\n\n")  # a blank line between answers
    assert len(blocks) == 2
    assert blocks[0].startswith("==> q7 <==\n") and blocks[1].startswith("==> 1 <==\n")  # its id, else its index
    assert all(len(b.strip().splitlines()) >= 2 for b in blocks)  # a heading, then the answer
    assert "\r" not in err and err.count("tokens,") == 2  # one summary line per answer, no status line


def _final_draws(err: str, label: str) -> list[str]:
    return [part.rstrip("\n").rstrip(" ") for part in err.split("\r") if part.startswith(label)]


LINE = re.compile(r"(\d+) tokens, tau ([\d.]+), ([\d.]+) tok/s, ([\d.]+) s")


def test_on_a_terminal_the_status_line_shows_tokens_tau_and_speed(tiny_dir, tmp_path, capsys, monkeypatch):
    tty = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", tty)
    assert _generate(tiny_dir, tmp_path, "--json") == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # stdout: JSON only
    err = tty.getvalue()
    assert [r["id"] for r in results] == ["q7", 1]
    for n, r in enumerate(results, 1):
        draws = _final_draws(err, f"[{n}/2] id {r['id']}: ")
        assert draws, err  # drawn while decoding and once more at the end
        tokens, tau, speed, seconds = LINE.search(draws[-1]).groups()
        assert int(tokens) == r["new_tokens"] and float(tau) == pytest.approx(r["tau"], abs=0.006)
        assert float(speed) == pytest.approx(r["tokens_per_s"], abs=0.06)
        assert float(seconds) == pytest.approx(r["seconds"], abs=0.06)
    assert err.count("\n") >= 2  # each status line ended with a newline


def test_on_a_terminal_the_status_line_replaces_the_summary_lines(tiny_dir, tmp_path, capsys, monkeypatch):
    tty = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", tty)
    assert _generate(tiny_dir, tmp_path) == 0
    out, err = capsys.readouterr().out, tty.getvalue()
    assert out.startswith("==> q7 <==\n") and "\n\n==> 1 <==\n" in out
    assert _final_draws(err, "[1/2] id q7: ") and _final_draws(err, "[2/2] id 1: ")
    assert not re.search(r"^\[\d+ tokens,", err, re.M)  # no summary line repeats the status line
