"""Recompute τ in stored benchmark reports: a verify step counts the tokens it emitted
(docs/design.md §6).

Reports written before that definition counted each turn's last step with the n + 1 tokens its
walk accepted, even where the end of the output (a stop token, ``max_new_tokens``) cut it. Their
records keep, per turn, the output ids and those walk lengths, and only a turn's last step can be
cut, so what that step emitted is the turn's tokens less the prefill's less what the steps before
it emitted: every τ of the report follows exactly. This rewrites the records in today's format
(``accept_lengths``: tokens emitted; ``drafts_accepted``: the walk's n) and the τ of each record,
of the summary (all questions, per task, MT-bench first turns, temperature 1), of the static
against dynamic rows and of the goals older reports carry, in the JSON and in the Markdown
report beside it. What it reconstructs is checked: the per-depth acceptance recomputed from the
walk counts must equal the stored one, and the Markdown must hold the rendering of the stored
JSON before a figure in it is replaced. A calibration pass (a report's own, or a calibration
command's JSON given with ``--calibration``) traced the first turns of the same questions,
greedy, with fewer new tokens, so its steps are the first steps of those turns in a report's
records of the same method: its τ is recomputed from them when they give back its stored step
count, accepted drafts and τ. A τ with no steps stored (the tuner's trees) is left as it is and
listed.

    python -m tools.retau docs/bench/*.json docs/bench/archive/*.json          # rewrite; print every τ that moved
    python -m tools.retau --check docs/bench/*.json docs/bench/archive/*.json  # exit 1: a report counts cut steps whole
    python -m tools.retau docs/bench/*.json --calibration workbench/assets/eagle-smollm2-135m/calibration.json
"""

from __future__ import annotations

import copy
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from workbench.measure import metrics
from workbench.bench import report, static_vs_dynamic
from workbench.errors import ArgumentParser

PAPER_TREE, SPEED_TREE = "eagle2:60/6/10", "eagle2:best"  # the methods the goals section names


@dataclass
class Change:
    where: str  # e.g. "summary eagle2:8/5/4 tau", "records linear:3 q81"
    old: float | None
    new: float | None


def emitted_lengths(output_ids: list[int], walk_lengths: list[int]) -> list[int]:
    """One turn's tokens emitted per verify step, from its output and its steps' walk lengths
    (n + 1 each): every step but the last emitted all its walk accepted; the last emitted the rest."""
    if not walk_lengths:
        if len(output_ids) > 1:
            raise ValueError(f"{len(output_ids)} tokens but no verify step")
        return []
    *whole, last = walk_lengths
    rest = len(output_ids) - 1 - sum(whole)  # the prefill emitted the first token
    if not 1 <= rest <= last:
        raise ValueError(f"the last step would have emitted {rest} of the {last} tokens its walk accepted")
    return whole + [rest]


def upgrade_record(rec: dict) -> None:
    """A record in the old format (walk lengths as ``accept_lengths``, no ``drafts_accepted``) in
    today's; a record already in it is checked and left alone."""
    if "accept_lengths" not in rec:
        return
    if "drafts_accepted" in rec:
        for out, lengths in zip(rec["output_ids"], rec["accept_lengths"], strict=True):
            if sum(lengths) != len(out) - 1:
                raise ValueError(f"question {rec['question_id']}: accept lengths do not add up to its output")
        return
    walks = rec["accept_lengths"]
    rec["accept_lengths"] = [emitted_lengths(out, w) for out, w in zip(rec["output_ids"], walks, strict=True)]
    rec["drafts_accepted"] = [[a - 1 for a in w] for w in walks]


def _r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _tau(records: list[dict], first_turn_only: bool = False) -> float | None:
    return _r3(metrics.tau(metrics.accept_lengths(records, first_turn_only)))


class Retau:
    """One report's τ recomputed in place; ``changes`` lists what moved, ``left`` what could not be
    recomputed."""

    def __init__(self, result: dict):
        self.result, self.changes, self.left = result, [], []

    def set(self, where: str, holder: dict, key: str, new) -> None:
        old = holder.get(key)
        if old != new:
            self.changes.append(Change(where, old, new))
        holder[key] = new

    def run(self) -> None:
        res = self.result
        for name, s in res["summary"].items():  # before the records change: the old count gives the stored τ
            recs = res["records"].get(name, [])
            if "tau" in s and any("drafts_accepted" not in r for r in recs) and _tau(recs) != s["tau"]:
                raise ValueError(f"{name}: by the old count the records give τ {_tau(recs)}, the report {s['tau']}")
        for group in ("records", "records_t1"):
            for name, recs in (res.get(group) or {}).items():
                for rec in recs:
                    upgrade_record(rec)
                    if "tau" in rec:
                        self.set(f"{group} {name} q{rec['question_id']}", rec, "tau", round(metrics.tau(
                            metrics.accept_lengths([rec])) or 0.0, 3))
        for name, s in res["summary"].items():
            if "tau" in s:
                self.summary(name, s)
        for row in res.get("static_vs_dynamic") or []:
            self.static_vs_dynamic(row)
        for g in res.get("goals") or []:
            self.goal(g)
        self.calibration()
        if res.get("tune"):
            self.left += [f"tune {t['tree']} tau {t['tau']}" for t in res["tune"]["trees"]]

    def summary(self, name: str, s: dict) -> None:
        recs, hot = self.result["records"][name], (self.result.get("records_t1") or {}).get(name)
        self.set(f"summary {name} tau", s, "tau", _tau(recs))
        if "tau_mtbench_turn1" in s:
            mt = [r for r in recs if r["task"] == "mt_bench"]
            self.set(f"summary {name} tau_mtbench_turn1", s, "tau_mtbench_turn1", _tau(mt, first_turn_only=True))
        for task, trecs in metrics.by_task(recs).items():
            if "tau" in s["per_task"].get(task, {}):
                self.set(f"summary {name} {task} tau", s["per_task"][task], "tau", _tau(trecs))
        if "tau_t1" in s and hot:
            self.set(f"summary {name} tau_t1", s, "tau_t1", _tau(hot))
        for key, rs in (("per_depth", recs), ("per_depth_t1", hot)):
            if s.get(key):  # the walk counts rebuilt from the records give back the stored figures
                got = [_r3(x) for x in metrics.per_depth_acceptance(metrics.drafts_accepted(rs), len(s[key]))]
                if got != s[key]:
                    raise ValueError(f"{name}: {key} from the records is {got}, the report says {s[key]}")

    def static_vs_dynamic(self, row: dict) -> None:
        where = f"static_vs_dynamic D={row['D']} {row['task']}"

        def recs(name):
            rs = self.result["records"][name]
            return rs if row["task"] == "all" else [r for r in rs if r["task"] == row["task"]]

        ts = metrics.tau(metrics.accept_lengths(recs(row["static"])))
        td = metrics.tau(metrics.accept_lengths(recs(row["dynamic"])))
        self.set(f"{where} tau_static", row, "tau_static", ts)
        self.set(f"{where} tau_dynamic", row, "tau_dynamic", td)
        self.set(f"{where} tau_ratio", row, "tau_ratio", td / ts if ts and td else None)

    def goal(self, g: dict) -> None:
        """The goals section of older reports: its τ values and the τ quoted in its notes."""
        summary = self.result["summary"]
        ratio = re.fullmatch(r"tau\((\S+)\) >= ([\d.]+) x tau\((\S+)\)", g["goal"])
        if g["goal"].startswith("tau >= 4.0 at 60/6/10") and PAPER_TREE in summary:
            self.set(f"goal {g['goal']}", g, "value", summary[PAPER_TREE].get("tau_mtbench_turn1"))
        elif ratio:
            tree, chain = summary[ratio[1]]["tau"], summary[ratio[3]]["tau"]
            self.set(f"goal {g['goal']}", g, "value", round(tree / chain, 3))
            g["note"] = f"tau {tree} vs {chain}"
        else:
            if SPEED_TREE in summary:
                g["note"] = re.sub(r"\btau [\d.]+;", f"tau {summary[SPEED_TREE]['tau']};", g["note"])
            return
        g["met"] = g["value"] is not None and g["value"] >= g["target"]


    def calibration(self) -> None:
        """The report's own calibration pass."""
        cal = self.result.get("calibration")
        if not cal or cal.get("tau") is None:
            return
        new = calibration_tau(self.result["records"].get(cal["method"], []), cal["max_new_tokens"], cal["tau"],
                              cal["table"]["summary"])
        if new is None:
            self.left.append(f"calibration {cal['method']} tau {cal['tau']}")
        else:
            self.set(f"calibration {cal['method']} tau", cal, "tau", new)


def calibration_tau(records: list[dict], max_new_tokens: int, stored: float, summary: dict) -> float | None:
    """The τ of a greedy calibration pass over the first turns of ``records``' questions with
    ``max_new_tokens``: its steps are the first steps of those turns. None unless they give back
    the pass's step count, its accepted drafts and its ``stored`` τ by either count (the old one
    before a rewrite)."""
    walks, emitted = [], []
    for rec in records:
        limit, done = min(max_new_tokens, len(rec["output_ids"][0])), 1  # the prefill emitted one token
        for n in rec["drafts_accepted"][0]:
            if done >= limit:
                break
            walks.append(n + 1)
            emitted.append(min(n + 1, limit - done))
            done += n + 1
    same = len(walks) == summary["steps"] and sum(walks) - len(walks) == summary["accepted"]
    new = metrics.tau(emitted)
    return new if same and stored in (metrics.tau(walks), new) else None


def calibration_asset(path: Path, reports: list[dict], check: bool) -> bool:
    """A calibration command's JSON (``python -m workbench.bench calibration``): its τ from the
    records of a report that ran its method on its questions in its dtype. Whether it moved."""
    asset = json.loads(path.read_text(encoding="utf-8"))
    meta = asset["meta"]
    for res in reports:
        names = [n for n, s in res["summary"].items() if s["label"] == meta["method"]]
        if not names or res["meta"]["dtype"] != meta["dtype"] or res["meta"]["subset"] != meta["subset"] \
                or meta["temperature"] != 0 or len(res["records"][names[0]]) != meta["questions"]:
            continue
        new = calibration_tau(res["records"][names[0]], meta["max_new_tokens"], meta["tau"], asset["table"]["summary"])
        if new is not None:
            print(f"{path}: tau {meta['tau']} -> {new} (the first steps of {res['meta']['command']})")
            moved = new != meta["tau"]
            if moved and not check:
                meta["tau"] = new
                path.write_text(json.dumps(asset, indent=1) + "\n", encoding="utf-8")
            return moved
    print(f"{path}: no report holds its steps, left as it is: tau {meta['tau']}")
    return False


def goals_list(result: dict) -> str:
    """The goals section as older reports rendered it."""
    lines = []
    for g in result.get("goals") or []:
        mark = "met" if g["met"] else "**missed**"
        lines.append(f"- {g['goal']}: {'–' if g['value'] is None else format(g['value'], '.2f')} "
                     f"(goal {g['target']}) — {mark}" + (f". {g['note']}" if g["note"] else ""))
    return "\n".join(lines)


def _blocks(result: dict) -> list[str]:
    """Every part of the Markdown report that quotes τ, rendered from ``result``."""
    out = [report.headline_table(result), report.task_table(result)]
    if result.get("static_vs_dynamic"):
        out.append(static_vs_dynamic.markdown(result["static_vs_dynamic"]))
    if result.get("goals"):
        out.append(goals_list(result))
    return out


def rewrite_markdown(text: str, before: dict, after: dict) -> str:
    """``text`` with each τ-quoting block of ``before`` replaced by the same block of ``after``."""
    for old, new in zip(_blocks(before), _blocks(after), strict=True):
        if text.count(old) != 1:
            raise ValueError(f"the report does not hold this rendering of its JSON:\n{old}")
        text = text.replace(old, new)
    return text


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m tools.retau", description=__doc__.splitlines()[0])
    p.add_argument("reports", nargs="+", type=Path, help="results.json files of python -m workbench bench")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a τ would move")
    p.add_argument("--calibration", type=Path, action="append", default=[], metavar="JSON",
                   help="also a calibration command's JSON, from the records of the reports given (repeatable)")
    args = p.parse_args(argv)
    moved, done = False, []
    for path in args.reports:
        before = json.loads(path.read_text(encoding="utf-8"))
        if "summary" not in before or "records" not in before:
            print(f"{path}: not a report of python -m workbench bench (no summary and records), skipped")
            continue
        after = copy.deepcopy(before)
        job = Retau(after)
        job.run()
        print(f"{path}: {len(job.changes)} τ figures moved")
        for c in job.changes:
            print(f"  {c.where}: {c.old} -> {c.new}")
        for line in job.left:
            print(f"  not in the records, left as it is: {line}")
        md = path.with_suffix(".md")
        changed = after != before
        moved |= changed
        if changed and not args.check:
            text = rewrite_markdown(md.read_text(encoding="utf-8"), before, after) if md.exists() else None
            path.write_text(json.dumps(after, indent=1), encoding="utf-8")
            if text is not None:
                md.write_text(text, encoding="utf-8")
        done.append(after)
    for path in args.calibration:
        moved |= calibration_asset(path, done, args.check)
    return 1 if args.check and moved else 0


if __name__ == "__main__":
    sys.exit(main())
