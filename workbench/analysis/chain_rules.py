"""The chain rules side by side: what one step is worth under each, exactly.

Three ways to verify a chain at temperature > 0 (``engine/accept.py``):

* ``target-only``: the drafts are fixed (EAGLE-2's top-1), draft i is accepted with p_i(x_i).
* ``leviathan``: the drafts are drawn from q; draft i is accepted with min(1, p_i(x_i) / q_i(x_i)).
* ``block``: the same drawn drafts, judged together (Sun et al., arXiv 2403.10444): the longest
  prefix i whose coin is below h_i is kept (``accept.block_weights``).

``outcome_law`` gives, for one drafted chain, the exact law of (accepted count tau, bonus) over
the coins; ``expected_accepted`` its mean; ``trace_rule_table`` the same per rule from what a step
trace keeps: the table the app shows for the step on screen. Over the
coins *given one drawn chain* block can be below leviathan; the paper's optimality (Theorem 2)
is over the drafts too. That needs q after every prefix, which a real step does not have, so
``ToyPair`` holds a target and a draft on a small vocabulary as tables, and
``exact_expected_accepted`` enumerates every chain: the figure the optimality is about.
``output_law`` / ``target_law`` give the exact law of the first tokens of the output under a
rule and under the target, which are equal when the rule is lossless (tests/test_block_verify.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from workbench.engine.accept import block_residual, block_weights

RULES = ("target-only", "leviathan", "block")


@dataclass(frozen=True)
class Outcome:
    """One way a step can end: ``accepted`` drafts kept with probability ``prob``, the bonus drawn
    from ``bonus_law`` [V]."""

    accepted: int
    prob: float
    bonus_law: torch.Tensor


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown chain rule {rule!r}; choose one of {', '.join(RULES)}")


def outcome_law(tokens: list[int], probs: torch.Tensor, draft_probs: torch.Tensor | None,
                rule: str) -> list[Outcome]:
    """The exact law of a step's end over its coins: ``tokens`` = [root, x1..xn], ``probs``
    [n+1, V] the target's law after each prefix, ``draft_probs`` [n, V] the draft's (unused by
    target-only). Outcomes of probability 0 are kept, so ``outcomes[k].accepted == k``."""
    _check_rule(rule)
    n = len(tokens) - 1
    if rule == "block":
        weights, h = block_weights(tokens, probs, draft_probs)
        out = []
        for k in range(n + 1):  # kept = k: coin k under h_k (none for k = 0), every later coin above
            later = 1.0
            for j in range(k + 1, n + 1):
                later *= 1.0 - h[j - 1]
            law = probs[n] if k == n else block_residual(k, weights[k - 1] if k else 1.0, probs, draft_probs)
            out.append(Outcome(k, (h[k - 1] if k else 1.0) * later, law))
        return out
    out, reach = [], 1.0
    for k in range(n):  # the walk reaches draft k + 1 with ``reach`` and rejects it
        p, x = probs[k], tokens[k + 1]
        if rule == "leviathan":
            q = draft_probs[k]
            a = min(1.0, float(p[x] / q[x])) if q[x] > 0 else 0.0
            residual = (p - q).clamp_min(0.0)
        else:
            a, residual = float(p[x]), p.clone()
            residual[x] = 0.0
        if float(residual.sum()) <= 0.0:
            residual = p
        out.append(Outcome(k, reach * (1.0 - a), residual / residual.sum()))
        reach *= a
    out.append(Outcome(n, reach, probs[n]))
    return out


def expected_accepted(tokens: list[int], probs: torch.Tensor, draft_probs: torch.Tensor | None, rule: str) -> float:
    """E[accepted drafts] over the coins of one step whose drafts are ``tokens`` (the step emits
    one more: the bonus)."""
    return sum(o.accepted * o.prob for o in outcome_law(tokens, probs, draft_probs, rule))


@dataclass(frozen=True)
class RuleRow:
    """One row of the rule table: a rule and what the step on screen is worth under it."""

    rule: str
    expected_accepted: float  # drafts, over the coins, for this step's drafts, p and q
    ran: bool  # the rule this step ran


def scalar_expectations(target_prob: list[float], draft_prob: list[float],
                        block_accept: list[float]) -> dict[str, float]:
    """E[accepted drafts] per rule from the per-draft figures a trace keeps (its ``chain``): p_i(x_i),
    q_i(x_i) and block's h_i. target-only and leviathan accept draft i with a_i (p_i(x_i), or
    min(1, p/q)) once the ones before it are in: E = sum_k a_1 ... a_k. block keeps the prefix k
    when coin k is under h_k and every later one is above: E = sum_k k h_k prod_(j>k) (1 - h_j).
    Equal to ``expected_accepted`` on the full distributions (tests/test_block_verify.py)."""
    out = {}
    for rule, ratios in (("target-only", target_prob),
                         ("leviathan", [min(1.0, p / q) if q > 0 else 0.0 for p, q in zip(target_prob, draft_prob)])):
        reach, total = 1.0, 0.0
        for a in ratios:
            reach *= a
            total += reach
        out[rule] = total
    total, later = 0.0, 1.0
    for k in range(len(block_accept), 0, -1):
        total += k * block_accept[k - 1] * later
        later *= 1.0 - block_accept[k - 1]
    out["block"] = total
    return out


def trace_rule_table(trace: dict) -> list[RuleRow] | None:
    """Each rule's expected accepted drafts for the chain of one step trace that was drawn from q
    (its ``chain`` key, ``engine/trace.py``); None for any other step. target-only reads the same
    tokens as fixed drafts (what it would give had they been its top-1 drafts); leviathan and
    block read them as draws from q, as they were."""
    chain = trace.get("chain")
    if not chain:
        return None
    e = scalar_expectations([c["target_prob"] for c in chain], [c["draft_prob"] for c in chain],
                            [c["block_accept"] for c in chain])
    ran = trace["accept"]["rule"]
    return [RuleRow(rule=r, expected_accepted=e[r], ran=r == ran) for r in RULES]


@dataclass(frozen=True)
class ToyPair:
    """A target and a draft on ``vocab`` tokens, as the law of the next token after each prefix
    (a tuple of token ids, up to ``depth`` long): ``target[prefix]``, ``draft[prefix]`` [V]."""

    vocab: int
    depth: int
    target: dict[tuple[int, ...], torch.Tensor]
    draft: dict[tuple[int, ...], torch.Tensor]


def draft_chains(pair: ToyPair, prefix: tuple[int, ...], num_steps: int, rule: str):
    """(drafts, probability of drafting them) for every chain the rule's drafter can propose after
    ``prefix``: all V^n draws from q (leviathan, block), or q's top-1 path (target-only)."""
    _check_rule(rule)
    if rule == "target-only":
        drafts = prefix
        for _ in range(num_steps):
            drafts += (int(pair.draft[drafts].argmax()),)
        yield drafts[len(prefix):], 1.0
        return
    for drafts in itertools.product(range(pair.vocab), repeat=num_steps):
        prob = 1.0
        for i, x in enumerate(drafts):
            prob *= float(pair.draft[prefix + drafts[:i]][x])
        if prob > 0:
            yield drafts, prob


def chain_tensors(pair: ToyPair, prefix: tuple[int, ...], drafts: tuple[int, ...]):
    """(tokens, probs [n+1, V], draft_probs [n, V]) of one drafted chain, as the engine hands them
    to the accept functions (the root's token is a placeholder: no rule reads it)."""
    if len(prefix) + len(drafts) > pair.depth:
        raise ValueError(f"the pair holds laws up to depth {pair.depth}; prefix {len(prefix)} + "
                         f"{len(drafts)} drafts is past it")
    probs = torch.stack([pair.target[prefix + drafts[:i]] for i in range(len(drafts) + 1)])
    draft_probs = torch.stack([pair.draft[prefix + drafts[:i]] for i in range(len(drafts))])
    return [-1, *drafts], probs, draft_probs


def step_law(pair: ToyPair, prefix: tuple[int, ...], num_steps: int, rule: str) -> dict[tuple[int, ...], float]:
    """The exact law of what one step emits after ``prefix`` (accepted drafts + bonus)."""
    law: dict[tuple[int, ...], float] = {}
    for drafts, p_draft in draft_chains(pair, prefix, num_steps, rule):
        tokens, probs, q = chain_tensors(pair, prefix, drafts)
        for o in outcome_law(tokens, probs, q, rule):
            for y in range(pair.vocab):
                cell = drafts[:o.accepted] + (y,)
                law[cell] = law.get(cell, 0.0) + p_draft * o.prob * float(o.bonus_law[y])
    return law


def output_law(pair: ToyPair, length: int, num_steps: int, rule: str, prefix: tuple[int, ...] = ()) -> torch.Tensor:
    """[V] * length: the exact law of the next ``length`` output tokens when every step uses
    ``rule`` (as many steps as it takes)."""
    law = torch.zeros((pair.vocab,) * length, dtype=torch.float64)
    for emitted, prob in step_law(pair, prefix, num_steps, rule).items():
        if prob == 0.0:
            continue
        if len(emitted) >= length:
            law[emitted[:length]] += prob
        else:
            law[emitted] += prob * output_law(pair, length - len(emitted), num_steps, rule=rule, prefix=prefix + emitted)
    return law


def target_law(pair: ToyPair, length: int, prefix: tuple[int, ...] = ()) -> torch.Tensor:
    """[V] * length: the target's own law of the next ``length`` tokens."""
    law = torch.zeros((pair.vocab,) * length, dtype=torch.float64)
    for seq in itertools.product(range(pair.vocab), repeat=length):
        prob = 1.0
        for i, x in enumerate(seq):
            prob *= float(pair.target[prefix + seq[:i]][x])
        law[seq] = prob
    return law


def exact_expected_accepted(pair: ToyPair, num_steps: int, rule: str, prefix: tuple[int, ...] = ()) -> float:
    """E[accepted drafts] of one step after ``prefix``, over the drafts and the coins."""
    total = 0.0
    for drafts, p_draft in draft_chains(pair, prefix, num_steps, rule):
        total += p_draft * expected_accepted(*chain_tensors(pair, prefix, drafts), rule)
    return total
