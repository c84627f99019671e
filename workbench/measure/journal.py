"""The benchmark's journal: each finished result is kept as it comes, so that a stopped run resumes.

``<--out>/records.jsonl`` holds one JSON object a line, each line written whole with one
``write`` and flushed to the disk before the run goes on:

    {"run": {"format": 1, "settings": {...}, "started": DATE}}     first: what the results depend on
    {"setup": {"costs": ..., "tune": ..., "best_tree": ...,        the cost curves, the tuned tree and
               "step_costs": ...}}                                 the step costs the predictions read
    {"session": {"started": DATE, "load_average_start": [...]}}   every start, the first included
    {"result": {"phase": "t0", "method": NAME, "question_id": Q, "session": K, "elapsed_s": S,
                "record": {...}}}                                   one per (phase, method, question)
    {"probe": {"phase": "t0", "question_id": Q, "session": K,      the target's part timed after a
               "elapsed_s": S, "record": {...}}}                   question's turn (measure/probe.py)
    {"complete": DATE}                                              the report was written

``phase`` is ``t0`` for the timed greedy runs and ``t1`` for the temperature-1 runs read for τ;
``elapsed_s`` is the session's clock when the result was kept. A kill in the middle of a write
leaves at most a torn last line, which reading drops (that one result runs again).

A start in an ``--out`` whose journal is unfinished and holds results resumes it when its settings
equal this run's (those results reused as measured, only the missing ones run); with other
settings it is refused, unless ``fresh`` discards the journal. A finished journal, or one without
a result, is replaced. Nothing is written before the model has loaded (``Journal.start``).
"""

from __future__ import annotations

import datetime
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import UserError

FILE = "records.jsonl"
FORMAT = 1  # bump when a line or a record changes meaning: an older journal is then refused


def _now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


def _flag(key: str) -> str:
    return "questions" if key == "question_ids" else "--" + key.replace("_", "-")


def _shown(value) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def differences(there: dict, here: dict, most: int = 3) -> str:
    """The settings two runs disagree on, as ``--flag: A there, B here`` (at most ``most``)."""
    keys = [k for k in sorted(set(there) | set(here)) if there.get(k) != here.get(k)]
    text = "; ".join(f"{_flag(k)}: {_shown(there.get(k))} there, {_shown(here.get(k))} here" for k in keys[:most])
    return text + (f"; and {len(keys) - most} more" if len(keys) > most else "")


@dataclass
class Journal:
    """An open journal: what earlier sessions kept, and where this one appends."""
    path: Path
    settings: dict
    setup: dict | None = None  # costs, tune, best tree, step costs: from the session that measured them
    results: dict[tuple[str, str, int], dict] = field(default_factory=dict)  # (phase, method, question) -> line
    probes: dict[tuple[str, int], dict] = field(default_factory=dict)  # (phase, question) -> line
    sessions: list[dict] = field(default_factory=list)
    dropped: int = 0  # torn lines left out when it was read
    whole_bytes: int | None = None  # resuming: the file's length up to its last newline, when read
    t0: float = field(default_factory=time.perf_counter)  # this session's start, for elapsed_s

    @property
    def session(self) -> int:
        """This session's index (0: the run's first start)."""
        return len(self.sessions) - 1

    @property
    def resumed(self) -> bool:
        return self.session > 0

    def get(self, phase: str, method: str, question_id: int) -> dict | None:
        """The record kept for (phase, method, question), or None if it is still to run."""
        line = self.results.get((phase, method, question_id))
        return None if line is None else line["record"]

    def get_probe(self, phase: str, question_id: int) -> dict | None:
        """The probe kept after (phase, question)'s turn of the methods, or None."""
        line = self.probes.get((phase, question_id))
        return None if line is None else line["record"]

    def add_probe(self, phase: str, record: dict) -> None:
        line = {"phase": phase, "question_id": record["question_id"], "session": self.session,
                "elapsed_s": round(time.perf_counter() - self.t0, 1), "record": record}
        self.probes[(phase, record["question_id"])] = line
        self._append({"probe": line})

    def add_setup(self, setup: dict) -> None:
        self.setup = setup
        self._append({"setup": setup})

    def add_result(self, phase: str, method: str, record: dict) -> None:
        line = {"phase": phase, "method": method, "question_id": record["question_id"], "session": self.session,
                "elapsed_s": round(time.perf_counter() - self.t0, 1), "record": record}
        self.results[(phase, method, record["question_id"])] = line
        self._append({"result": line})

    def start(self, load_average: list[float]) -> None:
        """Write this session's start: a new journal's first line, or, resuming, a torn tail cut off
        (so the next line appended starts a line of its own) and this session's line."""
        if not self.sessions:
            _begin(self.path, self.settings)
        elif self.whole_bytes is not None and self.path.stat().st_size > self.whole_bytes:
            with open(self.path, "r+b") as f:
                f.truncate(self.whole_bytes)
        self.t0 = time.perf_counter()
        session = {"started": _now(), "load_average_start": load_average}
        self.sessions.append(session)
        self._append({"session": session})

    def finish(self) -> None:
        self._append({"complete": _now()})

    def summary(self) -> dict:
        """For the report: each session's start, load and results measured (with the clock of its
        last one, a lower bound on the wall time of a session that was stopped)."""
        sessions = [dict(s, measured=0, last_result_s=None) for s in self.sessions]
        for line in self.results.values():
            s = sessions[min(line["session"], len(sessions) - 1)]
            s["measured"] += 1
            s["last_result_s"] = max(s["last_result_s"] or 0.0, line["elapsed_s"])
        reused = sum(s["measured"] for s in sessions[:-1])
        return {"journal": str(self.path), "sessions": sessions, "results": len(self.results), "reused": reused}

    def _append(self, obj: dict) -> None:
        data = (json.dumps(obj) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            while data:  # one write in practice; a short write is finished, never left half
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)


def open_journal(out_dir: Path, settings: dict, *, fresh: bool, log) -> Journal:
    """The journal of ``out_dir``, read and checked but not written (that waits for ``start``, so a
    run that fails to load its model leaves the folder as it was): it resumes when it is unfinished,
    holds results and holds ``settings``; it is begun anew when there is none, when it is finished
    or holds no result, or with ``fresh``. UserError (one line) when an unfinished journal holds
    results of other settings and ``fresh`` is not given."""
    path = Path(out_dir) / FILE
    settings = json.loads(json.dumps(settings))  # as it reads back: tuples become lists
    lines, torn, whole = _read(path)
    run = next((ln["run"] for ln in lines if "run" in ln), None)
    finished = any("complete" in ln for ln in lines)
    kept = sum(1 for ln in lines if "result" in ln)
    if run is not None and not finished and kept and not fresh:
        there, here = {"format": run.get("format"), **run.get("settings", {})}, {"format": FORMAT, **settings}
        if there != here:
            raise UserError(f"{path} holds an unfinished run with other settings ({differences(there, here)}): "
                            "run its command again to resume it, give another --out, or add --fresh to discard it")
        journal = _resume(path, settings, lines, torn)
        journal.whole_bytes = whole
        log(f"resuming {path}: {len(journal.results)} results kept from {len(journal.sessions)} earlier start(s)"
            + (f", {torn} torn line(s) dropped" if torn else "") + " (--fresh measures everything again)")
        return journal
    if run is not None:
        why = "that run finished" if finished else "discarded (--fresh)" if kept else "it holds no result yet"
        log(f"{path}: {why}; measuring everything")
    return Journal(path, settings)


def read_journal(path: Path) -> Journal:
    """Everything a journal holds, finished or not, to read (``bench --report-only``)."""
    lines, torn, _ = _read(Path(path))
    run = next((ln["run"] for ln in lines if "run" in ln), None)
    if run is None:
        raise UserError(f"{path} is not a benchmark journal (no run line)")
    return _resume(Path(path), run.get("settings", {}), lines, torn)


def _read(path: Path) -> tuple[list[dict], int, int]:
    """The journal's whole lines, how many torn ones were left out, and the bytes up to its last
    newline (what is kept when a torn tail is cut off)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], 0, 0
    whole = raw[: raw.rfind(b"\n") + 1]
    torn = int(len(whole) < len(raw))
    lines = []
    for text in whole.decode("utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            torn += 1
            continue
        if isinstance(obj, dict):
            lines.append(obj)
    return lines, torn, len(whole)


def _begin(path: Path, settings: dict) -> None:
    """A new journal holding only the run line, written beside and renamed over any old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(json.dumps({"run": {"format": FORMAT, "settings": settings, "started": _now()}}) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def _resume(path: Path, settings: dict, lines: list[dict], torn: int) -> Journal:
    journal = Journal(path, settings, dropped=torn)
    for ln in lines:
        if "setup" in ln:
            journal.setup = ln["setup"]
        elif "session" in ln:
            journal.sessions.append(ln["session"])
        elif "result" in ln:
            r = ln["result"]
            journal.results[(r["phase"], r["method"], r["question_id"])] = r
        elif "probe" in ln:
            r = ln["probe"]
            journal.probes[(r["phase"], r["question_id"])] = r
    return journal
