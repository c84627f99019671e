"""What the benchmark measured per task for each draft source, shown beside a step's τ so that a
miss-heavy step on a task the draft is weak at reads as the task, not a bug.

These figures were not measured on the page: they are a stored run's, so every line that shows one
names the run's record and date (``DraftBench.source``) and says that the engine may have changed
since.

The asset (``workbench/assets/draft-sources.json``, written by ``python -m experiments.routes``
from a benchmark run) is::

    {"meta": {"record": str, "command": str, "date": str, "cpu": str, "dtype": str, "max_new_tokens": int},
     "routes": {"head 4/3/2": {"draft": "head" | "ngram:1-12" | "exit:28", "tree": "4/3/2",
                               "per_task": {"math_reasoning": {"tau": 3.1, "speedup": 1.4}, ...}}}}

``tree`` is ``D/S/K`` (num_draft_tokens / num_steps / topk), as the benchmark writes trees. No
file: nothing is shown. A file that does not follow the format: ``ValueError`` naming the entry.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path

from workbench.engine.config import SpecConfig
from workbench.engine.drafts.registry import SOURCES, parse_draft


ASSET = Path(__file__).resolve().parent.parent / "assets" / "draft-sources.json"
META = {"record": str, "command": str, "date": str, "cpu": str, "dtype": str, "max_new_tokens": int}
TASK_NAMES = {"qa": "QA", "rag": "RAG", "mt_bench": "MT-bench"}  # the others: underscores as spaces


@dataclass(frozen=True)
class Route:
    """One measured draft source at one tree: τ and speedup over vanilla per task."""

    label: str
    draft: str  # DraftSource.name: head, ngram:1-12, exit:28
    tree: tuple[int, int, int]  # (num_draft_tokens, num_steps, topk)
    per_task: dict[str, tuple[float, float]]  # task -> (tau, speedup)

    @property
    def tree_text(self) -> str:
        return "/".join(map(str, self.tree))


@dataclass(frozen=True)
class DraftBench:
    meta: dict
    routes: tuple[Route, ...]

    @property
    def source(self) -> str:
        """Which run the figures are, in words: ``the bench run of 2026-12-06
        (docs/bench/draft-sources.md)``."""
        return f"the bench run of {self.meta['date'][:10]} ({self.meta['record']})"

    def route_for(self, spec: SpecConfig) -> Route | None:
        """The route measured with ``spec``'s draft source, at the tree nearest to ``spec``'s
        (the smallest sum of differences in D, S and K; the file's first on a tie); None if that
        draft was not measured."""
        same = [r for r in self.routes if r.draft == spec.draft.name]
        return min(same, key=lambda r: tree_distance(r.tree, spec), default=None)

    def nearest_tree(self, spec: SpecConfig) -> tuple[int, int, int] | None:
        """The measured tree nearest ``spec``'s (by ``tree_distance``; the file's first on a tie)."""
        return min((r.tree for r in self.routes), key=lambda t: tree_distance(t, spec), default=None)

    def note_html(self, spec: SpecConfig) -> str:
        """One compact line for the page: the per-task τ (and speedup) of ``spec``'s draft, how it
        was measured folded under it; "" if that draft was not measured."""
        route = self.route_for(spec)
        if route is None:
            return ""
        m = self.meta
        tasks = ", ".join(f"{task_name(t)} {tau:.2f} ({speed:.2f}×)" for t, (tau, speed) in route.per_task.items())
        nearest = "" if route.tree == (spec.num_draft_tokens, spec.num_steps, spec.topk) else \
            ", the measured tree nearest yours"
        how = (f"{m['cpu']}, {m['dtype']}, {m['max_new_tokens']} tokens per answer, {m['date']}"
               f"{', commit ' + m['commit'] if m.get('commit') else ''}: <code>{html.escape(m['command'])}</code>")
        return (f"<div class='wb-bench'><b>Bench τ per task</b> for this draft ({html.escape(route.draft)} at "
                f"{route.tree_text}{nearest}; the speedup over plain decoding in brackets): {html.escape(tasks)}. "
                f"Quoted from {html.escape(self.source)}, not measured on this page: the engine may have "
                "changed since, the speedups most. "
                "A step that misses on an open chat prompt is the task, not a bug."
                f"<details><summary>how it was measured</summary>{how}</details></div>")

    def best(self, spec: SpecConfig, tasks, usable) -> tuple[Route, str] | None:
        """(route, task) with the highest τ among the routes at the measured tree nearest
        ``spec``'s, over the ``tasks`` given (those the page has an example for) and the drafts
        ``usable(name)`` accepts (those this app can run); None when there is none."""
        tree = self.nearest_tree(spec)
        found = [(tau, -i, r, t) for i, r in enumerate(self.routes) if r.tree == tree and usable(r.draft)
                 for t, (tau, _) in r.per_task.items() if t in tasks]
        return max(found, key=lambda f: f[:2])[2:] if found else None


def tree_distance(tree: tuple[int, int, int], spec: SpecConfig) -> int:
    """How far a measured (D, S, K) is from ``spec``'s: the sum of the differences."""
    return sum(abs(a - b) for a, b in zip(tree, (spec.num_draft_tokens, spec.num_steps, spec.topk)))


def task_name(task: str) -> str:
    """``math_reasoning`` -> "math reasoning", ``qa`` -> "QA"."""
    return TASK_NAMES.get(task, task.replace("_", " "))


def load_draft_bench(path: str | Path | None = None) -> DraftBench | None:
    """The benchmark's per-task τ per draft source from ``path`` (default: the shipped asset);
    None when the file does not exist. ValueError, naming the file and the entry, for a file
    that does not follow the format above."""
    path = Path(path) if path is not None else ASSET
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        return DraftBench(_meta(data.get("meta")), _routes(data.get("routes")))
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{path}: {err}") from None


def _meta(meta) -> dict:
    if not isinstance(meta, dict):
        raise ValueError("meta must be an object")
    for key, kind in META.items():
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise ValueError(f"meta.{key} must be a {kind.__name__}, got {meta.get(key)!r}")
    return meta


def _routes(routes) -> tuple[Route, ...]:
    if not isinstance(routes, dict) or not routes:
        raise ValueError("routes must be a non-empty object")
    return tuple(_route(label, r) for label, r in routes.items())


def _route(label: str, r) -> Route:
    where = f"routes[{label!r}]"
    if not isinstance(r, dict):
        raise ValueError(f"{where} must be an object")
    draft, tree, per_task = r.get("draft"), r.get("tree"), r.get("per_task")
    source = parse_draft(draft) if isinstance(draft, str) else None
    if source is None:
        raise ValueError(f"{where}.draft must be a draft source as --draft writes it ({', '.join(SOURCES)}), "
                         f"got {draft!r}")
    parts = tree.split("/") if isinstance(tree, str) else []
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"{where}.tree must be D/S/K (num_draft_tokens/num_steps/topk), got {tree!r}")
    if not isinstance(per_task, dict) or not per_task:
        raise ValueError(f"{where}.per_task must be a non-empty object")
    return Route(label, source.name, tuple(int(p) for p in parts),
                 {task: _task(f"{where}.per_task[{task!r}]", v) for task, v in per_task.items()})


def _task(where: str, v) -> tuple[float, float]:
    if not isinstance(v, dict):
        raise ValueError(f"{where} must be an object with tau and speedup")
    tau, speed = v.get("tau"), v.get("speedup")
    if not _finite(tau) or tau < 1:
        raise ValueError(f"{where}.tau must be a number >= 1 (tokens per verify step), got {tau!r}")
    if not _finite(speed) or speed <= 0:
        raise ValueError(f"{where}.speedup must be a number > 0, got {speed!r}")
    return float(tau), float(speed)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
