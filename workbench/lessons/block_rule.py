"""Block against token-level verification of a sampled chain: a two-token example worked
exactly, and the rules on real questions (notebook 4).

``two_token_pair`` is a target and a draft on the vocabulary {a, b} where the first draft is
often too likely under q and the second too unlikely, the case block verification is for;
``example_rows`` lists, per chain of two drafts, its probability under q and each rule's law of
the accepted count (``analysis/chain_rules.py``).

Two figures per rule, both from decodes at temperature > 0 of a few Spec-Bench questions, one
run per seed:

* τ, measured: tokens emitted per verify step, pooled over the questions, one value per seed.
  The two rules draw different chains, so their runs are not paired: a gain is named only where
  the ranges over the seeds do not overlap (``gain_sentence``).
* E[accepted drafts] per step, computed: each rule's expectation over the coins on every recorded
  step's own drafts, p and q (``analysis/chain_rules.py``), averaged. Paired (the same chains) and
  free of the coins' noise; the chains were drawn from q, so the mean also estimates each rule's
  worth over the drafts (where the paper's Theorem 2 puts block ahead).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import itertools

import torch

from workbench.analysis.chain_rules import ToyPair, chain_tensors, draft_chains, outcome_law, trace_rule_table
from workbench.engine.accept import block_weights
from workbench.engine.config import SAMPLED_CHAIN_RULES, SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons import smoke
from workbench.metrics import requests_tau


def two_token_pair() -> ToyPair:
    """Vocabulary {a = 0, b = 1}. First token: p = (0.5, 0.5), q = (0.8, 0.2): the draft proposes a
    too often. After a: p = (0.9, 0.1), q = (0.6, 0.4): the draft proposes a too rarely. After b,
    and deeper (laws the output check needs): p = (0.7, 0.3), q = (0.5, 0.5)."""
    target, draft = {(): _law(0.5, 0.5), (0,): _law(0.9, 0.1)}, {(): _law(0.8, 0.2), (0,): _law(0.6, 0.4)}
    for prefix in (p for d in range(1, 5) for p in itertools.product((0, 1), repeat=d)):
        target.setdefault(prefix, _law(0.7, 0.3))
        draft.setdefault(prefix, _law(0.5, 0.5))
    return ToyPair(vocab=2, depth=4, target=target, draft=draft)


def _law(*probs: float) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float64)


def example_rows(pair: ToyPair, num_steps: int = 2, names: str = "ab") -> list[dict]:
    """Per chain the draft can propose from the empty prefix: its probability under q, the
    token-level rule's and block's P(accepted = k) for k = 0..n, and block's w_i and h_i."""
    rows = []
    for drafts, p_draft in draft_chains(pair, (), num_steps, "block"):
        tokens, probs, q = chain_tensors(pair, (), drafts)
        weights, h = block_weights(tokens, probs, q)
        row = {"drafts": "".join(names[x] for x in drafts), "P(drafts) under q": p_draft}
        for rule in ("leviathan", "block"):
            for o in outcome_law(tokens, probs, q, rule):
                row[f"{rule} P(k={o.accepted})"] = o.prob
        row.update({f"w{i + 1}": w for i, w in enumerate(weights)})
        row.update({f"h{i + 1}": x for i, x in enumerate(h)})
        rows.append(row)
    return rows


@dataclass
class RuleRun:
    """One rule's runs: ``taus`` one pooled τ per seed; ``expected`` per rule, the mean over this
    rule's recorded steps of that rule's expected accepted drafts on the step's chain."""

    rule: str
    taus: list[float] = field(default_factory=list)
    expected: dict[str, float] = field(default_factory=dict)
    steps: int = 0


def rule_runs(wb, prompts: list[list[int]], num_steps: int, seeds: tuple[int, ...], max_new: int,
              temperature: float = 1.0) -> list[RuleRun]:
    """A chain of ``num_steps`` drawn from q under each sampled-chain rule, every prompt once per
    seed (fewer new tokens at smoke size)."""
    if temperature <= 0:
        raise ValueError("a chain is drawn from q only at temperature > 0")
    out = []
    for rule in SAMPLED_CHAIN_RULES:
        run, sums = RuleRun(rule), {}
        spec = SpecConfig.linear(num_steps, rule)
        for seed in seeds:
            steps: list[dict] = []
            reqs, _ = wb.generate(prompts, spec, SamplingParams(temperature=temperature, seed=seed),
                                  smoke.new_tokens(max_new), trace_sink=steps.append)
            run.taus.append(requests_tau(reqs))
            for table in filter(None, (trace_rule_table(t) for t in steps)):
                run.steps += 1
                for row in table:
                    sums[row.rule] = sums.get(row.rule, 0.0) + row.expected_accepted
        run.expected = {r: s / run.steps for r, s in sums.items()}
        out.append(run)
    return out


def gain_sentence(runs: list[RuleRun]) -> str:
    """Which rule's τ is higher, named only where the ranges over the seeds separate."""
    by = {r.rule: r for r in runs}
    block, token = by["block"].taus, by["leviathan"].taus
    ranges = f"block τ {min(block):.2f}–{max(block):.2f}, token-level τ {min(token):.2f}–{max(token):.2f}"
    if min(block) > max(token):
        return f"Block verification's τ is above the token-level rule's for every seed ({ranges}): a gain."
    if min(token) > max(block):
        return f"The token-level rule's τ is above block's for every seed ({ranges})."
    return (f"The ranges over {len(block)} seeds overlap ({ranges}): no gain in τ can be named at this size; "
            "the paired expectation below is the finer comparison.")


def expectation_sentence(runs: list[RuleRun]) -> str:
    """The paired comparison: on the same recorded chains, each rule's mean expected accepted drafts."""
    parts = []
    for run in runs:
        e = run.expected
        parts.append(f"on the {run.steps} chains drawn under {run.rule}, block {e['block']:.3f} against "
                     f"token-level {e['leviathan']:.3f} expected accepted drafts per step "
                     f"({e['block'] - e['leviathan']:+.3f})")
    return "; ".join(parts) + "."
