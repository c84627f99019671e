"""``head``: the EAGLE head, the default. Which head is a loading choice that ``--draft`` writes
as a head directory or ``random[:SEED]`` (``check_weights``, ``load_head``; none: the shipped
head). Its own KV at the target's slot ids, an extend per step, CUDA-graphed levels."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workbench.engine.draft import DraftPhase, draft_extend, head_forward
from workbench.engine.drafts.base import (DraftSource, Drafter, Extended, Needs, check_pending, freed, grow_neural,
                                          tree_scratch)
from workbench.engine.frameworks import HEAD, sglang_flags, vllm_flags
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.kv import SlotTable
from workbench.kv.pool import KVPool
from workbench.models.draft import DraftHead, load_draft, random_head
from workbench.models.llama import TargetModel


@dataclass(frozen=True)
class HeadSource(DraftSource):
    kind = "head"
    grammar = "a head directory, random[:SEED]"
    choice = "EAGLE head"
    colour = "#0072B2"  # blue
    needs = Needs(head=True, own_kv=True, graphs=True)

    def frameworks(self, spec) -> dict[str, str]:
        return {"SGLang": sglang_flags(spec), "vLLM": vllm_flags(spec, self.vllm_draft()), "EAGLE": _eagle(spec)}

    def vllm_draft(self) -> dict:
        return {"method": "eagle", "model": HEAD}

    def draft_cost(self, timers) -> list[tuple[int, float]]:
        return timers.head()

    def build(self, target, draft) -> HeadDraft:
        if not isinstance(draft, DraftHead):
            raise ValueError("the head draft needs a draft head")
        return HeadDraft(draft, self.name)


def check_weights(text: str) -> None:
    """``--draft``'s head weights checked before anything loads: ``random[:SEED]`` or a head
    directory with config.json; ValueError saying what is wrong."""
    kind, colon, seed = text.partition(":")
    if kind == "random":
        if colon and not seed.isdigit():
            raise ValueError(f"random:SEED takes a seed >= 0, got {seed!r}")
        return
    path = Path(text).expanduser()
    if not path.exists():
        raise ValueError(f"{text}: no such head directory")
    if not (path / "config.json").is_file():
        raise ValueError(f"{text}: not a draft head directory (it needs config.json and weights)")


def load_head(text: str | None, target: TargetModel, default_target: bool) -> tuple[DraftHead, str]:
    """The head ``text`` names (None: the shipped one, or a seeded random head where none fits
    ``target``; ``default_target``: the target is the shipped one, which the shipped head must fit)
    and how the pages name it."""
    if text is not None:
        if text.startswith("random"):
            seed = int(text.split(":")[1]) if ":" in text else 0
            return random_head(target, seed), f"random (seed {seed})"
        return load_draft(text, target), str(text)
    from workbench.models.heads import default_draft_dir

    path = default_draft_dir()
    if not (path / "config.json").exists():
        return random_head(target, 0), f"random (seed 0): no trained head at {path}"
    if not default_target:
        try:
            return load_draft(path, target), str(path)
        except ValueError:
            return random_head(target, 0), "random (seed 0): the shipped head does not fit this target"
    return load_draft(path, target), str(path)


def _eagle(spec) -> str:
    args = f"EaModel.from_pretrained(..., depth={spec.num_steps - 1}, top_k={spec.topk}, total_token={spec.num_draft_tokens})"
    if spec.method == "static":
        return args + " (EAGLE-2's dynamic tree: the nearest setting; EAGLE-1 took a fixed tree of paths)"
    return args


class HeadDraft(Drafter):
    """The EAGLE head: its own KV at the target's slot ids, extended each step with the pairs
    (f_t, x_{t+1}) the last step committed; level 1 comes from the extend's last row."""

    level_offset = -1  # a frontier node at depth d runs at L + d - 1 (docs/design.md §4)
    reads_pending = True

    def __init__(self, head: DraftHead, name: str = "head"):
        self.head, self.name = head, name
        self.taps = tuple(head.fuse_layers)  # a fused head reads these target layers beside f_t
        self.kv: KVPool | None = None
        self.graphed = None  # graphs.GraphedDraft when CUDA graphs are on

    def scratch_slots(self, spec) -> int:
        return tree_scratch(spec)

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        # With graphs, one more pool slot that no request owns takes the padding tokens' K/V.
        self.kv = self.head.new_kv_pool(num_slots + (1 if cuda_graphs else 0))
        if cuda_graphs:
            from workbench.engine.graphs import GraphedDraft

            # A tree level also attends its ancestors' scratch KV: at most a step's scratch slots.
            self.graphed = GraphedDraft(self.head, self.kv, scratch_slot=num_slots, max_keys=num_slots + 1,
                                        max_extra=draft_scratch)

    def extend(self, reqs: list[Request], table: SlotTable) -> Extended:
        lens = [table.length(r.rid) for r in reqs]
        check_pending(reqs, lens)
        hidden, slots = draft_extend(self.head, self.kv, table=table, rids=[r.rid for r in reqs],
                                     tokens=[r.pending_tokens for r in reqs],
                                     features=[r.pending_features for r in reqs], forward=self.graphed)
        for r, L in zip(reqs, lens):
            r.draft_length = L
        return Extended(hidden, slots)

    def grow(self, reqs: list[Request], table: SlotTable, *, extended: Extended, spec,
             chain: SamplingParams | None, generator) -> DraftPhase:
        phase = grow_neural(self.head, head_forward(self.head, self.kv, self.graphed), allocator=table.allocator,
                            prefixes=[table.slots(r.rid) for r in reqs], h_last=extended.hidden, spec=spec, chain=chain,
                            generator=generator, keep_top=self.keep_top)
        return freed(table.allocator, phase)

    def proposes(self, token: int) -> bool:
        """A head with hot draft tokens proposes only those (``DraftHead.set_hot_tokens``)."""
        hot = self.head.hot_tokens
        return hot is None or bool((hot == token).any())
