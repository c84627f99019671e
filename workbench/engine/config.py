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

``static`` drafts a fixed tree shape (``tree``: rank paths, ``static_tree.py``; default
EAGLE-1's tree cut to D nodes); num_steps = its depth, topk = its width (1 + the highest rank),
D = its nodes + the root: ``SpecConfig.static(num_draft_tokens, tree)`` derives them.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.engine.static_tree import default_static_tree, tree_shape, validate_tree
from workbench.engine.tree import max_candidates

METHODS = ("vanilla", "linear", "eagle2", "static")
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
    # static only: the fixed shape as rank paths, breadth first (SpecConfig.static fills it)
    tree: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.chain_rule not in CHAIN_RULES:
            raise ValueError(f"unknown chain rule {self.chain_rule!r}; choose one of {', '.join(CHAIN_RULES)}")
        if self.method == "vanilla":
            return
        if self.method == "static":
            self._check_static()
            return
        if self.tree is not None:
            raise ValueError(f"a tree shape is for method static, not {self.method}")
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

    def _check_static(self) -> None:
        if self.tree is None:
            raise ValueError("method static needs a tree shape; use SpecConfig.static(num_draft_tokens, tree)")
        validate_tree([list(p) for p in self.tree], MAX_TOPK, MAX_STEPS, MAX_DRAFT_TOKENS - 1)
        depth, width = tree_shape(self.tree)
        if (self.num_steps, self.topk, self.num_draft_tokens) != (depth, width, len(self.tree) + 1):
            raise ValueError(f"a static tree of {len(self.tree)} paths, depth {depth}, width {width} means "
                             f"num_steps={depth}, topk={width}, num_draft_tokens={len(self.tree) + 1}; "
                             "use SpecConfig.static(num_draft_tokens, tree)")
        if self.chain_rule == "leviathan":
            raise ValueError("the leviathan rule verifies a sampled chain: it needs method linear")

    @classmethod
    def static(cls, num_draft_tokens: int | None = None, tree=None) -> "SpecConfig":
        """A fixed tree: ``tree`` (rank paths, validated) or EAGLE-1's default cut to
        ``num_draft_tokens`` (default 8). Given both, they must agree on the node count."""
        if tree is None:
            d = 8 if num_draft_tokens is None else num_draft_tokens
            if not 2 <= d <= MAX_DRAFT_TOKENS:
                raise ValueError(f"num_draft_tokens must be in 2..{MAX_DRAFT_TOKENS}, got {d}")
            paths = default_static_tree(d)
        else:
            paths = validate_tree(tree, MAX_TOPK, MAX_STEPS, MAX_DRAFT_TOKENS - 1)
            if num_draft_tokens is not None and num_draft_tokens != len(paths) + 1:
                raise ValueError(f"the tree has {len(paths)} nodes + the root = {len(paths) + 1} verify tokens, "
                                 f"but num_draft_tokens is {num_draft_tokens}; leave one of them out")
        depth, width = tree_shape(paths)
        return cls("static", depth, width, len(paths) + 1, tree=paths)

    @property
    def custom_tree(self) -> bool:
        """A static shape other than EAGLE-1's default at this size."""
        return self.tree is not None and self.tree != default_static_tree(self.num_draft_tokens)

    @property
    def max_scratch_slots(self) -> int:
        """Draft KV slots the tree levels may use in one step: topk per level (dynamic), or one
        per node with children (static, at most the nodes)."""
        return len(self.tree) if self.tree is not None else self.num_steps * self.topk

    @classmethod
    def linear(cls, num_steps: int, chain_rule: str = "target-only") -> "SpecConfig":
        return cls("linear", num_steps, 1, num_steps + 1, chain_rule)

    @property
    def speculative(self) -> bool:
        return self.method != "vanilla"

    def describe(self) -> str:
        if self.method == "vanilla":
            return "vanilla"
        if self.method == "static":
            shape = "custom tree" if self.custom_tree else "EAGLE-1 tree"
            return (f"static(num_draft_tokens={self.num_draft_tokens}, {shape}, depth {self.num_steps}, "
                    f"width {self.topk})")
        return f"{self.method}(num_steps={self.num_steps}, topk={self.topk}, num_draft_tokens={self.num_draft_tokens})"
