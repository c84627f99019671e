"""What to run: the decoding method and its tree knobs, validated with messages a user reads.

==================  =========================================================================
``num_steps``       draft levels = tree depth (SGLang ``speculative_num_steps``; EAGLE
                    ``depth = num_steps - 1``). 1..``MAX_STEPS``.
``topk``            children per expansion and frontier width (SGLang ``speculative_eagle_topk``).
                    1..``MAX_TOPK``; 1 is a chain.
``num_draft_tokens`` verify block size D **including the root** (SGLang
                    ``speculative_num_draft_tokens``, EAGLE ``total_token``):
                    2 <= D <= 1 + topk + (num_steps - 1) * topk^2, and D <= ``MAX_DRAFT_TOKENS``.
==================  =========================================================================

``linear`` is the chain special case: topk = 1 and D = num_steps + 1 (set for you).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.engine.tree import max_candidates

METHODS = ("vanilla", "linear", "eagle2")
CHAIN_RULES = ("target-only", "leviathan")
MAX_STEPS = 16
MAX_TOPK = 16
MAX_DRAFT_TOKENS = 256


@dataclass(frozen=True)
class SpecConfig:
    method: str = "eagle2"
    num_steps: int = 5
    topk: int = 4
    num_draft_tokens: int = 8
    # Sampling acceptance for a chain: "target-only" (drafts = top-1, EAGLE-2 / SGLang rule) or
    # "leviathan" (drafts sampled from the draft distribution q, accepted with min(1, p/q)).
    chain_rule: str = "target-only"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.chain_rule not in CHAIN_RULES:
            raise ValueError(f"unknown chain rule {self.chain_rule!r}; choose one of {', '.join(CHAIN_RULES)}")
        if self.method == "vanilla":
            return
        if not 1 <= self.num_steps <= MAX_STEPS:
            raise ValueError(f"num_steps must be in 1..{MAX_STEPS}, got {self.num_steps}")
        if not 1 <= self.topk <= MAX_TOPK:
            raise ValueError(f"topk must be in 1..{MAX_TOPK}, got {self.topk}")
        most = 1 + max_candidates(self.num_steps, self.topk)
        if not 2 <= self.num_draft_tokens <= min(most, MAX_DRAFT_TOKENS):
            raise ValueError(
                f"num_draft_tokens must be in 2..{min(most, MAX_DRAFT_TOKENS)} for num_steps={self.num_steps}, "
                f"topk={self.topk} (a tree of those holds at most {most} nodes incl. the root), "
                f"got {self.num_draft_tokens}"
            )
        if self.method == "linear" and (self.topk != 1 or self.num_draft_tokens != self.num_steps + 1):
            raise ValueError("linear means topk=1 and num_draft_tokens=num_steps+1; use SpecConfig.linear(num_steps)")
        if self.chain_rule == "leviathan" and self.topk != 1:
            raise ValueError("the leviathan rule verifies a sampled chain: it needs topk=1 (method linear)")

    @classmethod
    def linear(cls, num_steps: int, chain_rule: str = "target-only") -> "SpecConfig":
        return cls("linear", num_steps, 1, num_steps + 1, chain_rule)

    @property
    def speculative(self) -> bool:
        return self.method != "vanilla"

    def describe(self) -> str:
        if self.method == "vanilla":
            return "vanilla"
        return f"{self.method}(num_steps={self.num_steps}, topk={self.topk}, num_draft_tokens={self.num_draft_tokens})"
