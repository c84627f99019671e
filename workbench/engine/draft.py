"""The draft phase: extend the draft's KV, then grow the tree level by level.

**Extend.** The pairs ``(f_t, x_{t+1})`` whose draft KV is missing (after prefill: the whole
prompt; after a step: root + accepted drafts, paired with the token after each) run through the
head at the target's own slot ids, in the draft's own KV buffer, and are kept. The output at
the last pair gives level 1: the ``topk`` most likely children of the root.

**Grow** (``num_steps - 1`` more draft forwards). The ``topk`` frontier nodes run through the
head with the *parent's draft output* as their feature, at position ``L + depth - 1``,
attending the committed prefix plus their exact ancestors in the tree. Each proposes ``topk``
children scored ``parent score x child prob``; the global ``topk`` of those ``topk^2``
candidates is the next frontier. Tree-level KV is scratch: its slots are freed after the phase.

Words: a node's **depth** is its distance from the root (the root is depth 0, its children
depth 1); draft forward k (k = 1..num_steps) proposes the candidates at depth k, and a
**level** (``DraftLevel``, the trace's ``draft.levels``) is one forward after the first, named
by the depth of the frontier it runs. Why positions run one behind the target's, and what must
hold for the extend: docs/design.md §4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench.attention.batch import ForwardBatch, extend_batch
from workbench.attention.meta import build_meta
from workbench.engine.record import DraftLevel
from workbench.engine.sampling import SamplingParams, target_probs
from workbench.engine.tree import Candidates
from workbench.kv import SlotTable
from workbench.kv.pool import KVPool
from workbench.models.draft import DraftHead


@dataclass
class DraftPhase:
    """What one draft phase produced, per request (filled here, read by the engine and traces)."""

    candidates: list[Candidates]
    levels: list[list[DraftLevel]]  # per request: the forwards after the first, shallowest first
    scratch_slots: list[list[int]]  # draft KV of tree levels, freed at the end of the phase
    chain_q: list[torch.Tensor] | None = None  # leviathan: per request [num_steps, V] draft distributions


def scratch_slots_per_step(num_steps: int, topk: int) -> int:
    """Draft-KV slots ``grow_tree`` takes from the allocator per request and step (the engine
    sizes the pool with this; ``grow_tree`` checks it allocates exactly that)."""
    return (num_steps - 1) * topk


DraftForward = Callable[[torch.Tensor, ForwardBatch], torch.Tensor]  # (features, batch) -> hidden


def head_forward(head: DraftHead, kv: KVPool, forward: DraftForward | None = None) -> DraftForward:
    """How a draft forward runs: ``forward`` when given (the engine's CUDA-graph runner,
    ``graphs.GraphedDraft``, writing to the same ``kv``), else the head itself, eagerly."""
    return forward if forward is not None else (lambda features, batch: head(features, batch, kv))


def draft_extend(head: DraftHead, kv: KVPool, table: SlotTable, rids: list[int],
                 tokens: list[list[int]], features: list[torch.Tensor],
                 forward: DraftForward | None = None) -> tuple[torch.Tensor, list[list[int]]]:
    """Run the pending pairs; returns the draft hidden state at each request's last pair [B, H]
    and the slots written. The pairs sit at the last ``len(tokens[b])`` committed positions:
    the engine checks that before calling (``Request.draft_length``). ``forward``: see
    ``head_forward``."""
    prefix, new, starts = [], [], []
    for rid, toks, feats in zip(rids, tokens, features):
        if len(toks) != feats.shape[0] or not toks:
            raise AssertionError(f"request {rid}: {len(toks)} pending tokens but {feats.shape[0]} features")
        slots = table.slots(rid)
        cut = len(slots) - len(toks)
        prefix.append(slots[:cut])
        new.append(slots[cut:])
        starts.append(cut)
    device = features[0].device
    batch = extend_batch(tokens, prefix, new, starts, device)
    hidden = head_forward(head, kv, forward)(torch.cat(features), batch)  # [T, H]
    last = torch.tensor([sum(len(t) for t in tokens[: b + 1]) - 1 for b in range(len(tokens))], device=device)
    return hidden[last], new


def _pick(log_probs: torch.Tensor, cols: torch.Tensor | None, k: int, sampled: SamplingParams | None,
          generator: torch.Generator | None):
    """Children of each row: top-k of the draft distribution, or (leviathan chain) one draw from
    q = the draft distribution under the sampling params. Returns tokens [R, k], probs [R, k], q."""
    if sampled is None:
        lp, idx = log_probs.topk(k, dim=-1)  # sorted: descending probability
        probs, q = lp.exp(), None
    else:
        q = target_probs(log_probs, sampled)  # [R, V']
        idx = torch.multinomial(q, 1, generator=generator)  # [R, 1]
        probs = q.gather(-1, idx)
    tokens = idx if cols is None else cols[idx]
    return tokens, probs, q


def grow_tree(head: DraftHead, kv: KVPool, table: SlotTable, rids: list[int], h_last: torch.Tensor,
              num_steps: int, topk: int, sampled_chain: SamplingParams | None = None,
              generator: torch.Generator | None = None, forward: DraftForward | None = None) -> DraftPhase:
    """Levels 1..num_steps of every request's tree, batched across requests. ``forward``: see
    ``head_forward``."""
    bsz, device = len(rids), h_last.device
    run = head_forward(head, kv, forward)
    cands = [Candidates() for _ in rids]
    levels: list[list[DraftLevel]] = [[] for _ in rids]
    logp, cols = head.log_probs(h_last)  # [B, V']
    tokens, probs, q = _pick(logp, cols, topk, sampled_chain, generator)
    chain_q = [[_full(q[b], cols, head)] for b in range(bsz)] if q is not None else None
    frontier = []
    for b in range(bsz):
        for rank, (t, p) in enumerate(zip(tokens[b].tolist(), probs[b].tolist())):
            cands[b].add(t, p, p, -1, 1, rank)
        frontier.append(list(range(topk)))  # level 1 is exactly topk candidates, best first
    parent_hidden = h_last.repeat_interleave(topk, dim=0)  # [B*topk, H]: the root's children
    processed: list[list[int]] = [[] for _ in rids]  # flat indices with scratch KV, in slot order
    scratch: list[list[int]] = [[] for _ in rids]
    for depth in range(2, num_steps + 1):  # this forward runs the frontier at depth - 1, proposes depth
        new_slots = [table.allocator.alloc(topk) for _ in rids]
        batch, positions = _tree_level_batch(cands, frontier, processed, scratch, new_slots, table, rids, depth - 1,
                                             device)
        for b in range(bsz):
            levels[b].append(DraftLevel(depth - 1, list(frontier[b]), list(new_slots[b]), positions[b]))
            processed[b].extend(frontier[b])
            scratch[b].extend(new_slots[b])
        hidden = run(parent_hidden, batch)  # [B*topk, H]
        logp, cols = head.log_probs(hidden)  # [B*topk, V']
        tokens, probs, q = _pick(logp, cols, topk, sampled_chain, generator)
        tokens, probs = tokens.view(bsz, topk, topk).tolist(), probs.view(bsz, topk, topk).tolist()
        next_frontier, next_hidden = [], []
        for b in range(bsz):
            first = len(cands[b].tokens)
            for j, parent in enumerate(frontier[b]):
                for rank, (t, p) in enumerate(zip(tokens[b][j], probs[b][j])):
                    cands[b].add(t, p, cands[b].scores[parent] * p, parent, depth, rank)
            if chain_q is not None:
                chain_q[b].append(_full(q[b], cols, head))
            new = range(first, len(cands[b].tokens))
            best = sorted(new, key=lambda i: (-cands[b].scores[i], i))[:topk]
            next_frontier.append(best)
            # a new frontier node's feature is its parent's output from this forward
            next_hidden.append(hidden[[b * topk + frontier[b].index(cands[b].parents[i]) for i in best]])
        frontier, parent_hidden = next_frontier, torch.cat(next_hidden)
    expected = scratch_slots_per_step(num_steps, topk)
    if any(len(s) != expected for s in scratch):  # the engine sized the pool for exactly this many
        raise AssertionError(f"grow_tree took {[len(s) for s in scratch]} scratch slots, the pool allows {expected}")
    return DraftPhase(
        candidates=cands, levels=levels, scratch_slots=scratch,
        chain_q=None if chain_q is None else [torch.stack(c) for c in chain_q],
    )


def _full(q_row: torch.Tensor, cols: torch.Tensor | None, head: DraftHead) -> torch.Tensor:
    """A draft distribution over the hot vocabulary, scattered back to the full vocabulary."""
    if cols is None:
        return q_row
    full = torch.zeros(head.config.vocab_size, device=q_row.device)
    return full.index_copy(0, cols, q_row)


def _tree_level_batch(cands: list[Candidates], frontier: list[list[int]], processed: list[list[int]],
                      scratch: list[list[int]], new_slots: list[list[int]], table: SlotTable, rids: list[int],
                      depth: int, device) -> tuple[ForwardBatch, list[int]]:
    """Frontier nodes at ``depth`` attend the committed prefix + their exact ancestors + self.
    Returns the batch and each request's position for these nodes."""
    ids, pos, out, prefix, extra, masks, positions = [], [], [], [], [], [], []
    for b, rid in enumerate(rids):
        committed = table.slots(rid)
        keys = processed[b] + frontier[b]  # flat index of each extra key, in slot order
        where = {c: j for j, c in enumerate(keys)}
        mask = torch.zeros(len(frontier[b]), len(keys), dtype=torch.bool)
        for r, node in enumerate(frontier[b]):
            while node != -1:  # self, then ancestors (all were frontier nodes of earlier levels)
                mask[r, where[node]] = True
                node = cands[b].parents[node]
        ids.extend(cands[b].tokens[c] for c in frontier[b])
        positions.append(len(committed) + depth - 1)  # one behind the target's L + depth
        pos.extend([positions[-1]] * len(frontier[b]))
        out.extend(new_slots[b])
        prefix.append(committed)
        extra.append(scratch[b] + new_slots[b])
        masks.append(mask)
    i64 = dict(dtype=torch.int64, device=device)
    meta = build_meta([len(f) for f in frontier], prefix, extra, masks, device)
    return ForwardBatch(torch.tensor(ids, **i64), torch.tensor(pos, **i64), torch.tensor(out, **i64), meta), positions
