"""The README's benchmark table, written from the record it names.

    python -m tools.readme_table            # rewrite the blocks in README.md and docs/benchmarks.md
    python -m tools.readme_table --check    # exit 1 if a block is not what its record gives

The block sits between two markers; the first names the record, a bench run's JSON under
``docs/bench/`` (``python -m workbench bench`` writes it as ``results.json``)::

    <!-- bench-table docs/bench/head-cpu-fp32.json -->
    ... (written by this tool) ...
    <!-- /bench-table -->

To show a newer run, copy its report into ``docs/bench/`` (docs/bench/README.md says how, and
where the old one goes), change the name in the first marker and run this. The block holds τ,
tokens/s, the speedup over plain decoding and output equality per setting (with a run of several
rounds, each timed figure's range and what the rounds settle, ``report.rounds_verdict``), the
CPU, threads, dtype, date and commit, and the command, all read from the record: nothing in it
is typed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from workbench.bench.report import rounds_verdict, with_range
from workbench.cpu_choices import cpu_kind

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = ("README.md", "docs/benchmarks.md")  # the pages whose tables this writes, from the repository's root
BLOCK = re.compile(r"(<!-- bench-table (?P<record>\S+) -->\n)(?P<body>.*?)(<!-- /bench-table -->)", re.S)


def cpu_words(machine: dict) -> str:
    """``2-core AMD EPYC with AVX-512 BF16`` from a record's ``machine``."""
    ext = cpu_kind(set(machine.get("simd") or []))
    gpu = f", {machine['cuda']}" if machine.get("cuda") else ""
    return f"{machine['cores']}-core {machine['cpu']}" + (f" with {ext}" if ext != "no AVX2" else "") + gpu


def _equal(share: float | None, questions: int) -> str:
    return "–" if share is None else f"{round(share * questions)}/{questions}"


def render(result: dict, record: str, page: str = "README.md") -> str:
    """The block's body: a sentence saying what ran where and when, the table, the command. Links
    are relative to ``page``, the file the block sits in (a path from the repository's root)."""
    m, summary = result["meta"], result["summary"]
    md = os.path.relpath(record.removesuffix(".json") + ".md", Path(page).parent)
    bench = os.path.relpath("docs/benchmarks.md", Path(page).parent)
    commit = f", commit {m['commit']}" if m.get("commit") else ""
    lines = [f"The shipped head on {m['questions']} Spec-Bench questions ({m['subset']}: one per task) × "
             f"{m['max_new_tokens']} new tokens, greedy, {m['dtype']}, {m['machine']['torch_threads']} threads, "
             f"on a {cpu_words(m['machine'])}, {m['date'][:10]}{commit} (record [{md}]({md})):", "",
             "| setting | τ | tokens/s | × plain decoding | output = plain decoding |", "|---|---|---|---|---|"]
    for name, s in summary.items():
        label = "plain decoding (`vanilla`)" if name == "vanilla" else \
            "transformers `generate`" if name == "hf-greedy" else f"`{name}`"
        tau = "–" if s.get("tau") is None else f"{s['tau']:.2f}"
        lines.append(f"| {label} | {tau} | {with_range(s, 'tokens_per_s', '.1f')} | "
                     f"{with_range(s, 'speedup_vs_vanilla', '.2f', 'x')} | "
                     f"{_equal(s.get('equal_to_vanilla'), m['questions'])} |")
    settled = rounds_verdict(summary)
    others = f"[{bench}]({bench}) has the others" + ("" if settled else " and the spread") if page == "README.md" \
        else "the index of docs/bench/ has the runs before it"
    if settled:
        lines += ["", f"{settled} ({others}.) The command: `{m['command']}`.", ""]
    else:
        lines += ["", f"One run, one pass per setting (runs on this CPU move by ±10-20 %: {others}). "
                      f"The command: `{m['command']}`.", ""]
    return "\n".join(lines)


def rewrite(text: str, page: str = "README.md") -> str:
    """``text`` (the file ``page``) with every block written from the record its marker names."""
    if BLOCK.search(text) is None:
        raise SystemExit(f"{page} has no <!-- bench-table RECORD --> ... <!-- /bench-table --> block")

    def body(found: re.Match) -> str:
        result = json.loads((ROOT / found["record"]).read_text(encoding="utf-8"))
        return found.group(1) + render(result, found["record"], page) + found.group(4)

    return BLOCK.sub(body, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.readme_table", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a page's block differs from its record")
    args = p.parse_args(argv)
    stale = []
    for page in PAGES:
        path = ROOT / page
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, page)
        if new != text:
            stale.append(page)
            if not args.check:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {page}'s benchmark tables")
    if args.check and stale:
        print(f"{', '.join(stale)}: a benchmark table is not its record's: run python -m tools.readme_table",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
