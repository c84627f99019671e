"""The tree ``generate --method eagle2`` runs when no tree flag is given: the smallest of the trees
the head benchmark measured level with the fastest on this kind of CPU, in this dtype, with the
shipped head.

EAGLE-2's own tree (60 verify tokens, 6 levels, top 10: the paper's) and SGLang's usual one
(8/5/4: ``--speculative-num-draft-tokens 8 --speculative-num-steps 5 --speculative-eagle-topk 4``)
are made for GPUs, where a verify of 60 tokens costs about one of a token; on a CPU a verify of 8
costs more than a decode step and the small trees win (docs/benchmarks.md). Both stay one flag
away: ``--tree-preset sglang`` and ``--tree-preset eagle2-paper``.

The measured picks are ``workbench/assets/default-trees.json``, written by
``python -m tools.default_trees`` from the current head records under docs/bench/ (a test checks
the file is what the records say): per record its ``record``, ``date``, ``kind``, ``cpu``,
``dtype``, ``speedups`` by tree, ``ranges`` (each tree's lowest and highest round, where the
record ran several rounds) and ``pick``.

A CPU kind is its widest vector extension (``cpu_choices.cpu_kind``). On a kind no record holds,
the pick of the records' best is used and the line printed says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ASSET = Path(__file__).resolve().parent / "assets" / "default-trees.json"
PRESETS = {"sglang": (8, 5, 4), "eagle2-paper": (60, 6, 10)}  # (num_draft_tokens, num_steps, topk)
PRESET_NAMES = {"sglang": "SGLang's 8/5/4", "eagle2-paper": "EAGLE-2's paper tree 60/6/10"}
# A record of one pass per setting moves by ±10-20 %: there speedups within 10 % of the best are level. A record
# of several rounds says it itself: a tree is level with the best where their rounds' ranges overlap.
TIE = 0.10


@dataclass(frozen=True)
class Pick:
    """A measured default: the setting, its speedup, and where and when it was measured."""

    setting: str  # "eagle2:4/3/2"
    speedup: float
    record: str
    date: str
    cpu: str  # in words: "2-core AMD EPYC with AVX2 only"
    here: bool  # measured on this kind of CPU
    speedups: dict[str, float]  # every eagle2 setting of that record
    rounds: bool = False  # the record ran several rounds: level means ranges that overlap

    @property
    def tree(self) -> tuple[int, int, int]:
        """(num_draft_tokens, num_steps, topk)."""
        d, s, k = map(int, self.setting.split(":", 1)[1].split("/"))
        return d, s, k

    @property
    def noise(self) -> str:
        """What "level" meant in the record: overlapping rounds, or within ``TIE`` of one pass."""
        return "within the rounds' noise (their ranges overlap)" if self.rounds else \
            f"within one pass's noise ({TIE:.0%})"

    def line(self) -> str:
        """What the command line prints: the tree it runs, why, and the presets one flag away."""
        where = "on this kind of CPU" if self.here else \
            "on another kind of CPU (none measured on this one: python -m workbench bench measures it)"
        others = "; ".join(f"{PRESET_NAMES[name]}: --tree-preset {name}" +
                           (f" ({self.speedups[label]:.2f}x there)" if label in self.speedups else "")
                           for name, label in ((n, "eagle2:" + "/".join(map(str, t))) for n, t in PRESETS.items()))
        best = max(self.speedups, key=self.speedups.get)
        level = "" if best == self.setting else (f"; the fastest there, {best.split(':', 1)[1]} at "
                                                 f"{self.speedups[best]:.2f}x, is level with it {self.noise}")
        return (f"eagle2 without tree flags: {self.setting.split(':', 1)[1]} (num_draft_tokens/num_steps/topk), "
                f"the smallest of the trees measured fastest {where}, {self.speedup:.2f}x plain decoding on a "
                f"{self.cpu} "
                f"({self.record}, {self.date}{level}); {others}")


def level_with_best(entry: dict) -> list[str]:
    """The settings of a record level with its fastest by median speedup: those whose rounds'
    range overlaps the fastest's where the record has ``ranges`` (several rounds), else those
    within ``TIE`` of it (one pass)."""
    speedups, ranges = entry["speedups"], entry.get("ranges")
    best = max(speedups, key=speedups.get)
    if ranges and set(ranges) == set(speedups):
        lo, hi = ranges[best]
        return [s for s, (a, b) in ranges.items() if a <= hi and lo <= b]
    return [s for s, x in speedups.items() if x >= speedups[best] * (1 - TIE)]


def pick(entry: dict) -> str:
    """The setting of a record's ``speedups`` to run by default: among those level with the fastest
    (``level_with_best``), the one that verifies fewest tokens (the cheaper step, and the safer
    under load)."""
    level = level_with_best(entry)
    return min(level, key=lambda s: (int(s.split(":", 1)[1].split("/")[0]), -entry["speedups"][s]))


def measured_pick(kind: str, dtype: str, path: Path = ASSET) -> Pick | None:
    """The pick for a CPU of ``kind`` in ``dtype``; another kind's best pick when none was measured
    here (``here`` False); None without the file."""
    if not path.exists():
        return None
    entries = json.loads(path.read_text(encoding="utf-8"))
    same = [e for e in entries if e["kind"] == kind and e["dtype"] == dtype]
    pool = same or [e for e in entries if e["dtype"] == dtype] or entries
    if not pool:
        return None
    entry = max(pool, key=lambda e: e["speedups"][e["pick"]])
    return Pick(setting=entry["pick"], speedup=entry["speedups"][entry["pick"]], record=entry["record"],
                date=entry["date"], cpu=entry["cpu"], here=bool(same), speedups=dict(entry["speedups"]),
                rounds=bool(entry.get("ranges")))
