"""A way out of a miss-heavy prompt: when a step accepts no draft, one line says why, and the page
offers the example prompt and draft source for which this machine's bench measured the highest τ
(at the measured tree nearest the page's), so that a first visit on an open chat prompt is one
click away from a tree with an accepted path.

``examples.json`` links each example to the Spec-Bench task whose τ stands for it (``task``);
the bench's per-task τ comes from ``draft_bench.DraftBench``.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.app.draft_bench import task_name
from workbench.engine.drafts.base import DraftSource, boxes
from workbench.engine.drafts.registry import parse_draft
from workbench.viz.best_tree import greedy_continuation
from workbench.viz.logits import children
from workbench.viz.tokens import show
from workbench.viz.tree import no_draft_note

GUESSES_SHOWN = 3  # the root's children named when the target's token was not among them


def miss_line(trace: dict | None) -> str:
    """Why a speculative step accepted no draft, in one line; "" for any other step."""
    if trace is None or trace["kind"] != "spec" or trace["accept"]["accepted"]:
        return ""
    nodes = trace["tree"]["nodes"]
    if len(nodes) == 1:
        return f"Nothing accepted at step {trace['step']}: {no_draft_note(trace)}."
    after = f"after `{show(nodes[0]['text'])}`"  # code spans: a token such as <pad> is shown, not parsed
    tried = [m for m in trace["accept"]["moves"] if m.get("child") is not None]
    if trace["accept"]["rule"] != "greedy":
        return (f"Nothing accepted at step {trace['step']}: the coins rejected all {len(tried)} draft(s) tried {after}; "
                "the bonus came from what the target had left.")
    first = greedy_continuation(trace)[0]
    want = f"the target's next token {after} was `{show(first['text'])}`"
    if first["status"] == "dropped":
        return (f"Nothing accepted at step {trace['step']}: {want}; the draft proposed it, but the rerank dropped it "
                f"(num_draft_tokens = {first['needed_D']} would have kept it).")
    guesses = ", ".join(f"`{show(nodes[c]['text'])}`" for c in children(trace, 0)[:GUESSES_SHOWN])
    return f"Nothing accepted at step {trace['step']}: {want}, which the draft did not guess (it guessed {guesses})."


@dataclass(frozen=True)
class Suggestion:
    """An example prompt and a draft source to try, with the τ the bench measured for them."""

    example: dict  # an entry of examples.json
    draft: DraftSource
    tree: str  # the measured tree, D/S/K
    task: str
    tau: float
    source: str  # the run the τ is quoted from (DraftBench.source)

    def button(self) -> str:
        """The button's text."""
        return f"Try: {self.example['category']} · {self.draft.name}"

    def sentence(self) -> str:
        """What the bench measured, for the status line."""
        return (f"The highest τ {self.source} measured near your tree ({self.tree}) is {self.tau:.2f}: "
                f"the {self.draft.label()} on {task_name(self.task)}, the task of the "
                f"*{self.example['category']}* example.")

    def settings(self, current: dict) -> dict:
        """The page's values after taking the suggestion: ``current`` (field -> value) with the
        prompt and the draft source (its fields in the page's boxes) replaced, and eagle2 for a
        static tree with a model-free draft (the n-gram lookup), which has no distribution to rank
        a fixed shape by."""
        out = dict(current, prompt=self.example["prompt"], draft=self.draft.kind)
        out.update({box.name: getattr(self.draft, box.field) for box in boxes(self.draft)})
        if self.draft.model_free and out.get("method") == "static":
            out["method"] = "eagle2"
        return out


def suggest(bench, examples: list[dict], spec, runnable) -> Suggestion | None:
    """The example and draft with the bench's highest τ near ``spec``'s tree; ``runnable(draft)``
    says whether this app can run a ``DraftSource``. None without a bench, or with nothing to offer."""
    if bench is None:
        return None
    by_task = {}
    for e in examples:
        by_task.setdefault(e.get("task"), e)

    def usable(name: str) -> bool:
        return runnable(parse_draft(name))

    best = bench.best(spec, set(by_task) - {None}, usable)
    if best is None:
        return None
    route, task = best
    return Suggestion(example=by_task[task], draft=parse_draft(route.draft), tree=route.tree_text, task=task,
                      tau=route.per_task[task][0], source=bench.source)

