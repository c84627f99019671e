"""The README's benchmark table, written from the record it names.

    python -m tools.readme_table            # rewrite the block in README.md from its record
    python -m tools.readme_table --check    # exit 1 if the block is not what its record gives

The block sits between two markers; the first names the record, a bench run's JSON under
``docs/bench/`` (``python -m workbench bench`` writes it as ``results.json``)::

    <!-- bench-table docs/bench/head-cpu-fp32.json -->
    ... (written by this tool) ...
    <!-- /bench-table -->

To show a newer run, copy its report into ``docs/bench/`` (docs/bench/README.md says how, and
where the old one goes), change the name in the first marker and run this. The block holds τ,
tokens/s, the speedup over plain decoding and output equality per setting, the CPU, threads,
dtype, date and commit, and the command, all read from the record: nothing in it is typed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from workbench.cpu_choices import cpu_kind

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- bench-table (?P<record>\S+) -->\n)(?P<body>.*?)(<!-- /bench-table -->)", re.S)


def cpu_words(machine: dict) -> str:
    """``2-core AMD EPYC with AVX-512 BF16`` from a record's ``machine``."""
    ext = cpu_kind(set(machine.get("simd") or []))
    gpu = f", {machine['cuda']}" if machine.get("cuda") else ""
    return f"{machine['cores']}-core {machine['cpu']}" + (f" with {ext}" if ext != "no AVX2" else "") + gpu


def _equal(share: float | None, questions: int) -> str:
    return "–" if share is None else f"{round(share * questions)}/{questions}"


def render(result: dict, record: str) -> str:
    """The block's body: a sentence saying what ran where and when, the table, the command."""
    m, summary = result["meta"], result["summary"]
    md = record.removesuffix(".json") + ".md"
    commit = f", commit {m['commit']}" if m.get("commit") else ""
    lines = [f"The shipped head on {m['questions']} Spec-Bench questions ({m['subset']}: one per task) × "
             f"{m['max_new_tokens']} new tokens, greedy, {m['dtype']}, {m['machine']['torch_threads']} threads, "
             f"on a {cpu_words(m['machine'])}, {m['date'][:10]}{commit} (record [{md}]({md})):", "",
             "| setting | τ | tokens/s | × plain decoding | output = plain decoding |", "|---|---|---|---|---|"]
    for name, s in summary.items():
        label = "plain decoding (`vanilla`)" if name == "vanilla" else \
            "transformers `generate`" if name == "hf-greedy" else f"`{name}`"
        tau = "–" if s.get("tau") is None else f"{s['tau']:.2f}"
        lines.append(f"| {label} | {tau} | {s['tokens_per_s']:.1f} | {s['speedup_vs_vanilla']:.2f}x | "
                     f"{_equal(s.get('equal_to_vanilla'), m['questions'])} |")
    lines += ["", f"One run, one pass per setting (runs on this CPU move by ±10-20 %: "
                  f"[docs/benchmarks.md](docs/benchmarks.md) has the others and the spread). The command: "
                  f"`{m['command']}`.", ""]
    return "\n".join(lines)


def rewrite(text: str) -> str:
    """``text`` (the README) with its block written from the record its marker names."""
    found = BLOCK.search(text)
    if found is None:
        raise SystemExit("README.md has no <!-- bench-table RECORD --> ... <!-- /bench-table --> block")
    record = found["record"]
    result = json.loads((ROOT / record).read_text(encoding="utf-8"))
    return text[:found.start("body")] + render(result, record) + text[found.end("body"):]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.readme_table", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the README's block differs from its record")
    args = p.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    new = rewrite(text)
    if args.check:
        if new != text:
            print("README.md's benchmark table is not its record's: run python -m tools.readme_table",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        README.write_text(new, encoding="utf-8")
        print("rewrote README.md's benchmark table")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
