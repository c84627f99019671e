"""Step traces: plain JSON-ready dicts of everything one step did, for the app and notebooks.

Every view of the app and every notebook figure renders these and nothing else. Keys:

``kind``            "prefill" | "decode" (vanilla) | "spec"
``step``, ``request``, ``L``       step number, request id, committed length before the step
``draft.levels``    per draft level: frontier (flat candidate indices) expanded, their scratch slots
``draft.candidates`` every candidate: index, token, text, prob, score, parent (flat, -1 root), level
``draft.kept`` / ``draft.dropped``  flat indices that survived the rerank / were dropped (parent missing)
``tree``            nodes (node, token, text, score, prob, parent, depth, position, candidate,
                    rank_path: the draft rank of each node from the root down, e.g. [0, 2]), mask
                    rows, retrieve_index / retrieve_next_token / retrieve_next_sibling
``verify.top``      per node i: the target's top next tokens, i.e. the token **after** node i
``accept``          moves (node, child, via, match, [target_prob, draft_prob, coin]), path, accepted
                    tokens, bonus, bonus_from, residual_top
``kv``              target/draft slots written, kept, freed; allocator counts after the step
``emitted``, ``accept_length``, ``timing_ms``
"""

from __future__ import annotations

import torch

from workbench.engine.sampling import target_probs

TOP = 5


def _top(engine, logits_row: torch.Tensor, k: int = TOP) -> list[dict]:
    """Greedy: softmax at temperature 1 (what the argmax was taken over); sampling: the target
    distribution p actually used (temperature, top-k, top-p)."""
    if engine.sampling.greedy:
        probs = torch.softmax(logits_row.float(), dim=-1)
    else:
        probs = target_probs(logits_row[None], engine.sampling)[0]
    vals, ids = torch.topk(probs, k)
    return [{"token": int(i), "text": engine.token_text(int(i)), "prob": round(float(v), 5)} for v, i in zip(vals, ids)]


def _alloc_counts(engine) -> dict:
    a = engine.table.allocator
    return {"allocated": a.num_used, "free": a.num_free, "total": a.num_slots}


def _base(engine, r, kind: str, L: int) -> dict:
    return {"kind": kind, "step": engine.steps, "request": r.rid, "method": engine.spec.method, "L": L}


def prefill_trace(engine, r, logits_row, ms: float) -> dict:
    slots = engine.table.slots(r.rid) if r.rid in engine.table.tables else []
    d = _base(engine, r, "prefill", 0)
    d.update(prompt_len=len(r.prompt_ids), emitted=r.output_ids[:1], accept_length=1,
             verify={"top": [_top(engine, logits_row)]},
             kv={"target": {"written": list(slots), "kept": list(slots), "freed": []}, **_alloc_counts(engine)},
             timing_ms={"prefill_ms": round(ms, 3)})
    return d


def vanilla_trace(engine, r, logits_row, slots: list[int], ms: float) -> dict:
    d = _base(engine, r, "decode", len(r.prompt_ids) + len(r.output_ids) - 1)
    d.update(emitted=r.output_ids[-1:], accept_length=1, verify={"top": [_top(engine, logits_row)]},
             kv={"target": {"written": slots, "kept": slots, "freed": []}, **_alloc_counts(engine)},
             timing_ms={"decode_ms": round(ms, 3)})
    return d


def rank_paths(c) -> list[list[int]]:
    """Per candidate: its rank in its parent's draft top-k, prefixed by its parent's path (the
    address EAGLE-1's static shapes use). Parents precede children in the flat order."""
    paths: list[list[int]] = []
    for parent, rank in zip(c.parents, c.ranks):
        paths.append(([] if parent == -1 else paths[parent]) + [rank])
    return paths


def spec_trace(engine, request, tree, result, slots, kept, freed, emitted, L, logits, level_info, candidates,
               extend_slots, scratch, timing) -> dict:
    text = engine.token_text
    c = candidates
    d = _base(engine, request, "spec", L)
    d["draft"] = {
        "levels": level_info,
        "candidates": [
            {"index": i, "token": c.tokens[i], "text": text(c.tokens[i]), "prob": round(c.probs[i], 5),
             "score": round(c.scores[i], 6), "parent": c.parents[i], "level": c.levels[i]}
            for i in range(len(c.tokens))
        ],
        "kept": [i for i in tree.candidate_index[1:]],
        "dropped": list(tree.dropped),
    }
    paths = rank_paths(c)
    d["tree"] = {
        "nodes": [
            {"node": i, "token": tree.tokens[i], "text": text(tree.tokens[i]), "score": round(tree.scores[i], 6),
             "prob": round(tree.probs[i], 5), "parent": tree.parents[i], "depth": tree.depths[i],
             "position": tree.positions[i], "candidate": tree.candidate_index[i],
             "rank_path": [] if i == 0 else paths[tree.candidate_index[i]]}
            for i in range(tree.num_nodes)
        ],
        "shape": "static" if engine.spec.method == "static" else "dynamic",
        "mask": tree.mask.int().tolist(),
        "retrieve_index": list(range(tree.num_nodes)),
        "retrieve_next_token": tree.retrieve_next_token,
        "retrieve_next_sibling": tree.retrieve_next_sibling,
    }
    d["verify"] = {"top": [_top(engine, logits[i]) for i in range(tree.num_nodes)]}
    d["accept"] = {
        "moves": [{k: v for k, v in vars(m).items() if v is not None} for m in result.moves],
        "path": result.path,
        "accepted": [tree.tokens[i] for i in result.path[1:]],
        "bonus": {"token": result.bonus, "text": text(result.bonus), "after_node": result.path[-1]},
        "bonus_from": result.bonus_from,
        "residual_top": [{"token": t, "text": text(t), "prob": round(p, 5)} for t, p in result.residual_top],
        "rule": "greedy" if engine.sampling.greedy else
                ("leviathan" if engine.spec.chain_rule == "leviathan" else "target-only"),
    }
    d["kv"] = {
        "target": {"committed_before": L, "written": slots, "kept": kept, "freed": freed, "moved": []},
        "draft": {"extend_written": extend_slots, "scratch": scratch, "scratch_freed": scratch},
        "rollback": "slot-table remap (page size 1): kept slots appended in path order, no row copied",
        **_alloc_counts(engine),
    }
    d["emitted"] = emitted  # accepted drafts + bonus, cut after a stop token or at max_new_tokens
    d["accept_length"] = len(result.path)
    d["finished"] = request.finish_reason
    d["timing_ms"] = {k: round(v, 3) for k, v in timing.items()}
    return d
