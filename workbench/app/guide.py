"""Why each step stopped, in one sentence (``stop_line``, from the cause the engine recorded:
``engine/stops.py``), and a way out of a miss-heavy prompt: when a step accepts no draft, the page
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
from workbench.viz.tokens import show
from workbench.viz.tree import no_draft_note


def miss_line(trace: dict | None) -> str:
    """Why a speculative step accepted no draft, in one line; "" for any other step (the page
    offers a suggestion after such a step)."""
    if trace is None or trace["kind"] != "spec" or trace["accept"]["accepted"]:
        return ""
    return stop_line(trace)


def stop_line(trace: dict | None) -> str:
    """Why a speculative step's walk stopped, in one sentence, from its recorded cause (the
    trace's ``stop``): where, the token the target wanted there, the draft's rank and probability
    of it where the draft ran, and the change that would have caught it; "" for another step."""
    if trace is None or trace["kind"] != "spec" or "stop" not in trace:
        return ""
    stop, accept = trace["stop"], trace["accept"]
    n = len(accept["accepted"])
    head = f"Nothing accepted at step {trace['step']}" if not n else \
        f"Step {trace['step']} accepted {n} draft{'s' * (n != 1)}, then stopped"
    if len(trace["tree"]["nodes"]) == 1 and not trace["draft"]["candidates"]:
        return f"{head}: {no_draft_note(trace)}."
    return f"{head}: {_why(trace)}."


def _why(trace: dict) -> str:
    """The clause after the step's head: the stop cause in words."""
    stop, cause = trace["stop"], trace["stop"]["cause"]
    at = f"`{show(trace['tree']['nodes'][stop['node']]['text'])}`"  # a code span: <pad> is shown, not parsed
    want = (f"the target's next token after {at} was `{show(stop['text'])}`" if trace["accept"]["rule"] == "greedy"
            else f"the target drew `{show(stop['text'])}` after {at}")
    catch = ", ".join(f"{k} = {v}" for k, v in stop["catch"].items())
    if cause == "coin":
        tried = sum(1 for m in trace["accept"]["moves"] if m.get("child") is not None and m["node"] == stop["node"])
        return (f"the coins rejected all {tried} draft(s) tried after {at} ({trace['accept']['rule']} rule); "
                f"the bonus `{show(stop['text'])}` came from what the target had left")
    if cause == "budget":
        return f"{want}; the draft proposed it ({_rank(stop)}), but the rerank dropped it ({catch} would have kept it)"
    if cause == "depth":
        deeper = f"; {catch} would have drafted below it" if catch else ""
        return f"{want}, but {at} is on the tree's last level, with nothing drafted below it{deeper}"
    if cause == "frontier":
        return (f"{want}, but {at} was not among the topk best nodes of its level, so the draft never ran there "
                f"({catch} would have expanded it)")
    if cause == "shape":
        return f"{want}, but the static tree's shape has no node below {at}"
    if cause == "no match":
        return f"{want}, but the n-gram lookup found no earlier occurrence continuing after {at}"
    guessed = f"(it guessed {_guesses(trace)})"
    if cause == "vocabulary":
        return f"{want}, which is not among the draft's hot draft tokens: it could never propose it {guessed}"
    if cause == "continuation":
        return f"{want}, but the earlier text went on differently {guessed}"
    if cause == "width":
        proposed = sum(1 for c in trace["draft"]["candidates"] if c["parent"] == stop["candidate"])
        wider = f" ({catch} would have proposed it)" if catch else ""  # a static shape: no topk knob
        return f"{want}, which the draft did not guess {guessed}: {_rank(stop)}, below the {proposed} it proposed{wider}"
    return f"{want}, which the draft did not guess {guessed}: {_rank(stop)}"


def _rank(stop: dict) -> str:
    """The draft's rank and probability of the target's token at the stop node, in words."""
    if stop["rank"] is None:
        return "the draft did not rank it among its most likely tokens there" if stop["prob"] is None else \
            f"draft probability {stop['prob']:.3g}"
    return f"the draft ranked it #{stop['rank'] + 1} with probability {stop['prob']:.3g}"


def _guesses(trace: dict) -> str:
    """Every token the draft proposed below the stop node (kept or dropped at rerank), best first."""
    below = [c for c in trace["draft"]["candidates"] if c["parent"] == trace["stop"]["candidate"]]
    return ", ".join(f"`{show(c['text'])}`" for c in below) or "nothing"


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

