"""Why each step stopped, in one sentence (``stop_line``, from the cause the engine recorded:
``engine/stops.py``), and what to try after a step that accepted nothing (``suggest``), from that
cause: the knob that would have caught the target's token (a budget, a topk, one more level), or
where the draft itself disagreed, another draft source, only one the stored records
(``draft_bench.DraftBench``) measured faster. A suggestion changes settings, never the prompt,
and only when the learner presses its button.

And the line the page opens with (``measured_line``): what the setting on screen measured in the
head record of this kind of CPU (``default_tree``), and the fastest setting there.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.cpu_choices import cpu_flags, cpu_kind
from workbench.default_tree import measured_pick
from workbench.engine.drafts.base import boxes
from workbench.engine.config import SpecConfig
from workbench.engine.drafts.registry import parse_draft
from workbench.models.heads import default_draft_dir
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
    n = len(trace["accept"]["accepted"])
    if len(trace["tree"]["nodes"]) == 1 and not trace["draft"]["candidates"]:
        return f"Nothing accepted at step {trace['step']}: {no_draft_note(trace)}."
    cut = cut_words(trace)
    if cut:
        return f"{cut}; its walk stopped because {_why(trace)}."
    head = f"Nothing accepted at step {trace['step']}" if not n else \
        f"Step {trace['step']} accepted {n} draft{'s' * (n != 1)}, then stopped"
    return f"{head}: {_why(trace)}."


END_WORDS = {"length": "max_new_tokens was reached", "stop": "a stop token ended the output"}


def cut_words(trace: dict | None) -> str:
    """What a speculative step the end of the output cut kept, as the trace's ``emitted`` says
    (its ``accept_length`` below the walk's n + 1 tokens): "Step 12 accepted 5 drafts, but only
    the first 1 was kept: max_new_tokens was reached (`␣x`), so no bonus"; "" for a step that
    kept all its walk gave (or any other step)."""
    if trace is None or trace["kind"] != "spec":
        return ""
    path, kept = trace["accept"]["path"], trace["accept_length"]  # path: root + accepted drafts
    if kept >= len(path):
        return ""
    n, nodes = len(path) - 1, trace["tree"]["nodes"]
    texts = " ".join(f"`{show(nodes[i]['text'])}`" for i in path[1:kept + 1])
    end = END_WORDS.get(trace.get("finished"), "the output ended")
    return (f"Step {trace['step']} accepted {n} draft{'s' * (n != 1)}, but only the first {kept} "
            f"{'was' if kept == 1 else 'were'} kept: {end} ({texts}), so no bonus")


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


def measured_line(tree: tuple[int, int, int], pick) -> str:
    """One line for the page's first load: what the eagle2 ``tree`` (num_draft_tokens, num_steps,
    topk) on screen measured in the head record of this kind of CPU (``pick``, a
    ``default_tree.Pick``), and the default tree there, naming the record and its date ("8/5/4
    measured 1.10x plain decoding on a ... (RECORD, DATE); the default without tree flags there:
    4/3/2, 1.19x", and whether a larger tree is level with it). "" without a pick, or with one of
    another kind of CPU (``Pick.here`` false)."""
    if pick is None or not pick.here:  # another kind of CPU's record does not apply here
        return ""
    shown, best = "/".join(map(str, tree)), pick.setting.split(":", 1)[1]
    where = f"a {pick.cpu} ({pick.record}, {pick.date})"
    speed = pick.speedups.get(f"eagle2:{shown}")
    said = f"{shown} measured {speed:.2f}x plain decoding on {where}" if speed is not None else \
        f"{shown} was not measured on {where}"
    top = max(pick.speedups, key=pick.speedups.get).split(":", 1)[1]
    if shown == best:
        fastest = "the smallest of the trees measured fastest there (the default without tree flags)"
    else:
        fastest = f"the default without tree flags there: {best}, {pick.speedup:.2f}x"
    if top not in (shown, best):
        fastest += f"; {top}, {pick.speedups['eagle2:' + top]:.2f}x, is level with it {pick.noise}"
    return f"{said}; {fastest}"


def page_measured_line(wb, method: str, tree: tuple[int, int, int]) -> str:
    """``measured_line`` for the page's first setting where the head records apply: the shipped
    head (the records' draft), on a CPU, an eagle2 tree; the record of this CPU's kind and the
    loaded dtype (``default_tree.measured_pick``). "" elsewhere."""
    shipped = wb.draft_source.startswith(str(default_draft_dir()))
    if not shipped or method != "eagle2" or wb.target.lm_head.weight.device.type != "cpu":
        return ""
    return measured_line(tree, measured_pick(cpu_kind(cpu_flags()), wb.dtype_name))


# The knob each stop cause points at (its ``catch``: the smallest change that would have caught
# the target's token on this step), and the causes a knob cannot fix: the draft itself disagreed.
KNOB_OF = {"budget": "num_draft_tokens", "width": "topk", "frontier": "topk", "depth": "num_steps"}
DRAFT_CAUSES = ("draft", "vocabulary", "continuation", "no match")


@dataclass(frozen=True)
class Suggestion:
    """A change to try after a step that accepted nothing, from why its walk stopped: the
    settings it changes (never the prompt), the button's words and the reason."""

    changes: dict  # Settings field -> value (a knob, or the draft source and its boxes)
    label: str  # what the button says after "Try: "
    reason: str  # the sentence for the status line

    def button(self) -> str:
        return f"Try: {self.label}"

    def settings(self, current: dict) -> dict:
        """The page's values after taking the suggestion: ``current`` (field -> value) with the
        changed fields replaced; the prompt is never among them."""
        return dict(current, **self.changes)


def suggest(trace: dict | None, spec, bench, runnable) -> Suggestion | None:
    """What to try after the speculative step ``trace`` (run with ``spec``), by its stop cause:
    budget, width, frontier or depth: the knob change that would have caught the target's token
    (the step's ``catch``, where ``spec``'s method reads that knob); a draft that disagreed (or
    could not propose the token): another draft source, only one that ``bench`` (the stored
    records, ``draft_bench.DraftBench``) measured faster than ``spec``'s at the measured tree
    nearest it (mean speedup over its tasks; plain decoding, 1x, for a draft it did not measure),
    and that ``runnable(source)`` says the page can run; the fastest first. None for a coin, a
    static shape, or nothing better measured."""
    if trace is None or trace.get("kind") != "spec" or "stop" not in trace:
        return None
    cause = trace["stop"]["cause"]
    if cause in KNOB_OF:
        return _knob(cause, trace["stop"]["catch"], spec)
    if cause in DRAFT_CAUSES and bench is not None:
        return _faster_draft(cause, spec, bench, runnable)
    return None


def _knob(cause: str, catch: dict, spec) -> Suggestion | None:
    """The catch of ``cause`` as a change of ``spec``'s knob, where its method reads that knob
    and the changed tree is valid."""
    knob = KNOB_OF[cause]
    reads = {"eagle2": ("num_steps", "topk", "num_draft_tokens"), "linear": ("num_steps",)}.get(spec.method, ())
    if knob not in catch or knob not in reads:
        return None
    value = catch[knob]
    knobs = {k: getattr(spec, k) for k in reads} | {knob: value}
    try:
        SpecConfig.from_knobs(spec.method, **knobs)
    except ValueError:
        return None
    why = {"budget": "the rerank dropped the target's token", "depth": "the walk reached the tree's last level",
           "width": "the draft ranked the target's token just below its topk",
           "frontier": "the node below which the target's token lay was left out of its level's frontier"}[cause]
    return Suggestion(changes={knob: value}, label=f"{knob} {value}",
                      reason=f"Here {why}: {knob} = {value} would have caught it on this step (the steps after "
                             "it grow other trees, so try it and see).")


def _faster_draft(cause: str, spec, bench, runnable) -> Suggestion | None:
    """The draft source the records measured fastest at the tree nearest ``spec``'s, when faster
    than ``spec``'s draft there."""
    tree = bench.nearest_tree(spec)
    speed = {r.draft: sum(x for _, x in r.per_task.values()) / len(r.per_task) for r in bench.routes if r.tree == tree}
    own = speed.get(spec.draft.name, 1.0)  # a draft not measured there: against plain decoding
    faster = sorted(((x, name) for name, x in speed.items() if x > own and name != spec.draft.name
                     and runnable(parse_draft(name))), reverse=True)
    if not faster:
        return None
    x, name = faster[0]
    draft = parse_draft(name)
    changes = {"draft": draft.kind, **{box.name: getattr(draft, box.field) for box in boxes(draft)}}
    if draft.model_free and spec.method == "static":
        changes["method"] = "eagle2"  # the n-gram lookup has no distribution to rank a fixed shape by
    was = f"the {spec.draft.label()}'s {own:.2f}x" if spec.draft.name in speed else "plain decoding (1x)"
    record = bench.source[:1].upper() + bench.source[1:]
    return Suggestion(changes=changes, label=f"draft {name}",
                      reason=f"Here the draft could not give the target's token ({cause}). {record} measured "
                             f"the {draft.label()} at {'/'.join(map(str, tree))} at {x:.2f}x plain decoding (mean "
                             f"over its tasks), faster than {was}.")
