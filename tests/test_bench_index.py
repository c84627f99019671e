"""docs/bench/README.md indexes every benchmark record, current and archived; the README's table
is its record's; no page shows a path of the machine it was written on; a new record says where
it came from."""

from __future__ import annotations

import re
from pathlib import Path

from tools import readme_table
from workbench.measure import provenance

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "docs" / "bench"
INDEX = BENCH / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)\)")
# a path that names one machine; the GPU recipe stages its first part in /tmp/wb-gpu on purpose
# (it must outlive the command that carried it: experiments/gpu/recipe.py)
MACHINE_PATH = re.compile(r"(?<![\w.$])/(?:root|work|home|Users)/|(?<![\w.])/tmp/(?!wb-gpu)")


def index_rows() -> list[tuple[str, str]]:
    """(the row's record, the row's text) for every row of the index's tables."""
    rows = []
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        found = LINK.search(line)
        if line.startswith("| [") and found:
            rows.append((found[1], line))
    return rows


def test_every_record_is_in_the_index_and_every_row_is_a_record():
    rows = index_rows()
    records = {record for record, _ in rows}
    assert len(records) == len(rows), "a record has two rows"
    missing = []
    for path in sorted(BENCH.rglob("*")):
        name = str(path.relative_to(BENCH))
        if path.is_dir() or path == INDEX or name in records:
            continue
        stem, kind = re.match(r"(.*?)\.(json|records\.jsonl)$", name).groups() if \
            re.search(r"\.(json|records\.jsonl)$", name) else (name, None)
        row = dict(rows).get(stem + ".md", "")
        if not (kind == "json" and "+ JSON" in row or kind == "records.jsonl" and "records)" in row):
            missing.append(name)
    assert not missing, f"docs/bench/README.md lists no row for {missing}"
    gone = [r for r in records if not (BENCH / r).is_file()]
    assert not gone, f"docs/bench/README.md has rows for {gone}, which do not exist"
    beside = [r for r, text in rows if "+ JSON" in text and not (BENCH / r).with_suffix(".json").is_file()]
    assert not beside, f"rows say a JSON is beside {beside}, and none is"
    for record, text in rows:
        current = not record.startswith("archive/")
        assert text.count(" | ") == (5 if current else 6), f"{record}: a row has the index's columns"
        if not current:  # an archived record names what superseded it, a current record
            successor = LINK.findall(text.rsplit(" | ", 1)[1])
            assert successor and all(not s.startswith("archive/") and (BENCH / s).is_file() for s in successor), record


def test_every_link_in_the_records_resolves():
    broken = []
    for page in sorted(BENCH.rglob("*.md")):
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_no_page_shows_a_path_of_the_machine_it_was_written_on():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(BENCH.rglob("*.json")),
             *sorted(BENCH.rglob("*.txt"))]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in pages
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if MACHINE_PATH.search(line) or p.is_relative_to(BENCH) and "~/.cache" in line]
    assert not found, f"machine paths (write them relative to the repository or $WORKBENCH_CACHE): {found}"
    assert MACHINE_PATH.search("draft /work/main/workbench/assets") and MACHINE_PATH.search("/root/.cache")
    assert not MACHINE_PATH.search("bench_out/x docs/bench/y $WORKBENCH_CACHE/ab /tmp/wb-gpu/a")


def test_the_readme_table_is_its_records():
    """Regenerated from the record its marker names, the README's block is unchanged; the
    record is a current one of the index."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = readme_table.BLOCK.search(text)
    assert found, "README.md has no bench-table block"
    record = found["record"]
    assert record.startswith("docs/bench/") and (ROOT / record).is_file()
    assert readme_table.rewrite(text) == text, "README.md's table is not its record's: python -m tools.readme_table"
    md = Path(record).with_suffix(".md").name
    assert md in dict(index_rows()), f"{md} is not a current record of docs/bench/README.md"
    assert f"]({Path(record).with_suffix('.md')})" in found["body"]  # the table names its record
    assert readme_table.main(["--check"]) == 0


def test_the_table_is_what_the_record_says():
    result = {"meta": {"questions": 2, "subset": "quick", "max_new_tokens": 8, "dtype": "fp32",
                       "date": "2026-01-02T03:04:05", "commit": "abc123", "command": "python -m workbench bench",
                       "machine": {"cpu": "Some CPU", "cores": 4, "torch_threads": 3, "simd": ["avx2"], "cuda": None}},
              "summary": {"vanilla": {"tau": None, "tokens_per_s": 10.0, "speedup_vs_vanilla": 1.0,
                                      "equal_to_vanilla": 1.0},
                          "linear:1": {"tau": 1.456, "tokens_per_s": 13.04, "speedup_vs_vanilla": 1.304,
                                       "equal_to_vanilla": 0.5}}}
    body = readme_table.render(result, "docs/bench/x.json")
    assert "3 threads, on a 4-core Some CPU with AVX2 only, 2026-01-02, commit abc123 (record " \
           "[docs/bench/x.md](docs/bench/x.md))" in body
    assert "| plain decoding (`vanilla`) | – | 10.0 | 1.00x | 2/2 |" in body
    assert "| `linear:1` | 1.46 | 13.0 | 1.30x | 1/2 |" in body
    assert body.rstrip().endswith("The command: `python -m workbench bench`.")


def test_a_table_of_several_rounds_shows_each_range_and_what_they_settle():
    rounds = {"runs": 3}
    result = {"meta": {"questions": 2, "subset": "quick", "max_new_tokens": 8, "dtype": "fp32",
                       "date": "2026-01-02T03:04:05", "commit": "abc123", "command": "python -m workbench bench",
                       "machine": {"cpu": "Some CPU", "cores": 4, "torch_threads": 3, "simd": ["avx2"], "cuda": None}},
              "summary": {"vanilla": {"tau": None, "tokens_per_s": 10.0, "speedup_vs_vanilla": 1.0, "equal_to_vanilla": 1.0,
                                      "rounds": {**rounds, "tokens_per_s": [9.0, 10.0, 11.0],
                                                 "speedup_vs_vanilla": [1.0, 1.0, 1.0]}},
                          "linear:1": {"tau": 1.456, "tokens_per_s": 13.04, "speedup_vs_vanilla": 1.304,
                                       "equal_to_vanilla": 0.5,
                                       "rounds": {**rounds, "tokens_per_s": [12.0, 13.04, 14.0],
                                                  "speedup_vs_vanilla": [1.25, 1.304, 1.35]}}}}
    body = readme_table.render(result, "docs/bench/x.json")
    assert "| `linear:1` | 1.46 | 13.0 (12.0–14.0) | 1.30x (1.25–1.35x) | 1/2 |" in body
    assert "Over 3 rounds" in body and "clear above it in every round: `linear:1` (1.25–1.35x)" in body
    assert "fastest by median `linear:1`, clear of every other range" in body and "One run" not in body
    assert body.rstrip().endswith("The command: `python -m workbench bench`.")


def test_a_record_names_its_commit_and_no_machine_path(monkeypatch, tmp_path):
    commit = provenance.commit()
    assert commit is None or re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", commit)
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "store"))
    package = ROOT / "workbench" / "assets" / "eagle-smollm2-135m"
    assert provenance.shown(f"{package}, 4096 hot draft tokens") == \
        "workbench/assets/eagle-smollm2-135m, 4096 hot draft tokens"
    assert provenance.shown(str(tmp_path / "store" / "SmolLM2-135M-Instruct")) == \
        "$WORKBENCH_CACHE/SmolLM2-135M-Instruct"
    assert provenance.shown(f"{ROOT}/docs/bench/x.json") == "docs/bench/x.json"
    assert provenance.shown(f"{Path.home()}/heads/mine") == "~/heads/mine"
    assert provenance.shown("random (seed 1)") == "random (seed 1)"
