"""``exit:N``: self-speculation with the target's first N layers, its final norm and its LM head.
The committed K/V of those layers is the target's own: no pool, no extend. 1 <= N < the
target's layer count."""

from __future__ import annotations

import torch

from workbench.attention.batch import extend_batch
from workbench.engine.draft import DraftPhase
from workbench.engine.drafts.base import FRAMEWORKS, Extended, Needs, grow_neural, nothing, tree_scratch
from workbench.engine.request import Request
from workbench.engine.sampling import SamplingParams
from workbench.kv import SlotTable
from workbench.kv.pool import KVPool
from workbench.models.llama import TargetModel


class ExitSource:
    kind = "exit"
    grammar = "exit:N"
    choice = "early exit: first N layers"
    model_free = False
    needs = Needs()

    def parse(self, arg: str | None) -> dict | None:
        if not (arg or "").isdigit():
            raise ValueError(f"draft source 'exit:{arg or ''}': write the early exit as exit:N, "
                             "N the target layers it runs")
        return {"num_layers": int(arg)}

    def check(self, source) -> None:
        if not isinstance(source.num_layers, int) or source.num_layers < 1:
            raise ValueError(f"exit:N drafts with the target's first N layers: N must be >= 1, got {source.num_layers}")

    def check_target(self, source, num_layers: int) -> None:
        if not source.num_layers < num_layers:  # N = all of them is the target itself
            raise ValueError(f"{self.name(source)}: the target has {num_layers} layers, "
                             f"so N must be in 1..{num_layers - 1}")

    def name(self, source) -> str:
        return f"exit:{source.num_layers}"

    def label(self, source, num_layers: int | None = None) -> str:
        of = f" of {num_layers}" if num_layers else ""
        return f"early exit ({self.name(source)}: the first {source.num_layers}{of} layers)"

    def frameworks(self, spec) -> dict[str, str]:
        return {name: f"no early-exit draft ({self.name(spec.draft)}): the nearest is a separate small draft model"
                for name in FRAMEWORKS}

    def build(self, source, target: TargetModel, draft) -> ExitDraft:
        self.check_target(source, target.config.num_layers)
        return ExitDraft(target, source.num_layers, self.name(source))


class ExitDraft:
    """Self-speculation: the target's first ``num_layers`` layers, its final norm and LM head.
    For committed tokens those layers' K/V are the target's own, so there is no pool and no
    extend: level 1 runs the root at L, and each tree level writes scratch K/V of those layers
    in the target's pool, attending the committed prefix, the root and the node's ancestors."""

    level_offset = 0  # a frontier node at depth d runs at L + d, its own position
    taps = ()
    reads_pending = False

    graphed = None  # no CUDA graphs for its forwards

    def __init__(self, model: TargetModel, num_layers: int | None, name: str):
        """``model``'s first ``num_layers`` layers (None: all of them, a draft model's)."""
        self.model, self.num_layers, self.name = model, num_layers, name
        self.kv: KVPool | None = None  # the target's

    def scratch_slots(self, spec) -> int:
        return 1 + tree_scratch(spec)  # + the root

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        self.kv = target_kv

    def extend(self, reqs: list[Request], table: SlotTable) -> Extended:
        return nothing(reqs)

    def forward(self, features: torch.Tensor, batch) -> torch.Tensor:
        """A ``DraftForward``: the tokens through the first layers (``features`` unused: the
        draft reads tokens, not the parent's output). Returns post-norm hidden [T, H]."""
        return self.model(batch, self.kv, num_layers=self.num_layers)

    def log_probs(self, hidden: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The exit's distribution at temperature 1 over the full vocabulary [R, V], as a head drafts."""
        return torch.log_softmax(self.model.logits(hidden), dim=-1), None

    def grow(self, reqs: list[Request], table: SlotTable, extended: Extended, spec,
             chain: SamplingParams | None, generator) -> DraftPhase:
        alloc = table.allocator
        roots = [alloc.alloc(1) for _ in reqs]
        prefixes = [table.slots(r.rid) for r in reqs]
        batch = extend_batch(tokens=[[r.root] for r in reqs], prefix_slots=prefixes, new_slots=roots,
                             device=self.model.lm_head.weight.device)
        h_root = self.forward(None, batch)  # [B, H]: the root at L proposes level 1
        phase = grow_neural(self, self.forward, alloc, [p + s for p, s in zip(prefixes, roots)], h_root, spec, chain,
                      generator)
        phase.scratch_slots = [s + level for s, level in zip(roots, phase.scratch_slots)]
        return phase
