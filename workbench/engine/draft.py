"""The draft phase of a neural draft: extend the draft's KV, then grow the tree level by level.

**Extend** (the EAGLE head). The pairs ``(f_t, x_{t+1})`` whose draft KV is missing (after
prefill: the whole prompt; after a step: root + accepted drafts, paired with the token after
each) run through the head at the target's own slot ids, in the draft's own KV buffer, and are
kept. The output at the last pair gives level 1: the ``topk`` most likely children of the root.

**Grow** (``num_steps - 1`` more draft forwards, ``grow_tree``). Each request's ``Frontier``
(its ``topk`` best nodes of the last depth) runs through the draft with the *parent's draft
output* as feature, attending the request's prefix plus the node's exact ancestors in the tree.
Each proposes ``topk`` children scored ``parent score x child prob``; the ``topk`` best of
those ``topk^2`` candidates (``tree.score_order``) are the next frontier. Every request's
frontier has the same width F, so one forward's rows are a [B, F] grid, row ``b * F + j``
being request b's node j: ``Proposals`` holds what the forward proposed in that grid and maps
frontier nodes back to rows. Tree-level KV is scratch: its slots are freed after the phase.
``tree_level_batch`` builds one level's batch for every request; the static grower
(``static_tree.py``) uses it and ``propose`` too.

The prefix is what every node of the tree sees: for the head, the committed tokens, and a
frontier node at depth d runs at ``L + d - 1``, one behind the target's (its input is paired
with the token after it); for an early exit (``drafts/exit.py``), the committed tokens and the root,
and the node runs at ``L + d``, its own position. Both are ``len(prefix) + d - 1``.

Words: a node's **depth** is its distance from the root (the root is depth 0, its children
depth 1); draft forward k (k = 1..num_steps) proposes the candidates at depth k, and a
**level** (``DraftLevel``, the trace's ``draft.levels``) is one forward after the first, named
by the depth of the frontier it runs. Why positions run one behind the target's, and what must
hold for the extend: docs/design.md §4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from workbench.attention.batch import ForwardBatch, extend_batch, tree_batch
from workbench.engine.record import DraftLevel
from workbench.engine.sampling import SamplingParams, target_probs
from workbench.engine.tree import Candidates, ancestor_mask, score_order
from workbench.kv import SlotAllocator, SlotTable
from workbench.kv.pool import KVPool
from workbench.models.draft import DraftHead


@dataclass
class DraftPhase:
    """What one draft phase produced, per request (filled by the drafts, read by the engine and traces)."""

    candidates: list[Candidates]
    levels: list[list[DraftLevel]]  # per request: the forwards after the first, shallowest first
    scratch_slots: list[list[int]]  # draft KV of tree levels, freed at the end of the phase
    chain_q: list[torch.Tensor] | None = None  # leviathan: per request [num_steps, V] draft distributions


@dataclass
class Frontier:
    """One request's tree while it grows: its candidates, the nodes the next forward runs, and
    the scratch K/V the earlier levels wrote (filled by ``grow_tree`` and ``grow_static_tree``)."""

    prefix: list[int]  # slots every node attends: the committed prefix (an early exit: and the root)
    cands: Candidates = field(default_factory=Candidates)
    nodes: list[int] = field(default_factory=list)  # flat indices the next forward runs, best path score first
    written: list[int] = field(default_factory=list)  # flat indices with scratch K/V, in slot order
    scratch: list[int] = field(default_factory=list)  # their slots
    levels: list[DraftLevel] = field(default_factory=list)

    def run_level(self, depth: int, slots: list[int]) -> None:
        """The next forward runs ``nodes`` (at ``depth``) and writes their K/V at ``slots``."""
        if len(slots) != len(self.nodes):
            raise AssertionError(f"{len(self.nodes)} frontier nodes but {len(slots)} scratch slots")
        self.levels.append(DraftLevel(depth, list(self.nodes), list(slots), len(self.prefix) + depth - 1))
        self.written += self.nodes
        self.scratch += slots

    def add_children(self, depth: int, tokens: list[int], probs: list[float], scores: list[float],
                     width: int) -> int:
        """Record the ``width`` children of each frontier node (the root's at depth 1), node by
        node in rank order; returns the flat index of the first."""
        parents = self.nodes if depth > 1 else [-1]
        return self.cands.extend(tokens, probs, scores, parents=[p for p in parents for _ in range(width)],
                                 depth=depth, ranks=list(range(width)) * len(parents))

    def mask(self) -> torch.Tensor:
        """[F, W] bool: frontier node r sees written node j iff j is r itself or an ancestor
        (every ancestor ran in an earlier level: it is among ``written``)."""
        return ancestor_mask(self.nodes, self.cands.parents, {c: j for j, c in enumerate(self.written)})


def tree_level_batch(fronts: list[Frontier], device) -> ForwardBatch:
    """One tree level for every request, after ``Frontier.run_level``: the frontier nodes at
    their level's position, writing its slots, each attending its request's prefix plus its
    ancestors and itself among the scratch K/V."""
    levels = [f.levels[-1] for f in fronts]
    return tree_batch(tokens=[[f.cands.tokens[c] for c in lv.frontier] for f, lv in zip(fronts, levels)],
                      positions=[[lv.position] * len(lv.frontier) for lv in levels],
                      prefix_slots=[f.prefix for f in fronts], new_slots=[lv.slots for lv in levels],
                      seen_slots=[f.scratch for f in fronts], masks=[f.mask() for f in fronts], device=device)


def phase_of(fronts: list[Frontier], chain_q: list[list[torch.Tensor]] | None = None) -> DraftPhase:
    return DraftPhase(candidates=[f.cands for f in fronts], levels=[f.levels for f in fronts],
                      scratch_slots=[f.scratch for f in fronts],
                      chain_q=None if chain_q is None else [torch.stack(c) for c in chain_q])


def scratch_slots_per_step(num_steps: int, topk: int) -> int:
    """Draft-KV slots ``grow_tree`` takes from the allocator per request and step (the engine
    sizes the pool with this; ``grow_tree`` checks it allocates exactly that)."""
    return (num_steps - 1) * topk


DraftForward = Callable[[torch.Tensor, ForwardBatch], torch.Tensor]  # (features, batch) -> hidden


def head_forward(head: DraftHead, kv: KVPool, forward: DraftForward | None = None) -> DraftForward:
    """How a draft forward runs: ``forward`` when given (the engine's CUDA-graph runner,
    ``graphs.GraphedDraft``, writing to the same ``kv``), else the head itself, eagerly."""
    return forward if forward is not None else (lambda features, batch: head(features, batch, kv))


def draft_extend(head: DraftHead, kv: KVPool, *, table: SlotTable, rids: list[int],
                 tokens: list[list[int]], features: list[torch.Tensor],
                 forward: DraftForward | None = None) -> tuple[torch.Tensor, list[list[int]]]:
    """Run the pending pairs; returns the draft hidden state at each request's last pair [B, H]
    and the slots written. The pairs sit at the last ``len(tokens[b])`` committed positions:
    the caller checks that first (``drafts.head.HeadDraft``). ``forward``: see ``head_forward``."""
    prefix, new = [], []
    for rid, toks, feats in zip(rids, tokens, features):
        if len(toks) != feats.shape[0] or not toks:
            raise AssertionError(f"request {rid}: {len(toks)} pending tokens but {feats.shape[0]} features")
        slots = table.slots(rid)
        cut = len(slots) - len(toks)
        prefix.append(slots[:cut])
        new.append(slots[cut:])
    device = features[0].device
    batch = extend_batch(tokens=tokens, prefix_slots=prefix, new_slots=new, device=device)
    hidden = head_forward(head, kv, forward)(torch.cat(features), batch)  # [T, H]
    last = (torch.tensor([len(t) for t in tokens]).cumsum(0) - 1).to(device)  # each request's last row
    return hidden[last], new


@dataclass(frozen=True)
class Proposals:
    """What one draft forward proposes: row ``b * F + j`` of its output is request b's frontier
    node j (every request has F), and proposes ``width`` children of it, best first."""

    tokens: torch.Tensor  # [B, F, width] token ids (CPU)
    probs: torch.Tensor  # [B, F, width] draft probability given the parent (CPU)
    q: torch.Tensor | None = None  # leviathan: [B * F, V] the full-vocabulary law each child was drawn from
    top: tuple[torch.Tensor, torch.Tensor] | None = None  # tracing: [B, F, keep] tokens and probs, best first

    def keep_top(self, fronts: list[Frontier], nodes: list[list[int]]) -> None:
        """Record the draft's top at each node the forward ran (``nodes[b]``: request b's, in row
        order; -1 the root) in its request's candidates; nothing when the forward kept none."""
        if self.top is None:
            return
        tokens, probs = self.top[0].tolist(), self.top[1].tolist()
        for f, ns, tok, prob in zip(fronts, nodes, tokens, probs):
            for node, t, p in zip(ns, tok, prob):
                f.cands.top[node] = list(zip(t, p))

    def children(self, parent_scores: torch.Tensor, rows: torch.Tensor | None = None,
                 ranks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens, probs and path scores [B, n] of the children at (``rows``, ``ranks``) [n]
        (default: all of them, row by row, in rank order), scored ``parent score x prob`` in float64
        as Python multiplies floats; ``parent_scores`` [B, F]: the frontier's path scores."""
        if rows is None:
            tokens, probs, parent = self.tokens, self.probs, parent_scores[:, :, None]  # [B, F, width]
        else:
            tokens, probs, parent = self.tokens[:, rows, ranks], self.probs[:, rows, ranks], parent_scores[:, rows]
        scores = parent * probs.double()
        return tokens.flatten(1), probs.flatten(1), scores.flatten(1)

    def rows(self, frontier_index: torch.Tensor) -> torch.Tensor:
        """[B, n] (or [n], the same for every request) frontier node j of each request -> [B * n]
        its row ``b * F + j`` of this forward's output."""
        bsz, frontier = self.tokens.shape[:2]
        return (torch.arange(bsz)[:, None] * frontier + frontier_index).flatten()


def propose(head, hidden: torch.Tensor, bsz: int, width: int, sampled: SamplingParams | None = None,
            generator: torch.Generator | None = None, keep: int = 0) -> Proposals:
    """Children of each row of ``hidden`` [B * F, H]: the top ``width`` of the draft distribution,
    or (leviathan chain, width 1) one draw from q = the draft distribution under the sampling params.
    Tokens and probs come to the CPU (one copy each), where the tree's bookkeeping runs. ``keep``
    > 0 (tracing): also the ``keep`` most likely tokens of each row at temperature 1, for the record."""
    log_probs, cols = head.log_probs(hidden)  # [B * F, V']; cols: the token of each column (None: all)
    top = None
    if keep:
        lp, idx = log_probs.topk(min(keep, log_probs.shape[-1]), dim=-1)  # [B * F, keep]
        top = ((idx if cols is None else cols[idx]).view(bsz, -1, lp.shape[-1]).cpu(),
               lp.exp().view(bsz, -1, lp.shape[-1]).cpu())
    q = None
    if sampled is None:
        lp, idx = log_probs.topk(width, dim=-1)  # sorted: descending probability
        probs = lp.exp()
    else:
        q = target_probs(log_probs, sampled)  # [B * F, V']
        idx = torch.multinomial(q, 1, generator=generator)  # [B * F, 1]
        probs = q.gather(-1, idx)
    tokens = idx if cols is None else cols[idx]
    return Proposals(tokens.view(bsz, -1, width).cpu(), probs.view(bsz, -1, width).cpu(),
                     None if q is None else _full(q, cols, head), top)


def grow_tree(head, forward: DraftForward, *, allocator: SlotAllocator, prefixes: list[list[int]],
              h_last: torch.Tensor, num_steps: int, topk: int, sampled_chain: SamplingParams | None = None,
              generator: torch.Generator | None = None, keep_top: int = 0) -> DraftPhase:
    """Levels 1..num_steps of every request's tree, batched across requests.

    ``head.log_probs(hidden)`` gives the draft distribution of a row ([R, V'] log-probs and the
    token of each column, None = the full vocabulary); ``forward(features, batch)`` runs one
    level. ``prefixes[b]``: the slots request b's nodes attend (see the module docstring);
    ``h_last`` [B, H]: the draft's output that proposes level 1. ``sampled_chain``: leviathan
    (topk 1): children are drawn from q under these params instead of taken top-1. ``keep_top``
    > 0 (tracing): each node run keeps the draft's ``keep_top`` most likely tokens (``Candidates.top``).
    The next frontier is one sort of a [B, topk * topk] score tensor (module docstring)."""
    fronts = [Frontier(list(p)) for p in prefixes]
    bsz = len(fronts)
    chain_q: list[list[torch.Tensor]] | None = None if sampled_chain is None else [[] for _ in fronts]
    hidden, scores = h_last, torch.ones(bsz, 1, dtype=torch.float64)  # [B * F, H], [B, F]: the root
    for depth in range(1, num_steps + 1):  # this forward proposes depth (depth 1: the extend's output did)
        if depth > 1:  # run the frontier at depth - 1; a node's feature is its parent's output
            for f in fronts:
                f.run_level(depth - 1, allocator.alloc(len(f.nodes)))
            hidden = forward(features, tree_level_batch(fronts, h_last.device))  # [B * topk, H]
        props = propose(head, hidden, bsz, width=topk, sampled=sampled_chain, generator=generator, keep=keep_top)
        props.keep_top(fronts, [f.nodes if depth > 1 else [-1] for f in fronts])
        tokens, probs, child_scores = props.children(scores)  # [B, F * topk], row by row, in rank order
        first = [f.add_children(depth, tokens=t, probs=p, scores=s, width=topk)
                 for f, t, p, s in zip(fronts, tokens.tolist(), probs.tolist(), child_scores.tolist())]
        if chain_q is not None:  # a chain: one frontier node, row b
            for b, q in enumerate(chain_q):
                q.append(props.q[b])
        if depth == num_steps:
            break
        best = score_order(child_scores)[:, :topk]  # [B, topk]: the next frontier among the children
        for f, start, picked in zip(fronts, first, best.tolist()):
            f.nodes = [start + i for i in picked]
        scores = child_scores.gather(1, best)
        features = hidden[props.rows(best // topk)]  # their parents' rows
    expected = scratch_slots_per_step(num_steps, topk)
    if any(len(f.scratch) != expected for f in fronts):  # the engine sized the pool for exactly this many
        raise AssertionError(f"grow_tree took {[len(f.scratch) for f in fronts]} scratch slots, "
                             f"the pool allows {expected}")
    return phase_of(fronts, chain_q)


def _full(q: torch.Tensor, cols: torch.Tensor | None, head) -> torch.Tensor:
    """Draft distributions [R, V'] over the hot vocabulary, scattered back to the full vocabulary [R, V]."""
    if cols is None:
        return q
    full = torch.zeros(q.shape[0], head.config.vocab_size, device=q.device)
    return full.index_copy(1, cols, q)
