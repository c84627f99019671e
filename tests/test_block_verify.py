"""Block verification of a chain drawn from q (``accept.block_chain``), beside the token-level rule.

Exact checks (no chance of a false failure): the weights on a two-token example worked by hand;
the law of the first tokens of the output, enumerated on a small vocabulary, equals the
target's for every chain rule (``analysis/chain_rules.py``); block's expected accepted drafts,
over drafts and coins, is at least the token-level rule's on random pairs (Sun et al. Theorem 2).

Statistical checks: the sampler's (accepted count, bonus) against the exact law of one step
(chi-square, each case fails falsely with probability ALPHA = 1e-3: at most 1.2% for the 12
cases together); the Monte Carlo mean of accepted drafts within 4.5 standard errors of the
exact figure (false failure about 7e-6 per case).
"""

import itertools

import pytest
import torch

from workbench.analysis.chain_rules import (RULES, ToyPair, chain_tensors, exact_expected_accepted,
                                            expected_accepted, outcome_law, output_law, scalar_expectations,
                                            target_law, trace_rule_table)
from workbench.engine.accept import CHAIN_WALKS, block_chain, block_weights, leviathan_chain, sampling_walk
from workbench.engine.config import ConfigError, SpecConfig, parse_spec
from workbench.lessons.chi_square import chi_square_pvalue

ALPHA = 1e-3


def random_pair(vocab: int, depth: int, generator: torch.Generator, sharpness: float = 2.0) -> ToyPair:
    """Random laws after every prefix up to ``depth`` (float64; ``sharpness`` > 1 peaks them, as
    real next-token laws are peaked)."""
    prefixes = [p for d in range(depth + 1) for p in itertools.product(range(vocab), repeat=d)]

    def law() -> torch.Tensor:
        x = torch.rand(vocab, generator=generator, dtype=torch.float64) ** sharpness
        return x / x.sum()

    return ToyPair(vocab=vocab, depth=depth, target={p: law() for p in prefixes}, draft={p: law() for p in prefixes})


def monte_carlo_accepted(pair: ToyPair, num_steps: int, rule: str, trials: int,
                         generator: torch.Generator) -> tuple[float, float]:
    """(mean, standard error) of the accepted drafts of ``trials`` steps after the empty prefix,
    each drafted from the pair and verified by the engine's own accept function."""
    counts = []
    for _ in range(trials):
        drafts: tuple[int, ...] = ()
        for _ in range(num_steps):
            q = pair.draft[drafts]
            x = int(q.argmax()) if rule == "target-only" else int(torch.multinomial(q, 1, generator=generator))
            drafts += (x,)
        tokens, probs, q = chain_tensors(pair, (), drafts)
        counts.append(_walk(tokens, probs, q, rule=rule, generator=generator).num_accepted)
    x = torch.tensor(counts, dtype=torch.float64)
    return float(x.mean()), float(x.std() / len(counts) ** 0.5)


def _walk(tokens, probs, draft_probs, rule, generator):
    """The engine's accept function for ``rule`` on one chain."""
    if rule in CHAIN_WALKS:
        return CHAIN_WALKS[rule](tokens, probs, draft_probs, generator)
    n = len(tokens) - 1
    next_token = [i + 1 for i in range(n)] + [-1]  # a chain: node i's only child is i + 1
    return sampling_walk(tokens, next_token, next_sibling=[-1] * (n + 1), probs=probs, generator=generator)


def two_token_chain():
    """Vocabulary {0, 1}, two drafts 0, 0; p = (0.5, 0.5) after every prefix, q = (0.8, 0.2)."""
    p, q = torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([0.8, 0.2], dtype=torch.float64)
    return [-1, 0, 0], torch.stack([p, p, p]), torch.stack([q, q])


def test_block_weights_on_a_two_token_example():
    """w1 = min(1, 0.5/0.8) = 0.625; r1 = max(0, 0.625*0.5-0.8) + max(0, 0.625*0.5-0.2) = 0.1125,
    h1 = 0.1125 / (0.1125 + 0.375) = 0.230769...; w2 = h2 = 0.625^2 = 0.390625."""
    weights, accept = block_weights(*two_token_chain())
    assert weights == pytest.approx([0.625, 0.390625])
    assert accept == pytest.approx([0.1125 / 0.4875, 0.390625])
    law = outcome_law(*two_token_chain(), rule="block")
    assert [o.prob for o in law] == pytest.approx([(1 - accept[0]) * (1 - accept[1]), accept[0] * (1 - accept[1]),
                                                   accept[1]])


def _random_chain(n: int, vocab: int, seed: int, keep: int | None = None):
    """A chain of n drafts drawn from random q; ``keep``: zero all but ``keep`` tokens of every p
    and q (what top-k leaves), so a draft or bonus outside them must never come out."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.rand(2 * n + 1, vocab, generator=g, dtype=torch.float64) ** 2
    if keep is not None:
        rows[:, keep:] = 0.0
    rows = rows / rows.sum(-1, keepdim=True)
    probs, q = rows[:n + 1], rows[n + 1:]
    tokens = [-1] + [int(torch.multinomial(q[i], 1, generator=g)) for i in range(n)]
    return tokens, probs, q


CHAINS = [(n, vocab, seed, keep) for n, vocab, keep in [(1, 4, None), (2, 5, None), (3, 6, 3), (5, 4, None),
                                                          (4, 8, 2), (3, 3, None)] for seed in (0, 1)]


@pytest.mark.parametrize("n, vocab, seed, keep", CHAINS)
def test_block_sampler_follows_its_exact_law(n, vocab, seed, keep):
    """(accepted count, bonus) of 4000 runs of ``block_chain`` against ``outcome_law``."""
    tokens, probs, q = _random_chain(n, vocab, seed, keep)
    law = torch.stack([o.prob * o.bonus_law for o in outcome_law(tokens, probs, q, "block")])  # [n+1, V]
    counts = torch.zeros_like(law)
    g = torch.Generator().manual_seed(100 + seed)
    for _ in range(4000):
        res = block_chain(tokens, probs, q, g)
        counts[res.num_accepted, res.bonus] += 1
    assert chi_square_pvalue(counts, law) > ALPHA


def test_block_moves_say_what_was_kept():
    tokens, probs, q = _random_chain(5, 4, 3)
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(200):
        res = block_chain(tokens, probs, q, g)
        tau = res.num_accepted
        seen.add(tau)
        assert res.path == list(range(tau + 1)) and len(res.moves) == 5
        assert [m.match for m in res.moves] == [i <= tau for i in range(1, 6)]
        assert all(m.weight is not None and m.accept_prob is not None for m in res.moves)
        if tau > 0:  # the kept prefix's own coin fell under its h
            assert res.moves[tau - 1].coin < res.moves[tau - 1].accept_prob
        assert all(m.coin >= m.accept_prob for m in res.moves[tau:])  # and no longer prefix's did
        assert res.stop == ("leaf" if tau == 5 else "no_match")
    assert len(seen) >= 2  # both a kept prefix and none (or two lengths) were exercised


PAIRS = [(vocab, steps, seed) for vocab, steps in [(2, 2), (3, 3), (4, 2)] for seed in (0, 1, 2)]


@pytest.mark.parametrize("vocab, steps, seed", PAIRS)
@pytest.mark.parametrize("rule", RULES)
def test_every_rule_outputs_the_target_law(vocab, steps, seed, rule):
    """The exact law of the first 3 output tokens (as many steps as it takes) is the target's."""
    pair = random_pair(vocab, steps + 3, torch.Generator().manual_seed(seed))
    torch.testing.assert_close(output_law(pair, 3, steps, rule), target_law(pair, 3), rtol=0, atol=1e-12)


def test_a_wrong_residual_breaks_the_law(monkeypatch):
    """The law check has power: drawing block's bonus from the target's p instead of the block
    residual moves the law far from the target's."""
    import workbench.analysis.chain_rules as cr

    pair = random_pair(3, 5, torch.Generator().manual_seed(4))
    monkeypatch.setattr(cr, "block_residual", lambda tau, weight, probs, q: probs[tau])
    assert float((output_law(pair, 2, 2, "block") - target_law(pair, 2)).abs().sum()) > 0.01


@pytest.mark.parametrize("seed", range(12))
def test_block_accepts_at_least_as_many_as_token_level(seed):
    """Over the drafts and the coins (exact), on random pairs of vocab 3, 3 drafts."""
    pair = random_pair(3, 3, torch.Generator().manual_seed(seed), sharpness=1.0 + seed / 4)
    block, token = exact_expected_accepted(pair, 3, "block"), exact_expected_accepted(pair, 3, "leviathan")
    assert block >= token - 1e-12


def test_for_one_drawn_chain_block_can_be_below_token_level():
    """Why the optimality is stated over the drafts: given one chain, either rule can be ahead."""
    signs = set()
    for seed in range(50):
        chain = _random_chain(3, 4, seed)
        signs.add(expected_accepted(*chain, rule="block") > expected_accepted(*chain, rule="leviathan"))
    assert signs == {True, False}


@pytest.mark.parametrize("rule", RULES)
def test_monte_carlo_agrees_with_the_exact_figure(rule):
    pair = random_pair(3, 3, torch.Generator().manual_seed(7))
    mean, se = monte_carlo_accepted(pair, 3, rule, 3000, torch.Generator().manual_seed(8))
    exact = exact_expected_accepted(pair, 3, rule)
    assert abs(mean - exact) < 4.5 * se


@pytest.mark.parametrize("seed", range(5))
def test_the_trace_figures_give_the_exact_expectations(seed):
    """``scalar_expectations`` (what a trace keeps) equals ``expected_accepted`` (full p and q)."""
    tokens, probs, q = _random_chain(4, 6, seed)
    weights, h = block_weights(tokens, probs, q)
    e = scalar_expectations([float(probs[i, tokens[i + 1]]) for i in range(4)],
                            [float(q[i, tokens[i + 1]]) for i in range(4)], h)
    for rule in RULES:
        assert e[rule] == pytest.approx(expected_accepted(tokens, probs, q, rule))
    trace = {"chain": [{"target_prob": float(probs[i, tokens[i + 1]]), "draft_prob": float(q[i, tokens[i + 1]]),
                        "weight": weights[i], "block_accept": h[i]} for i in range(4)], "accept": {"rule": "block"}}
    rows = trace_rule_table(trace)
    assert [r.rule for r in rows if r.ran] == ["block"]
    assert trace_rule_table({"accept": {"rule": "target-only"}}) is None


def test_leviathan_and_block_agree_on_a_single_draft():
    """One draft: h_1 = w_1 = min(1, p/q) and the residual is the token-level one: the same law."""
    tokens, probs, q = _random_chain(1, 5, 9)
    a = outcome_law(tokens, probs, q, "block")
    b = outcome_law(tokens, probs, q, "leviathan")
    for x, y in zip(a, b):
        assert x.prob == pytest.approx(y.prob)
        torch.testing.assert_close(x.bonus_law, y.bonus_law)
    assert leviathan_chain(tokens, probs, q, torch.Generator().manual_seed(1)).moves[0].weight is None


def test_the_toy_pair_refuses_chains_past_its_depth():
    pair = random_pair(2, 2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="up to depth 2"):
        chain_tensors(pair, (0,), (0, 0))
    with pytest.raises(ValueError, match="choose one of target-only, leviathan, block"):
        exact_expected_accepted(pair, 1, "greedy")


def test_block_in_the_method_grammar():
    spec = parse_spec("linear:3+block")
    assert spec.chain_rule == "block" and spec.num_steps == 3 and spec.name == "linear:3+block"
    assert parse_spec("linear:2+leviathan@exit:24").name == "linear:2+leviathan@exit:24"
    assert parse_spec(SpecConfig.linear(4, "block").name) == SpecConfig.linear(4, "block")
    assert "block rule" in spec.describe()


@pytest.mark.parametrize("name, message", [
    ("linear:3+greedy", "choose one of leviathan, block"),
    ("eagle2:8/5/4+block", "only linear:S takes it"),
    ("vanilla+block", "vanilla drafts nothing"),
])
def test_the_grammar_refuses_a_rule_that_does_not_fit(name, message):
    with pytest.raises(ValueError, match=message):
        parse_spec(name)


def test_block_on_a_tree_names_the_rule_that_fits():
    with pytest.raises(ConfigError, match="top-k, not draws from q, so its one sampling rule is target-only") as err:
        SpecConfig.from_knobs("eagle2", chain_rule="block")
    assert err.value.field == "chain_rule"
    with pytest.raises(ConfigError, match="choose one of target-only, leviathan, block"):
        SpecConfig.from_knobs("linear", chain_rule="blocks")


def test_a_top1_draft_read_as_a_draw_from_q_is_not_lossless():
    """docs/design.md §7's counter-example: V = {a, b}, q = (0.6, 0.4), p = (0.5, 0.5), the draft
    always a (top-1). Reading it as a draw from q emits a with 5/6; reading its true law, the point
    mass on a (the target-only walk), with 0.5."""
    p, q = torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([0.6, 0.4], dtype=torch.float64)
    tokens, probs = [-1, 0], torch.stack([p, p])

    def first_is_a(rule, draft):
        return sum(o.prob * (1.0 if o.accepted else float(o.bonus_law[0]))
                   for o in outcome_law(tokens, probs, draft[None], rule))

    assert first_is_a("block", q) == pytest.approx(5 / 6)
    assert first_is_a("leviathan", q) == pytest.approx(5 / 6)
    assert first_is_a("block", torch.tensor([1.0, 0.0], dtype=torch.float64)) == pytest.approx(0.5)
    assert first_is_a("target-only", q) == pytest.approx(0.5)
