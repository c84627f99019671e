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

``accept_threshold_single`` / ``accept_threshold_acc`` (SGLang ``speculative_accept_threshold_single``
/ ``_acc``) relax the target-only sampling walk (``accept.py``): 1.0 (the default) is the exact
rule; below 1 the walk accepts more drafts and the output is **no longer distributed as the
target's**: a lossy trade, said wherever it is set (``describe``, the command line, the app).

``draft`` says where the drafts come from (``draft_source.py``): the EAGLE head (default), an
n-gram lookup in the request's own tokens, the target's early exit, or a separate draft model.
The tree knobs mean the same for each: ``num_steps`` caps the depth, ``topk`` the children per
node, and the rerank keeps ``num_draft_tokens - 1`` nodes. The n-gram draft has no distribution
to sample from, so it takes neither the leviathan rule nor a static shape (which ranks a
draft's top-k).

Every config has a **name** in one grammar, read and written here only (``parse_spec`` and
``SpecConfig.name``) for the command line's ``--methods``, the benchmark, the tuner, the head's
evaluation and the app: ``vanilla``, ``linear:S``, ``eagle2:D/S/K`` (num_draft_tokens / num_steps /
topk), ``static:D``, each speculative one optionally ``@SOURCE`` (``eagle2:8/5/4@ngram:1-12``).

``SpecConfig.from_knobs`` is the one way from what a user typed (command line, app, benchmark,
tuner) to a ``SpecConfig``: it owns the defaults (``DEFAULT_*``) and, with ``__post_init__``,
the bounds. ``check_context`` is the one context-length check (the engine calls it; the command
line and the app call it early to word the error for their user).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workbench.engine.accept import EXACT_THRESHOLD
from workbench.engine.draft_source import DraftSource, parse_draft
from workbench.engine.sampling import SamplingParams
from workbench.engine.static_tree import default_static_tree, parse_tree, tree_shape, validate_tree
from workbench.engine.tree import max_candidates

METHODS = ("vanilla", "linear", "eagle2", "static")
CHAIN_RULES = ("target-only", "leviathan")
MAX_STEPS = 16
MAX_TOPK = 16
MAX_DRAFT_TOKENS = 256
DEFAULT_NUM_STEPS = 5
DEFAULT_TOPK = 4
DEFAULT_NUM_DRAFT_TOKENS = 8


@dataclass(frozen=True)
class SpecConfig:
    method: str = "eagle2"
    num_steps: int = DEFAULT_NUM_STEPS
    topk: int = DEFAULT_TOPK
    num_draft_tokens: int = DEFAULT_NUM_DRAFT_TOKENS
    # Sampling acceptance for a chain: "target-only" (drafts = top-1, EAGLE-2 / SGLang rule) or
    # "leviathan" (drafts sampled from the draft distribution q, accepted with min(1, p/q)).
    chain_rule: str = "target-only"
    # static only: the fixed shape as rank paths, breadth first (SpecConfig.static fills it)
    tree: tuple[tuple[int, ...], ...] | None = None
    # lossy when below 1 (target-only sampling walk): accept a child whose target probability
    # reaches ``accept_threshold_single``, or whose cumulative probability among its tried
    # siblings, divided by ``accept_threshold_acc``, reaches the node's coin (accept.py)
    accept_threshold_single: float = EXACT_THRESHOLD
    accept_threshold_acc: float = EXACT_THRESHOLD
    draft: DraftSource = DraftSource()  # where the drafts come from (the EAGLE head by default)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.chain_rule not in CHAIN_RULES:
            raise ValueError(f"unknown chain rule {self.chain_rule!r}; choose one of {', '.join(CHAIN_RULES)}")
        self._check_thresholds()
        if not isinstance(self.draft, DraftSource):
            raise ValueError(f"draft must be a DraftSource, got {self.draft!r}")
        if self.method == "vanilla":
            return
        if self.draft.model_free and (self.method == "static" or self.chain_rule == "leviathan"):
            raise ValueError(f"the {self.draft.name} draft has no distribution to rank or sample from: it takes "
                             "neither a static tree nor the leviathan rule (use eagle2 or linear, target-only)")
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

    def _check_thresholds(self) -> None:
        for name in ("accept_threshold_single", "accept_threshold_acc"):
            value = getattr(self, name)
            if not 0.0 < value <= EXACT_THRESHOLD:
                raise ValueError(f"{name} must be in (0, 1] (1 = exact, below 1 = lossy), got {value}")
        if self.lossy and (self.method == "vanilla" or self.chain_rule == "leviathan"):
            what = "vanilla verifies no drafts" if self.method == "vanilla" else \
                "the leviathan rule has its own exact test, min(1, p/q)"
            raise ValueError(f"the accept thresholds relax the target-only sampling walk, but {what}: "
                             "leave them at 1")

    @property
    def lossy(self) -> bool:
        """Does the sampling walk accept more than the exact rule (a threshold below 1)?"""
        return min(self.accept_threshold_single, self.accept_threshold_acc) < EXACT_THRESHOLD

    def check_sampling(self, greedy: bool) -> None:
        """The thresholds act on the sampling walk: with greedy decoding (temperature 0) there is
        none, so a lossy setting would do nothing. ValueError then."""
        if self.lossy and greedy:
            raise ValueError("the lossy accept thresholds act on sampling acceptance: set a temperature above 0, "
                             "or leave them at 1 (greedy acceptance is exact)")

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
    def static(cls, num_draft_tokens: int | None = None, tree=None, draft: DraftSource = DraftSource()) -> "SpecConfig":
        """A fixed tree: ``tree`` (rank paths, validated) or EAGLE-1's default cut to
        ``num_draft_tokens`` (default ``DEFAULT_NUM_DRAFT_TOKENS``). Given both, they must agree on the node count."""
        if tree is None:
            d = DEFAULT_NUM_DRAFT_TOKENS if num_draft_tokens is None else num_draft_tokens
            if not 2 <= d <= MAX_DRAFT_TOKENS:
                raise ValueError(f"num_draft_tokens must be in 2..{MAX_DRAFT_TOKENS}, got {d}")
            paths = default_static_tree(d)
        else:
            paths = validate_tree(tree, MAX_TOPK, MAX_STEPS, MAX_DRAFT_TOKENS - 1)
            if num_draft_tokens is not None and num_draft_tokens != len(paths) + 1:
                raise ValueError(f"the tree has {len(paths)} nodes + the root = {len(paths) + 1} verify tokens, "
                                 f"but num_draft_tokens is {num_draft_tokens}; leave one of them out")
        depth, width = tree_shape(paths)
        return cls("static", depth, width, len(paths) + 1, tree=paths, draft=draft)

    @property
    def custom_tree(self) -> bool:
        """A static shape other than EAGLE-1's default at this size."""
        return self.tree is not None and self.tree != default_static_tree(self.num_draft_tokens)

    @classmethod
    def linear(cls, num_steps: int, chain_rule: str = "target-only", draft: DraftSource = DraftSource()) -> "SpecConfig":
        return cls("linear", num_steps, 1, num_steps + 1, chain_rule, draft=draft)

    @classmethod
    def from_knobs(cls, method: str = "eagle2", num_steps: int | None = None, topk: int | None = None,
                   num_draft_tokens: int | None = None, chain_rule: str = "target-only",
                   tree=None, accept_threshold_single: float = EXACT_THRESHOLD,
                   accept_threshold_acc: float = EXACT_THRESHOLD, draft: DraftSource | str | None = None) -> "SpecConfig":
        """A validated config from user knobs; ``None`` means the default. ``linear`` takes only
        ``num_steps`` (``topk`` may be 1 and ``num_draft_tokens`` num_steps + 1, nothing else);
        ``static`` takes ``num_draft_tokens`` (EAGLE-1's tree cut to it) or ``tree`` (rank paths,
        or their JSON text; both only if they agree), its shape fixing num_steps and topk;
        ``vanilla`` ignores the tree knobs and the draft. The accept thresholds (lossy below 1) go
        with any method but vanilla. ``draft``: a ``DraftSource`` or its text (``ngram:1-12``,
        ``exit:28``, ``model:DIR``; anything else, or None, is the head). Raises ``ValueError``
        with the reason."""
        spec = cls._from_tree_knobs(method, num_steps, topk, num_draft_tokens, chain_rule, tree)
        source = parse_draft(draft) if isinstance(draft, str) else draft
        return replace(spec, accept_threshold_single=accept_threshold_single,
                       accept_threshold_acc=accept_threshold_acc,
                       draft=source if source is not None and spec.speculative else DraftSource())

    @classmethod
    def _from_tree_knobs(cls, method, num_steps, topk, num_draft_tokens, chain_rule, tree) -> "SpecConfig":
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        if isinstance(tree, str):
            tree = parse_tree(tree, MAX_TOPK, MAX_STEPS, MAX_DRAFT_TOKENS - 1) if tree.strip() else None
        if tree is not None and method != "static":
            raise ValueError(f"a tree shape gives a static tree: use it with method static, not {method}")
        if method == "vanilla":
            return cls("vanilla", chain_rule=chain_rule)
        if method == "static":
            if num_steps is not None or topk is not None:
                raise ValueError("a static tree's shape fixes its depth and width: leave num_steps and topk out "
                                 "(give num_draft_tokens or a tree)")
            if chain_rule != "target-only":
                raise ValueError(f"the {chain_rule} rule verifies a sampled chain: it needs method linear")
            return cls.static(num_draft_tokens, tree)
        steps = DEFAULT_NUM_STEPS if num_steps is None else num_steps
        if method == "linear":
            if topk not in (None, 1):
                raise ValueError(f"linear is the chain: topk must be 1 (or left out), got {topk}")
            if num_draft_tokens not in (None, steps + 1):
                raise ValueError(f"linear verifies num_steps + 1 = {steps + 1} tokens: leave num_draft_tokens out "
                                 f"(got {num_draft_tokens})")
            return cls.linear(steps, chain_rule)
        return cls(method, steps, DEFAULT_TOPK if topk is None else topk,
                   DEFAULT_NUM_DRAFT_TOKENS if num_draft_tokens is None else num_draft_tokens, chain_rule)

    @property
    def spare_positions(self) -> int:
        """Positions a step may use past the committed length: the verify block (speculative)
        or the one decoded token (vanilla)."""
        return self.num_draft_tokens if self.speculative else 1

    @property
    def speculative(self) -> bool:
        return self.method != "vanilla"

    def accept_rule(self, sampling: SamplingParams) -> str:
        """The accept walk's rule: "greedy", "target-only" (a top-k tree under sampling) or
        "leviathan" (a chain drawn from the draft distribution q, accepted with min(1, p/q))."""
        return "greedy" if sampling.greedy else self.chain_rule

    @property
    def name(self) -> str:
        """This config in the method grammar (``parse_spec``'s inverse). A custom static shape
        and a lossy setting have none: ValueError."""
        if self.custom_tree or self.lossy or self.chain_rule != "target-only":
            raise ValueError(f"{self.describe()} has no short name: only vanilla, linear:S, eagle2:D/S/K and "
                             "static:D (EAGLE-1's shape) with the exact rule do")
        base = {"vanilla": "vanilla", "linear": f"linear:{self.num_steps}", "static": f"static:{self.num_draft_tokens}",
                "eagle2": f"eagle2:{self.num_draft_tokens}/{self.num_steps}/{self.topk}"}[self.method]
        return base if self.draft.kind == "head" or not self.speculative else f"{base}@{self.draft.name}"

    def describe(self) -> str:
        """One line naming the method and its knobs; a lossy setting says so."""
        if self.method == "vanilla":
            return "vanilla"
        draft = "" if self.draft.kind == "head" else f", draft={self.draft.name}"
        if self.method == "static":
            shape = "custom tree" if self.custom_tree else "EAGLE-1 tree"
            text = (f"static(num_draft_tokens={self.num_draft_tokens}, {shape}, depth {self.num_steps}, "
                    f"width {self.topk}{draft})")
        else:
            text = (f"{self.method}(num_steps={self.num_steps}, topk={self.topk}, "
                    f"num_draft_tokens={self.num_draft_tokens}{draft})")
        if self.lossy:
            text += (f", lossy acceptance (accept_threshold_single={self.accept_threshold_single:g}, "
                     f"accept_threshold_acc={self.accept_threshold_acc:g}): the output no longer follows the target")
        return text


METHOD_GRAMMAR = "vanilla, linear:S, eagle2:D/S/K or static:D, a speculative one optionally with @SOURCE"


def parse_spec(name: str, others: str = "") -> SpecConfig:
    """``vanilla``, ``linear:S``, ``eagle2:D/S/K``, ``static:D``, optionally ``@ngram[:MIN-MAX]``,
    ``@exit:N`` or ``@model:DIR`` -> a validated ``SpecConfig``; ValueError naming what is wrong
    (``others``: more names the caller accepts, listed in the unknown-method message)."""
    base, at, source_text = name.strip().partition("@")
    method, _, knobs = base.partition(":")
    numbers = knobs.split("/") if knobs else []
    if not all(n.isdigit() for n in numbers) or (method, len(numbers)) not in (
            ("vanilla", 0), ("linear", 1), ("eagle2", 3), ("static", 1)):
        raise ValueError(f"unknown method {name!r}; write {METHOD_GRAMMAR}" + (f"; or {others}" if others else ""))
    n = [int(x) for x in numbers]
    if method == "vanilla":
        spec = SpecConfig("vanilla")
    elif method == "linear":
        spec = SpecConfig.from_knobs("linear", num_steps=n[0])
    elif method == "static":
        spec = SpecConfig.from_knobs("static", num_draft_tokens=n[0])
    else:
        spec = SpecConfig.from_knobs("eagle2", num_steps=n[1], topk=n[2], num_draft_tokens=n[0])
    return with_draft(spec, source_text, name) if at else spec


def with_draft(spec: SpecConfig, text: str, name: str) -> SpecConfig:
    """``spec`` drafting from the source ``text`` names (the part after ``@`` of ``name``)."""
    source = parse_draft(text)
    if source is None:
        raise ValueError(f"{name}: unknown draft source {text!r}; use ngram, ngram:MIN-MAX, exit:N or model:DIR")
    if not spec.speculative:
        raise ValueError(f"{name}: only a speculative method drafts (linear, eagle2 or static)")
    return replace(spec, draft=source)


def check_context(spec: SpecConfig, context_len: int, prompt_len: int, max_new_tokens: int) -> None:
    """Does a prompt of ``prompt_len`` tokens plus ``max_new_tokens`` (and a step's spare
    positions) fit the model's context? ValueError with the numbers otherwise."""
    room = context_len - max_new_tokens - spec.spare_positions
    if room < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the model's context of "
                         f"{context_len}")
    if prompt_len > room:
        raise ValueError(f"the prompt has {prompt_len} tokens: with max_new_tokens={max_new_tokens} it exceeds the "
                         f"model's context of {context_len} (at most {room} prompt tokens fit)")
