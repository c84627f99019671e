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

``draft`` says where the drafts come from (a source of ``drafts/``): the EAGLE head (default), an
n-gram lookup in the request's own tokens, the target's early exit, or a separate draft model;
the tree knobs mean the same for each. The n-gram draft has no distribution, so it takes neither
a sampled-chain rule nor a static shape (which ranks a draft's top-k).

``chain_rule`` picks the sampling acceptance of a chain: ``target-only`` (top-1 drafts, the
EAGLE-2 rule), or a chain drawn from the draft's distribution q verified token by token
(``leviathan``) or as a block (``block``, Sun et al. 2024): ``SAMPLED_CHAIN_RULES``, ``linear``
only, because an EAGLE-2 or static tree's children are the draft's top-k, not draws from q.

Every config has a **name** in one grammar, read and written here only (``parse_spec`` and
``SpecConfig.name``) for the command line's ``--methods``, the benchmark, the tuner, the head's
evaluation and the app: ``vanilla``, ``linear:S``, ``eagle2:D/S/K`` (num_draft_tokens / num_steps /
topk), ``static:D``, each speculative one optionally ``@SOURCE`` (``eagle2:8/5/4@ngram:1-12``);
a chain drawn from q writes its rule after ``+`` (``linear:3+block``, ``linear:3+leviathan@exit:24``).

``SpecConfig.from_knobs`` is the one way from what a user typed to a ``SpecConfig``: it owns the
defaults (``DEFAULT_*``) and fills in what the method implies. ``__post_init__`` is the one place
the fields are checked: a ``ConfigError`` (a ``ValueError``) whose ``field`` names the knob,
worded with the field names or, through ``worded``, the command line's flags. ``check_context``
is the one context-length check (the engine calls it; the command line and the app call it
early, to word the error for their user).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, fields, replace

from workbench.engine.accept import EXACT_THRESHOLD
from workbench.engine.drafts.base import DraftSource
from workbench.engine.drafts.head import HeadSource
from workbench.engine.drafts.registry import SOURCES, grammar, parse_draft
from workbench.engine.sampling import SamplingParams
from workbench.engine.static_tree import breadth_first, default_static_tree, read_tree, tree_shape, validate_tree
from workbench.engine.tree import max_candidates

METHODS = ("vanilla", "linear", "eagle2", "static")
CHAIN_RULES = ("target-only", "leviathan", "block")
SAMPLED_CHAIN_RULES = ("leviathan", "block")  # the chain is drawn from q (accept.CHAIN_WALKS)
MAX_STEPS = 16
MAX_TOPK = 16
MAX_DRAFT_TOKENS = 256
DEFAULT_NUM_STEPS = 5
DEFAULT_TOPK = 4
DEFAULT_NUM_DRAFT_TOKENS = 8


class ConfigError(ValueError):
    """A config refused: ``field`` is the ``SpecConfig`` field it is about, and the message writes
    each field it names as ``{field}`` (its own among them), so that every front end calls them
    its way: ``str()`` by the field names, ``worded(names)`` by a table (the command line's
    field -> flag)."""

    def __init__(self, field: str, template: str):
        assert field in CONFIG_FIELDS and "{" + field + "}" in template, f"{field}: {template!r}"
        self.field, self.template = field, template
        super().__init__(self.worded({}))

    def worded(self, names: Mapping[str, str]) -> str:
        """The message with each ``{field}`` written ``names[field]`` (the field's name where absent)."""
        text = self.template
        for name in CONFIG_FIELDS:
            text = text.replace("{" + name + "}", names.get(name, name))
        return text


@dataclass(frozen=True)
class SpecConfig:
    method: str = "eagle2"
    _: KW_ONLY  # every knob by name: SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)
    num_steps: int = DEFAULT_NUM_STEPS
    topk: int = DEFAULT_TOPK
    num_draft_tokens: int = DEFAULT_NUM_DRAFT_TOKENS
    # Sampling acceptance for a chain: "target-only" (drafts = top-1, EAGLE-2 / SGLang rule),
    # "leviathan" (drafts sampled from the draft distribution q, accepted with min(1, p/q)) or
    # "block" (the same drafts, the longest prefix kept by block verification: accept.block_chain).
    chain_rule: str = "target-only"
    # static only: the fixed shape as rank paths, breadth first (SpecConfig.static fills it)
    tree: tuple[tuple[int, ...], ...] | None = None
    # lossy when below 1 (target-only sampling walk): accept a child whose target probability
    # reaches ``accept_threshold_single``, or whose cumulative probability among its tried
    # siblings, divided by ``accept_threshold_acc``, reaches the node's coin (accept.py)
    accept_threshold_single: float = EXACT_THRESHOLD
    accept_threshold_acc: float = EXACT_THRESHOLD
    draft: DraftSource = HeadSource()  # where the drafts come from (the EAGLE head by default)

    def __post_init__(self) -> None:
        """Every rule on the fields, here only, in the order a user would fix them; ConfigError
        naming the field otherwise."""
        if self.method not in METHODS:
            raise ConfigError("method", f"{{method}} {self.method!r} is unknown; choose one of {', '.join(METHODS)}")
        if self.chain_rule not in CHAIN_RULES:
            raise ConfigError("chain_rule", f"{{chain_rule}} {self.chain_rule!r} is unknown; choose one of "
                                            f"{', '.join(CHAIN_RULES)}")
        if not isinstance(self.draft, DraftSource):
            raise ConfigError("draft", f"{{draft}} must be a DraftSource, got {self.draft!r}")
        if self.tree is not None and self.method != "static":
            raise ConfigError("tree", f"{{tree}} gives a static tree: use it with {{method}} static, not {self.method}")
        if self.draft.model_free and (self.method == "static" or self.sampled_chain):
            raise ConfigError("draft", f"{{draft}} {self.draft.name} has no distribution to rank or sample from: it "
                                       "takes neither a static tree nor a rule that draws the chain from it ("
                                       f"{', '.join(SAMPLED_CHAIN_RULES)}; use {{method}} eagle2 or linear, "
                                       "{chain_rule} target-only)")
        if self.sampled_chain and self.method != "linear":
            raise ConfigError("chain_rule", f"{{chain_rule}} {self.chain_rule} verifies a chain drawn from the draft's "
                                            f"distribution: it needs {{method}} linear, not {self.method}"
                                            f"{_why_no_tree(self.method)}")
        self._check_thresholds()
        if self.method == "static":
            self._check_static()
        elif self.method != "vanilla":  # plain decoding reads no tree knobs
            self._check_tree_knobs()

    def _check_thresholds(self) -> None:
        for name in ("accept_threshold_single", "accept_threshold_acc"):
            value = getattr(self, name)
            if not 0.0 < value <= EXACT_THRESHOLD:
                raise ConfigError(name, f"{{{name}}} must be in (0, 1] (1 = exact, below 1 = lossy), got {value}")
        if self.lossy and (self.method == "vanilla" or self.sampled_chain):
            what = "vanilla verifies no drafts" if self.method == "vanilla" else \
                f"the {self.chain_rule} rule has its own exact test"
            raise ConfigError(self._lossy_field, f"{{{self._lossy_field}}} below 1 relaxes the target-only sampling "
                                                 f"walk, but {what}: leave it at 1")

    def _check_tree_knobs(self) -> None:
        """eagle2 and linear (the chain: topk 1, D = num_steps + 1)."""
        if not 1 <= self.num_steps <= MAX_STEPS:
            raise ConfigError("num_steps", f"{{num_steps}} must be in 1..{MAX_STEPS}, got {self.num_steps}")
        if self.method == "linear" and self.topk != 1:
            raise ConfigError("topk", f"{{method}} linear is the chain: {{topk}} must be 1 (or left out), "
                                      f"got {self.topk}")
        if not 1 <= self.topk <= MAX_TOPK:
            raise ConfigError("topk", f"{{topk}} must be in 1..{MAX_TOPK}, got {self.topk}")
        if self.method == "linear" and self.num_draft_tokens != self.num_steps + 1:
            raise ConfigError("num_draft_tokens",
                              f"{{method}} linear verifies {{num_steps}} + 1 = {self.num_steps + 1} tokens: leave "
                              f"{{num_draft_tokens}} out (got {self.num_draft_tokens})")
        most = 1 + max_candidates(self.num_steps, self.topk)
        if not 2 <= self.num_draft_tokens <= min(most, MAX_DRAFT_TOKENS):
            raise ConfigError("num_draft_tokens",
                              f"{{num_draft_tokens}} must be in 2..{min(most, MAX_DRAFT_TOKENS)} for {{num_steps}} "
                              f"{self.num_steps} and {{topk}} {self.topk} (a tree of those holds at most {most} nodes "
                              f"incl. the root), got {self.num_draft_tokens}")

    def _check_static(self) -> None:
        """The tree: valid rank paths, breadth first, that fix num_steps, topk and num_draft_tokens."""
        if self.tree is None:  # from_knobs cuts EAGLE-1's tree to any num_draft_tokens in range
            if not 2 <= self.num_draft_tokens <= MAX_DRAFT_TOKENS:
                raise ConfigError("num_draft_tokens", f"{{num_draft_tokens}} must be in 2..{MAX_DRAFT_TOKENS}, "
                                                      f"got {self.num_draft_tokens}")
            raise ConfigError("tree", "{method} static needs a {tree} shape; use SpecConfig.static(num_draft_tokens, "
                                      "tree)")
        try:
            paths = validate_tree(self.tree, MAX_TOPK, MAX_STEPS, MAX_DRAFT_TOKENS - 1)
        except ValueError as err:
            raise ConfigError("tree", f"{{tree}}: {err}") from None
        if paths != self.tree:
            raise ConfigError("tree", "{tree} must hold its rank paths as tuples, breadth first; "
                                      "SpecConfig.static(num_draft_tokens, tree) sorts them")
        if self.num_draft_tokens != len(paths) + 1:
            raise ConfigError("num_draft_tokens",
                              f"the {{tree}} has {len(paths)} nodes + the root = {len(paths) + 1} verify tokens, but "
                              f"{{num_draft_tokens}} is {self.num_draft_tokens}; leave one of them out")
        depth, width = tree_shape(paths)
        if (self.num_steps, self.topk) != (depth, width):
            raise ConfigError("topk" if self.topk != width else "num_steps",
                              f"{{method}} static takes its depth and width from its {{tree}} shape (depth {depth}, "
                              f"width {width}): leave {{num_steps}} and {{topk}} out")

    @property
    def _lossy_field(self) -> str:
        """The accept threshold set below 1 (single first), for a message about it."""
        return "accept_threshold_single" if self.accept_threshold_single < EXACT_THRESHOLD else "accept_threshold_acc"

    @property
    def sampled_chain(self) -> bool:
        """Is the chain drawn from the draft's distribution q (the leviathan or block rule)?"""
        return self.chain_rule in SAMPLED_CHAIN_RULES

    @property
    def lossy(self) -> bool:
        """Does the sampling walk accept more than the exact rule (a threshold below 1)?"""
        return min(self.accept_threshold_single, self.accept_threshold_acc) < EXACT_THRESHOLD

    def check_sampling(self, greedy: bool) -> None:
        """The thresholds act on the sampling walk: with greedy decoding (temperature 0) there is
        none, so a lossy setting would do nothing. ConfigError then."""
        if self.lossy and greedy:
            raise ConfigError(self._lossy_field, f"{{{self._lossy_field}}} below 1 acts on sampling acceptance only: "
                                                 "set a temperature above 0, or leave it at 1 (greedy acceptance is "
                                                 "exact)")

    @classmethod
    def static(cls, num_draft_tokens: int | None = None, tree=None, draft: DraftSource = HeadSource()) -> "SpecConfig":
        """A fixed tree: ``tree`` (rank paths, any order) or EAGLE-1's default cut to
        ``num_draft_tokens`` (default ``DEFAULT_NUM_DRAFT_TOKENS``). Given both, they must agree on the node count."""
        return cls("static", **_static_knobs(num_draft_tokens, tree), draft=draft)

    @property
    def custom_tree(self) -> bool:
        """A static shape other than EAGLE-1's default at this size."""
        return self.tree is not None and self.tree != default_static_tree(self.num_draft_tokens)

    @classmethod
    def linear(cls, num_steps: int, chain_rule: str = "target-only", draft: DraftSource = HeadSource()) -> "SpecConfig":
        return cls("linear", num_steps=num_steps, topk=1, num_draft_tokens=num_steps + 1, chain_rule=chain_rule,
                   draft=draft)

    @classmethod
    def from_knobs(cls, method: str = "eagle2", *, num_steps: int | None = None, topk: int | None = None,
                   num_draft_tokens: int | None = None, chain_rule: str = "target-only",
                   tree=None, accept_threshold_single: float = EXACT_THRESHOLD,
                   accept_threshold_acc: float = EXACT_THRESHOLD, draft: DraftSource | str | None = None) -> "SpecConfig":
        """A config from what a user typed: ``None`` is the default, and what the method implies is
        filled in: ``linear``, topk 1 and num_draft_tokens num_steps + 1; ``static``, num_steps,
        topk and num_draft_tokens from the shape, ``tree`` (rank paths, or their JSON text) or
        EAGLE-1's tree cut to num_draft_tokens; ``vanilla`` ignores the tree knobs and the draft.
        A knob given beside what the method implies must agree with it. ``draft``: a
        ``DraftSource`` or its text (None, or text naming none: the head). Only text is read here
        (ConfigError where it cannot be); the rules are ``__post_init__``'s."""
        tree = _read_tree(tree)
        given = {k: v for k, v in dict(num_steps=num_steps, topk=topk, num_draft_tokens=num_draft_tokens).items()
                 if v is not None}
        if method == "vanilla":  # plain decoding: no tree knobs, no draft
            implied, given, draft = {}, {}, None
        elif method == "static":
            implied = _static_knobs(num_draft_tokens, tree)
        else:
            steps = given.get("num_steps", DEFAULT_NUM_STEPS)
            implied = dict(num_steps=steps, topk=1, num_draft_tokens=steps + 1) if method == "linear" else \
                dict(num_steps=steps, topk=DEFAULT_TOPK, num_draft_tokens=DEFAULT_NUM_DRAFT_TOKENS)
        return cls(method, **{"tree": tree, **implied, **given}, chain_rule=chain_rule,
                   accept_threshold_single=accept_threshold_single, accept_threshold_acc=accept_threshold_acc,
                   draft=_read_draft(draft))

    @property
    def spare_positions(self) -> int:
        """Positions a step may use past the committed length: the verify block (speculative)
        or the one decoded token (vanilla)."""
        return self.num_draft_tokens if self.speculative else 1

    @property
    def speculative(self) -> bool:
        return self.method != "vanilla"

    def accept_rule(self, sampling: SamplingParams) -> str:
        """The accept walk's rule: "greedy", "target-only" (a top-k tree under sampling),
        "leviathan" (a chain drawn from the draft distribution q, accepted with min(1, p/q)) or
        "block" (that chain verified as a block)."""
        return "greedy" if sampling.greedy else self.chain_rule

    @property
    def name(self) -> str:
        """This config in the method grammar (``parse_spec``'s inverse). A custom static shape
        and a lossy setting have none: ValueError."""
        if self.custom_tree or self.lossy:
            raise ValueError(f"{self.describe()} has no short name: only vanilla, linear:S[+RULE], eagle2:D/S/K and "
                             "static:D (EAGLE-1's shape) with the exact rule do")
        base = {"vanilla": "vanilla", "linear": f"linear:{self.num_steps}", "static": f"static:{self.num_draft_tokens}",
                "eagle2": f"eagle2:{self.num_draft_tokens}/{self.num_steps}/{self.topk}"}[self.method]
        base += f"+{self.chain_rule}" if self.sampled_chain else ""
        return base if self.draft == HeadSource() or not self.speculative else f"{base}@{self.draft.name}"

    def describe(self) -> str:
        """One line naming the method and its knobs; a lossy setting says so."""
        if self.method == "vanilla":
            return "vanilla"
        draft = "" if self.draft == HeadSource() else f", draft={self.draft.name}"
        if self.method == "static":
            shape = "custom tree" if self.custom_tree else "EAGLE-1 tree"
            text = (f"static(num_draft_tokens={self.num_draft_tokens}, {shape}, depth {self.num_steps}, "
                    f"width {self.topk}{draft})")
        else:
            text = (f"{self.method}(num_steps={self.num_steps}, topk={self.topk}, "
                    f"num_draft_tokens={self.num_draft_tokens}{draft})")
        if self.sampled_chain:
            text += f", {self.chain_rule} rule (drafts drawn from q)"
        if self.lossy:
            text += (f", lossy acceptance (accept_threshold_single={self.accept_threshold_single:g}, "
                     f"accept_threshold_acc={self.accept_threshold_acc:g}): the output no longer follows the target")
        return text


CONFIG_FIELDS = tuple(f.name for f in fields(SpecConfig))  # the names a ConfigError may carry


def _static_knobs(num_draft_tokens: int | None, tree) -> dict:
    """The fields a static shape implies: ``tree`` (rank paths, any order) or EAGLE-1's tree cut
    to ``num_draft_tokens``, sorted breadth first, with its depth, width and node count (a
    ``num_draft_tokens`` given beside a tree is kept, for ``__post_init__`` to compare). What is no
    tree passes on as it came: ``__post_init__`` says what is wrong with it."""
    if tree is None:
        d = DEFAULT_NUM_DRAFT_TOKENS if num_draft_tokens is None else num_draft_tokens
        if not 2 <= d <= MAX_DRAFT_TOKENS:  # no such cut (a huge one would be built before it is refused)
            return dict(num_draft_tokens=d)
        tree = default_static_tree(d)
    try:
        paths = breadth_first(tuple(p) for p in tree)
        depth, width = tree_shape(paths)
    except (TypeError, ValueError):
        return dict(tree=tree) if num_draft_tokens is None else dict(tree=tree, num_draft_tokens=num_draft_tokens)
    return dict(num_steps=depth, topk=width, tree=paths,
                num_draft_tokens=len(paths) + 1 if num_draft_tokens is None else num_draft_tokens)


def _read_tree(tree):
    """The tree box's or ``--tree``'s text as rank paths (``static_tree.read_tree``; blank: no
    tree); anything else as it is."""
    if not isinstance(tree, str):
        return tree
    try:
        return read_tree(tree)
    except ValueError as err:
        raise ConfigError("tree", f"{{tree}} is {err}") from None


def _read_draft(draft: DraftSource | str | None) -> DraftSource:
    """A draft source or its text (``parse_draft``; None, or text naming none, is the head)."""
    if not isinstance(draft, str):
        return HeadSource() if draft is None else draft
    try:
        source = parse_draft(draft)
    except ValueError as err:
        raise ConfigError("draft", f"{{draft}} {draft}: {err}") from None
    return HeadSource() if source is None else source


METHOD_GRAMMAR = ("vanilla, linear:S, eagle2:D/S/K or static:D, a speculative one optionally with @SOURCE; "
                  f"a chain drawn from q as linear:S+RULE, RULE one of {', '.join(SAMPLED_CHAIN_RULES)}")


def parse_spec(name: str, others: str = "") -> SpecConfig:
    """``vanilla``, ``linear:S``, ``eagle2:D/S/K``, ``static:D``, optionally ``@ngram[:MIN-MAX]``,
    ``@exit:N`` or ``@model:DIR`` -> a validated ``SpecConfig``; ValueError naming what is wrong
    (``others``: more names the caller accepts, listed in the unknown-method message)."""
    base, at, source_text = name.strip().partition("@")
    base, plus, rule = base.partition("+")
    if plus and rule not in SAMPLED_CHAIN_RULES:
        raise ValueError(f"{name}: unknown chain rule {rule!r} after '+'; choose one of "
                         f"{', '.join(SAMPLED_CHAIN_RULES)} (target-only is written without one)")
    method, _, knobs = base.partition(":")
    numbers = knobs.split("/") if knobs else []
    if not all(n.isdigit() for n in numbers) or (method, len(numbers)) not in (
            ("vanilla", 0), ("linear", 1), ("eagle2", 3), ("static", 1)):
        raise ValueError(f"unknown method {name!r}; write {METHOD_GRAMMAR}" + (f"; or {others}" if others else ""))
    n = [int(x) for x in numbers]
    if method == "vanilla":
        spec = SpecConfig("vanilla")
    elif method == "linear":
        spec = SpecConfig.from_knobs("linear", num_steps=n[0], chain_rule=rule or "target-only")
    elif method == "static":
        spec = SpecConfig.from_knobs("static", num_draft_tokens=n[0])
    else:
        spec = SpecConfig.from_knobs("eagle2", num_steps=n[1], topk=n[2], num_draft_tokens=n[0])
    if plus and method != "linear":
        raise ValueError(f"{name}: +{rule} verifies a chain drawn from q, so only linear:S takes it"
                         f"{_why_no_tree(method)}")
    return with_draft(spec, source_text, name) if at else spec


def with_draft(spec: SpecConfig, text: str, name: str) -> SpecConfig:
    """``spec`` drafting from the source ``text`` names (the part after ``@`` of ``name``)."""
    source = parse_draft(text)
    if source is None:
        raise ValueError(f"{name}: unknown draft source {text!r}; choose one of {', '.join(SOURCES)} "
                         f"(as --draft writes them: {grammar()})")
    if not spec.speculative:
        raise ValueError(f"{name}: only a speculative method drafts (linear, eagle2 or static)")
    return replace(spec, draft=source)


def _why_no_tree(method: str) -> str:
    """Why a sampled-chain rule does not fit ``method``, for its error message."""
    if method == "vanilla":
        return " (vanilla drafts nothing)"
    return (f" (the {method} tree's children are the draft's top-k, not draws from q, so its one sampling rule is "
            "target-only; drawing a tree from q is in docs/design.md)")


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
