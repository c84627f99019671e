"""``model:DIR``: a separate small model with the target's tokenizer (a local HF Llama-family
directory): its own KV at the target's slot ids, an extend per step. No such pair ships with
the workbench; the tests use a tiny random one (``testing.tiny_draft_pair``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workbench.attention.batch import extend_batch
from workbench.engine.drafts.base import DraftSource, Extended, Needs
from workbench.engine.drafts.exit import ExitDraft
from workbench.engine.frameworks import sglang_flags, vllm_flags
from workbench.engine.request import Request
from workbench.kv import SlotTable
from workbench.kv.pool import KVPool
from workbench.models.config import ModelConfig
from workbench.models.llama import TargetModel
from workbench.models.loading import load_target


@dataclass(frozen=True)
class ModelSource(DraftSource):
    path: str  # the draft model's directory

    kind = "model"
    grammar = "model:DIR"
    choice = "draft model (model:DIR)"
    colour = "#CC79A7"  # reddish purple
    needs = Needs(model=True, own_kv=True)

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("model:DIR names the draft model's directory")

    @classmethod
    def parse(cls, arg: str | None) -> ModelSource:
        if not arg:
            raise ValueError(f"draft source 'model:{arg or ''}': write it as model:DIR, DIR the draft model's directory")
        return cls(arg)

    @property
    def name(self) -> str:
        return f"model:{self.path}"

    def label(self, num_layers: int | None = None) -> str:
        return f"draft model ({self.path})"

    def check_target(self, target: ModelConfig) -> None:
        if not (Path(self.path) / "config.json").is_file():
            raise ValueError(f"{self.name}: no model directory (it needs config.json and weights)")
        self._check_vocab(ModelConfig.from_dir(self.path), target)

    def _check_vocab(self, draft: ModelConfig, target: ModelConfig) -> None:
        if draft.vocab_size != target.vocab_size:
            raise ValueError(f"{self.name}: its vocabulary ({draft.vocab_size}) is not the target's "
                             f"({target.vocab_size}); a draft model needs the target's tokenizer")

    def frameworks(self, spec) -> dict[str, str]:
        return {"SGLang": sglang_flags(spec, "STANDALONE", self.path), "vLLM": vllm_flags(spec, self.vllm_draft()),
                "EAGLE": "no separate draft model (an EAGLE head only)"}

    def vllm_draft(self) -> dict:
        return {"method": "draft_model", "model": self.path}

    def draft_cost(self, timers) -> list[tuple[int, float]]:
        return timers.model()

    def load(self, target: TargetModel) -> TargetModel:
        weight = target.lm_head.weight
        return load_target(self.path, weight.dtype, weight.device).eval()

    def build(self, target: TargetModel, draft) -> ModelDraft:
        if not isinstance(draft, TargetModel):
            raise ValueError(f"{self.name}: the engine needs the draft model itself (load it first)")
        self._check_vocab(draft.config, target.config)
        return ModelDraft(draft, self.name)


class ModelDraft(ExitDraft):
    """A separate small model with the target's tokenizer: its own KV pool at the target's slot
    ids, extended each step with the tokens committed since (the prompt, then root + accepted),
    then grown exactly as an early exit (the root at L, each node at its own position)."""

    def __init__(self, model: TargetModel, name: str):
        super().__init__(model, None, name)

    def start(self, num_slots: int, target_kv: KVPool, cuda_graphs: bool, draft_scratch: int) -> None:
        self.kv = self.model.new_kv_pool(num_slots)

    def extend(self, reqs: list[Request], table: SlotTable) -> Extended:
        """The committed tokens the draft has not seen, at their own slots and positions."""
        tokens, prefix, new = [], [], []
        for r in reqs:
            slots, start = table.slots(r.rid), r.draft_length
            tokens.append((r.prompt_ids + r.output_ids)[start : len(slots)])  # committed = all but the root
            prefix.append(slots[:start])
            new.append(slots[start:])
            r.draft_length = len(slots)
        self.model(extend_batch(tokens=tokens, prefix_slots=prefix, new_slots=new,
                                device=self.model.lm_head.weight.device),
                   self.kv)
        return Extended(None, new)
