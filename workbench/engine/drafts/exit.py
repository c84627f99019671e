"""``exit:N``: self-speculation with the target's first N layers, its final norm and its LM head.
The committed K/V of those layers is the target's own: no pool, no extend. 1 <= N < the
target's layer count."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.attention.batch import extend_batch
from workbench.engine.draft import DraftPhase
from workbench.engine.drafts.base import DraftSource, Drafter, Extended, freed, grow_neural, knob, tree_scratch
from workbench.engine.frameworks import FRAMEWORKS
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.kv import SlotTable
from workbench.kv.pool import KVPool
from workbench.models.config import ModelConfig
from workbench.models.llama import TargetModel


@dataclass(frozen=True)
class ExitSource(DraftSource):
    # the target layers the draft runs (the head-training measurements: 28 of 30 layers agree 0.53)
    num_layers: int = knob(28, "exit_layers", "early exit N", most=lambda target: target.num_layers - 1)

    kind = "exit"
    grammar = "exit:N"
    choice = "early exit: first N layers"
    colour = "#009E73"  # bluish green

    def __post_init__(self) -> None:
        if not isinstance(self.num_layers, int) or self.num_layers < 1:
            raise ValueError(f"exit:N drafts with the target's first N layers: N must be >= 1, got {self.num_layers}")

    @classmethod
    def parse(cls, arg: str | None) -> ExitSource:
        if not (arg or "").isdigit():
            raise ValueError(f"draft source 'exit:{arg or ''}': write the early exit as exit:N, "
                             "N the target layers it runs")
        return cls(int(arg))

    @property
    def name(self) -> str:
        return f"exit:{self.num_layers}"

    def label(self, num_layers: int | None = None) -> str:
        of = f" of {num_layers}" if num_layers else ""
        return f"early exit ({self.name}: the first {self.num_layers}{of} layers)"

    def check_target(self, target: ModelConfig) -> None:
        if not self.num_layers < target.num_layers:  # N = all of them is the target itself
            raise ValueError(f"{self.name}: the target has {target.num_layers} layers, "
                             f"so N must be in 1..{target.num_layers - 1}")

    def frameworks(self, spec) -> dict[str, str]:
        return {name: f"no early-exit draft ({self.name}): the nearest is a separate small draft model"
                for name in FRAMEWORKS}

    def draft_cost(self, timers) -> list[tuple[int, float]]:
        # N of the target's L layers (embedding and head included: an upper bound)
        return [(n, ms * self.num_layers / timers.num_layers) for n, ms in timers.verify]

    def build(self, target: TargetModel, draft) -> ExitDraft:
        self.check_target(target.config)
        return ExitDraft(target, self.num_layers, self.name)


class ExitDraft(Drafter):
    """Self-speculation: the target's first ``num_layers`` layers, its final norm and LM head.
    For committed tokens those layers' K/V are the target's own, so there is no pool and no
    extend: level 1 runs the root at L, and each tree level writes scratch K/V of those layers
    in the target's pool, attending the committed prefix, the root and the node's ancestors."""

    def __init__(self, model: TargetModel, num_layers: int | None, name: str, kv: KVPool | None = None):
        """``model``'s first ``num_layers`` layers (None: all of them, a draft model's); ``kv``:
        the target's pool (else ``start`` hands it over)."""
        self.model, self.num_layers, self.name = model, num_layers, name
        self.kv = kv

    def scratch_slots(self, spec) -> int:
        return 1 + tree_scratch(spec)  # + the root

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        self.kv = target_kv

    def forward(self, features: torch.Tensor, batch) -> torch.Tensor:
        """A ``DraftForward``: the tokens through the first layers (``features`` unused: the
        draft reads tokens, not the parent's output). Returns post-norm hidden [T, H]."""
        return self.model(batch, self.kv, num_layers=self.num_layers)

    def log_probs(self, hidden: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The exit's distribution at temperature 1 over the full vocabulary [R, V], as a head drafts."""
        return torch.log_softmax(self.model.logits(hidden), dim=-1), None

    def grow(self, reqs: list[Request], table: SlotTable, *, extended: Extended, spec,
             chain: SamplingParams | None, generator) -> DraftPhase:
        alloc = table.allocator
        roots = [alloc.alloc(1) for _ in reqs]
        prefixes = [table.slots(r.rid) for r in reqs]
        batch = extend_batch(tokens=[[r.root] for r in reqs], prefix_slots=prefixes, new_slots=roots,
                             device=self.model.lm_head.weight.device)
        h_root = self.forward(None, batch)  # [B, H]: the root at L proposes level 1
        phase = grow_neural(self, self.forward, allocator=alloc, prefixes=[p + s for p, s in zip(prefixes, roots)],
                            h_last=h_root, spec=spec, chain=chain, generator=generator, keep_top=self.keep_top)
        phase.scratch_slots = [s + level for s, level in zip(roots, phase.scratch_slots)]
        return freed(alloc, phase)
