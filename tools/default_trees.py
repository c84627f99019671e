"""The trees ``generate --method eagle2`` runs without tree flags, written from the head records.

    python -m tools.default_trees            # rewrite workbench/assets/default-trees.json
    python -m tools.default_trees --check    # exit 1 if the file is not what the records give

``RECORDS`` are the current head benchmark records, one per kind of CPU and dtype (docs/bench/
README.md); when a new run replaces one, its name changes here and this is run again. For each,
the file keeps every ``eagle2`` setting's measured speedup over plain decoding (its rounds' range
where the record ran several) and the pick
(``workbench.default_tree.pick``); nothing in it is typed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.readme_table import cpu_words
from workbench.cpu_choices import cpu_kind
from workbench.default_tree import ASSET, pick

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ("docs/bench/head-cpu-fp32.json", "docs/bench/head-cpu-fp32-avx2.json", "docs/bench/head-cpu-bf16.json")


def entry(result: dict, record: str) -> dict:
    m = result["meta"]
    speedups = {name: s["speedup_vs_vanilla"] for name, s in result["summary"].items()
                if name.startswith("eagle2:") and "@" not in name and s.get("speedup_vs_vanilla") is not None}
    ranges = {name: [min(ups), max(ups)] for name in speedups
              if len(ups := (result["summary"][name].get("rounds") or {}).get("speedup_vs_vanilla") or []) > 1}
    out = {"record": record.removesuffix(".json") + ".md", "date": m["date"][:10],
           "kind": cpu_kind(set(m["machine"].get("simd") or [])), "cpu": cpu_words(m["machine"]),
           "dtype": m["dtype"], "speedups": speedups, **({"ranges": ranges} if ranges else {})}
    return {**out, "pick": pick(out)}


def render(root: Path = ROOT) -> str:
    entries = [entry(json.loads((root / r).read_text(encoding="utf-8")), r) for r in RECORDS]
    return json.dumps(entries, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file is not what the records give")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not ASSET.exists() or ASSET.read_text(encoding="utf-8") != text:
            print(f"{ASSET.relative_to(ROOT)} is not what its records give: python -m tools.default_trees",
                  file=sys.stderr)
            return 1
        return 0
    ASSET.write_text(text, encoding="utf-8")
    print(f"wrote {ASSET.relative_to(ROOT)} from {len(RECORDS)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
