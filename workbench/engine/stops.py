"""Why a speculative step stopped: one cause per step, from what the step recorded.

The accept walk says *where* it stopped (``accept.AcceptResult.stop``: a leaf, or no child
matched); this module says *why*, in one word of ``CAUSES``, from the step's candidates, tree
and walk (plain Python over the record's lists). The **stop node** is the last node the walk
accepted (the root when it accepted nothing); the **target's token** is the bonus there: the
argmax under greedy decoding, the token drawn under sampling. The causes are tried in this
order, so exactly one applies to every step (docs/design.md §3, "Why a step stopped"):

1. ``coin``: sampling only: a child of the stop node was tried and the acceptance rule's coin
   rejected it (``record.rule`` names the rule).
2. ``budget``: the draft proposed the target's token below the stop node, but the rerank kept
   only ``num_draft_tokens - 1`` candidates and dropped it.
3. ``vocabulary``: the draft can never propose the token (a head's hot draft tokens leave it out).
4. ``depth``: the stop node is at the tree's last level (``num_steps``): nothing is drafted below.
5. the stop node was proposed but the draft ran nothing below it: ``frontier`` in a dynamic tree
   (it was not among the ``topk`` best of its level), ``shape`` in a static tree (the fixed shape
   has no node below it), ``no match`` for the n-gram lookup (no earlier occurrence continues).
6. the draft ran at the stop node and did not propose the token: ``width`` when the token is
   among the draft's ``REACH`` most likely there (a larger ``topk`` would have proposed it),
   ``draft`` beyond (the draft disagreed); ``continuation`` for the n-gram lookup (the earlier
   text went on differently). The draft source decides 5 and 6 (``DraftSource.unexpanded_cause``,
   ``DraftSource.miss_cause``).

With each cause: the token's rank and probability in the draft's distribution at the stop node
(where the draft ran there and kept its ``REACH`` most likely tokens, ``Candidates.top``), and
the smallest one-knob change that would have caught it, where the step alone tells
(``StopCause.catch``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.engine.accept import AcceptResult
from workbench.engine.config import MAX_TOPK
from workbench.engine.record import StopCause
from workbench.engine.tree import Candidates, DraftTree, budget_keeping, score_order

REACH = MAX_TOPK  # a token ranked below this at a node is within a topk the knobs allow: "width"

CAUSES = {
    "coin": "a child was tried and the acceptance rule's coin rejected it",
    "budget": "the draft proposed the target's token, but the rerank dropped it (num_draft_tokens)",
    "vocabulary": "the target's token is outside what the draft can propose (its hot draft tokens)",
    "depth": "the walk reached the tree's last level (num_steps): nothing was drafted below",
    "frontier": "the node was not among the topk best of its level, so nothing was drafted below it",
    "shape": "the static tree's fixed shape has no node below this one",
    "no match": "the n-gram lookup found no earlier occurrence continuing below this node",
    "width": f"the draft ranked the target's token just outside its topk (within its top {REACH})",
    "draft": f"the draft did not rank the target's token among its top {REACH}: it disagreed",
    "continuation": "the n-gram lookup proposed other continuations than the target's token",
}


@dataclass(frozen=True)
class StopFacts:
    """What decides the cause, read off one step (``facts``)."""

    sampled: bool  # the acceptance rule draws coins (every rule but greedy)
    tried: bool  # the walk tried a child of the stop node (it stopped at "no_match")
    proposed: bool  # the draft proposed children below the stop node
    dropped_hit: int | None  # flat index of the proposed child with the target's token (dropped at rerank)
    drafts_token: bool  # the draft can propose the token at all
    last_level: bool  # the stop node is at depth num_steps
    static: bool  # a static tree (no frontier, no rerank)


def classify(f: StopFacts, unexpanded_cause: str, miss_cause: Callable[[], str]) -> str:
    """The one cause of ``CAUSES`` that ``f`` gives, in the module docstring's order."""
    if f.sampled and f.tried:
        return "coin"
    if f.dropped_hit is not None:
        return "budget"
    if not f.drafts_token:
        return "vocabulary"
    if f.last_level:
        return "depth"
    if not f.proposed:
        return "shape" if f.static else unexpanded_cause
    return miss_cause()


def facts(*, cands: Candidates, tree: DraftTree, result: AcceptResult, rule: str, method: str, num_steps: int,
          drafts_token: bool) -> StopFacts:
    """The facts of one step (``drafts_token``: whether the draft can propose the bonus at all)."""
    node = result.path[-1]
    below = children_of(cands, tree.candidate_index[node])
    kept = set(tree.candidate_index)
    hit = next((i for i in below if cands.tokens[i] == result.bonus and i not in kept), None)
    return StopFacts(sampled=rule != "greedy", tried=tree.retrieve_next_token[node] != -1, proposed=bool(below),
                     dropped_hit=hit, drafts_token=drafts_token, last_level=tree.depths[node] >= num_steps,
                     static=method == "static")


def stop_cause(*, cands: Candidates, tree: DraftTree, result: AcceptResult, rule: str, method: str, spec,
               source, proposes: Callable[[int], bool]) -> StopCause:
    """Why this step's walk stopped. ``spec``: the setting the step ran (``num_steps``, ``topk``);
    ``source``: its ``DraftSource`` (the n-gram lookup's own words); ``proposes(token)``: whether
    the drafter can propose a token at all (``Drafter.proposes``)."""
    node = result.path[-1]
    cand, token = tree.candidate_index[node], result.bonus
    f = facts(cands=cands, tree=tree, result=result, rule=rule, method=method, num_steps=spec.num_steps,
              drafts_token=proposes(token))
    rank, prob = draft_rank(cands, cand, token)
    cause = classify(f, source.unexpanded_cause, lambda: source.miss_cause(rank, REACH))
    return StopCause(cause=cause, node=node, candidate=cand, depth=tree.depths[node], token=token, rank=rank,
                     prob=prob, catch=catch(cause, cands=cands, candidate=cand, spec=spec, rank=rank,
                                            hit=f.dropped_hit))


def children_of(cands: Candidates, parent: int) -> list[int]:
    """Flat indices of the candidates proposed below ``parent`` (-1: the root), in rank order."""
    return [i for i, p in enumerate(cands.parents) if p == parent]


def draft_rank(cands: Candidates, parent: int, token: int) -> tuple[int | None, float | None]:
    """(rank, probability) of ``token`` in the draft's distribution at ``parent``: from the top the
    record kept there (tracing), else from the children proposed there; (None, None) when neither
    holds it."""
    top = cands.top.get(parent)
    if top is not None:
        return next(((r, p) for r, (t, p) in enumerate(top) if t == token), (None, None))
    return next(((cands.ranks[i] if cands.ranks[i] >= 0 else None, cands.probs[i])  # -1: rank unknown
                 for i in children_of(cands, parent) if cands.tokens[i] == token), (None, None))


def catch(cause: str, *, cands: Candidates, candidate: int, spec, rank: int | None, hit: int | None) -> dict[str, int]:
    """The smallest change of one knob that would have drafted and kept the target's token, as
    far as this step tells (the rest of the tree would change with it): the budget that keeps the
    dropped candidate, one more level, a topk reaching its rank, or one keeping the stop node in
    its level's frontier; {} where no knob would (a coin, the vocabulary, a disagreeing draft)."""
    if cause == "budget":
        return {"num_draft_tokens": budget_keeping(cands.scores, hit)}
    if cause == "depth" and spec.method != "static":
        return {"num_steps": spec.num_steps + 1}
    if cause == "width" and spec.method != "static":
        return {"topk": rank + 1}
    if cause == "frontier":
        level = [i for i, d in enumerate(cands.depths) if d == cands.depths[candidate]]
        order = [level[j] for j in score_order([cands.scores[i] for i in level]).tolist()]
        return {"topk": order.index(candidate) + 1}
    return {}
