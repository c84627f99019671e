"""Step traces: a ``StepRecord`` (``record.py``) as a plain JSON-ready dict, for the app and notebooks.

A pure function of the record: the engine decided everything in it. Every view of the app and
every notebook figure renders these and nothing else; what a step was worth (the expected
accept length over the coins) is derived from them on request (``analysis/expectation.py``). Keys:

``kind``            "prefill" | "decode" (vanilla) | "spec"
``step``, ``request``, ``L``       step number, request id, committed length before the step
``draft_source``    where the drafts came from: "head", "ngram:MIN-MAX", "exit:N" ("none": vanilla)
``policy``          what the step ran and why: name (the speculation policy), choice (the setting:
                    "eagle2:8/5/4", "off"; "prefill" on a prefill step), reason ("batch 3 in 3-4")
``batch``           ids of every request the step ran: a prefill step's are the requests it admitted
``draft.levels``    per draft forward after the first: the frontier's depth (``level``), its flat
                    candidate indices, their scratch slots and their position (the head: L +
                    level - 1; an early exit and a draft model: L + level); none for the n-gram draft
``draft.candidates`` every candidate: index, token, text, prob, score, parent (flat, -1 root),
                    level (its depth: the draft forward that proposed it)
``draft.kept`` / ``draft.dropped``  flat indices that survived the rerank / were dropped (parent missing)
``tree``            nodes (node, token, text, score, prob, parent, depth, position, candidate,
                    rank_path: the draft rank of each node from the root down, e.g. [0, 2],
                    target_prob: the target's probability of the node's token at its parent, in
                    the distribution ``verify.top`` shows; None at the root), shape ("static" |
                    "dynamic"), mask rows, retrieve_next_token / retrieve_next_sibling (node i is
                    row i of its verify block)
``verify.top``      per node i: the target's top next tokens, i.e. the token **after** node i
``accept``          moves (node, child, via, read: whose pointer was read, match, [target_prob,
                    draft_prob, coin]), path, accepted tokens, stop ("leaf" | "no_match"), bonus,
                    bonus_from, residual_top, rule; a lossy walk also ``lossy``: its thresholds
                    (each move then also has ``accept_prob``, the relaxed probability its coin met);
                    under the block rule each move has ``weight`` (w_i) and ``accept_prob`` (h_i),
                    and ``match`` means inside the kept prefix
``stop``            why the walk stopped (``stops.py``): cause (a key of ``stops.CAUSES``), node,
                    candidate, depth, token and text (the target's token there), rank and prob (in
                    the draft's distribution at the stop node; None where unknown), catch (the
                    smallest knob change that would have caught it: {"num_draft_tokens": 9}, or {})
``chain``           a chain drawn from q (leviathan, block) only: per draft x_i (every one, reached
                    by the walk or not), target_prob p_i(x_i), draft_prob q_i(x_i), and block
                    verification's prefix weight w_i and acceptance h_i (``accept.block_weights``):
                    what each rule's expected accepted length is computed from
                    (``analysis/chain_rules.py``)
``spec_decode``     the step in vLLM's counts (``workbench/metrics.py``): num_draft_tokens (the tree's
                    nodes but the root: every verified draft, siblings too), num_accepted_tokens
``kv``              target slots written, kept (the first len(path) written), freed, and moved:
                    [from, to] per accepted node whose K/V rows were copied to its kept slot; a
                    spec step's draft slots (extend: kept; tree scratch: freed after drafting);
                    allocator counts after the step
``emitted``         the tokens appended to the output (accepted drafts + bonus, cut after a stop
                    token or at max_new_tokens)
``accept_length``   ``len(emitted)``: what τ averages over the verify steps. The walk's own count is
                    ``len(accept.path)`` (root + accepted drafts, the bonus after them); the two
                    differ only at a step the end of the output cut
``finished``, ``timing_ms``
"""

from __future__ import annotations

import torch

from workbench.engine.accept import block_weights
from workbench.engine.record import StepRecord
from workbench.engine.sampling import target_probs
from workbench.engine.tree import Candidates

TOP = 5


def step_trace(rec: StepRecord, token_text=str) -> dict:
    """The JSON trace of one record; ``token_text(id)`` gives a token's text. Reads nothing but
    its arguments."""
    d = {"kind": rec.kind, "step": rec.step, "request": rec.request, "method": rec.method, "draft_source": rec.draft,
         "L": rec.kv.committed_before, "batch": list(rec.batch)}
    if rec.policy is not None:
        d["policy"] = {"name": rec.policy.name, "choice": rec.policy.choice, "reason": rec.policy.reason}
    if rec.kind == "prefill":
        d["prompt_len"] = rec.prompt_len
    probs = _shown_probs(rec)
    if rec.kind == "spec":
        d["draft"] = _draft(rec, token_text)
        d["tree"] = _tree(rec, token_text, probs)
    d["verify"] = {"top": [_top(row, token_text) for row in probs]}
    if rec.kind == "spec":
        d["accept"] = _accept(rec, token_text)
        if rec.stop is not None:
            d["stop"] = _stop(rec, token_text)
        d["spec_decode"] = {"num_draft_tokens": rec.tree.num_nodes - 1, "num_accepted_tokens": rec.result.num_accepted}
    if rec.draft_probs is not None:
        d["chain"] = _chain(rec, probs)
    d["kv"] = _kv(rec)
    d["emitted"] = rec.emitted  # accepted drafts + bonus, cut after a stop token or at max_new_tokens
    d["accept_length"] = len(rec.emitted)  # τ's count; the walk's is len(accept.path)
    d["finished"] = rec.finish_reason
    d["timing_ms"] = {k: round(v, 3) for k, v in rec.timing_ms.items()}
    return d


def _shown_probs(rec: StepRecord) -> torch.Tensor:
    """[N, V], the distribution a trace shows per verify row. Greedy: softmax at temperature 1
    (what the argmax was taken over); sampling: the target distribution p actually used
    (temperature, top-k, top-p)."""
    if rec.sampling.greedy:
        return torch.softmax(rec.logits.float(), dim=-1)
    return target_probs(rec.logits, rec.sampling)


def _top(probs_row: torch.Tensor, token_text, k: int = TOP) -> list[dict]:
    vals, ids = torch.topk(probs_row, k)
    return [{"token": int(i), "text": token_text(int(i)), "prob": round(float(v), 5)} for v, i in zip(vals, ids)]


def _draft(rec: StepRecord, text) -> dict:
    c, tree = rec.candidates, rec.tree
    return {
        "levels": [{"level": lv.level, "frontier": lv.frontier, "slots": lv.slots, "position": lv.position}
                   for lv in rec.levels],
        "candidates": [
            {"index": i, "token": c.tokens[i], "text": text(c.tokens[i]), "prob": round(c.probs[i], 5),
             "score": round(c.scores[i], 6), "parent": c.parents[i], "level": c.depths[i]}
            for i in range(len(c.tokens))
        ],
        "kept": list(tree.candidate_index[1:]),
        "dropped": list(tree.dropped),
    }


def rank_paths(c: Candidates) -> list[list[int]]:
    """Per candidate: its rank in its parent's draft top-k, prefixed by its parent's path (the
    address EAGLE-1's static shapes use). Parents precede children in the flat order."""
    paths: list[list[int]] = []
    for parent, rank in zip(c.parents, c.ranks):
        paths.append(([] if parent == -1 else paths[parent]) + [rank])
    return paths


def _tree(rec: StepRecord, text, probs: torch.Tensor) -> dict:
    """``probs``: the shown distribution per verify row; row ``parent`` gives a node's target_prob."""
    tree, paths = rec.tree, rank_paths(rec.candidates)
    target_prob = [None] + [round(p, 6) for p in probs[tree.parents[1:], tree.tokens[1:]].tolist()]
    return {
        "nodes": [
            {"node": i, "token": tree.tokens[i], "text": text(tree.tokens[i]), "score": round(tree.scores[i], 6),
             "prob": round(tree.probs[i], 5), "parent": tree.parents[i], "depth": tree.depths[i],
             "position": tree.positions[i], "candidate": tree.candidate_index[i],
             "rank_path": [] if i == 0 else paths[tree.candidate_index[i]],
             "target_prob": target_prob[i]}
            for i in range(tree.num_nodes)
        ],
        "shape": "static" if rec.method == "static" else "dynamic",
        "mask": tree.mask.int().tolist(),
        "retrieve_next_token": tree.retrieve_next_token,
        "retrieve_next_sibling": tree.retrieve_next_sibling,
    }


def _accept(rec: StepRecord, text) -> dict:
    res, tree = rec.result, rec.tree
    out = {
        "moves": [{k: v for k, v in vars(m).items() if v is not None} for m in res.moves],
        "path": res.path,
        "accepted": [tree.tokens[i] for i in res.path[1:]],
        "stop": res.stop,
        "bonus": {"token": res.bonus, "text": text(res.bonus), "after_node": res.path[-1]},
        "bonus_from": res.bonus_from,
        "residual_top": [{"token": t, "text": text(t), "prob": round(p, 5)} for t, p in res.residual_top],
        "rule": rec.rule,
    }
    if res.thresholds is not None:
        out["lossy"] = {"accept_threshold_single": res.thresholds[0], "accept_threshold_acc": res.thresholds[1]}
    return out


def _stop(rec: StepRecord, text) -> dict:
    s = rec.stop
    return {"cause": s.cause, "node": s.node, "candidate": s.candidate, "depth": s.depth, "token": s.token,
            "text": text(s.token), "rank": s.rank,
            "prob": None if s.prob is None else float(f"{s.prob:.4g}"),  # 4 significant digits: a tiny one stays readable
            "catch": dict(s.catch)}


def _chain(rec: StepRecord, probs: torch.Tensor) -> list[dict]:
    """Per draft of a chain drawn from q: p and q of its token, and block verification's w and h
    (``probs``: the target distribution used, [n+1, V])."""
    tokens, q = rec.tree.tokens, rec.draft_probs.to(probs.dtype)
    weights, accept = block_weights(tokens, probs, q)
    return [{"target_prob": round(float(probs[i - 1, tokens[i]]), 6),
             "draft_prob": round(float(q[i - 1, tokens[i]]), 6),
             "weight": round(weights[i - 1], 6), "block_accept": round(accept[i - 1], 6)}
            for i in range(1, len(tokens))]


def _kv(rec: StepRecord) -> dict:
    kv = rec.kv
    out = {"target": {"written": kv.written, "kept": kv.kept, "freed": kv.freed, "moved": [list(m) for m in kv.moved]},
           "allocated": kv.allocated, "free": kv.free, "total": kv.total}
    if rec.kind == "spec":
        out["draft"] = {"extend_written": kv.draft_extend, "scratch": kv.draft_scratch}
    return out
