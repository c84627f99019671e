"""The lossy accept thresholds (``SpecConfig.accept_threshold_single`` / ``_acc``).

* At 1 (the default) the sampling walk is the exact rule, coin for coin: checked against a
  plain statement of that rule on a hand-made tree.
* Below 1 the walk follows its closed-form law (``lessons/lossy.py``, derived from one coin per
  node where the walk tosses one per child), and on the tiny exact-law setup the engine accepts
  more drafts while its output leaves the target's law.

Statistical checks fail a correct engine with probability ALPHA each (chi-square, cells with
expected count < 5 pooled); the drift checks assert directions, not numbers.
"""

import argparse

import pytest
import torch

from helpers import tiny_pair
from workbench.analysis.expectation import trace_expectation
from workbench.engine.accept import relaxed_accept_prob, sampling_walk
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.engine.sampling import SamplingParams
from workbench.errors import UserError
from workbench.flags import add_spec_args, spec_from_args
from workbench.lessons.chi_square import chi_square_pvalue, total_variation
from workbench.lessons.exact_law import sample_sequences, sequence_law
from workbench.lessons.lossy import first_two_tokens_law, threshold_node_law

ALPHA = 1e-3
VOCAB, PROMPT, N = 8, [3, 5, 1, 6], 3000
HOT = SamplingParams(temperature=1.0, seed=5)
# root 0 -> children 1, 2, 3; node 1 -> 4, 5; node 4 -> 6
NEXT_TOKEN = [1, 4, -1, -1, 6, -1, -1]
NEXT_SIBLING = [-1, 2, 3, -1, 5, -1, -1]


@pytest.mark.parametrize("knobs, message", [
    (dict(accept_threshold_acc=0.0), "accept_threshold_acc must be in (0, 1]"),
    (dict(accept_threshold_single=1.5), "accept_threshold_single must be in (0, 1]"),
    (dict(accept_threshold_acc=float("nan")), "accept_threshold_acc must be in (0, 1]"),
    (dict(method="vanilla", accept_threshold_acc=0.5), "vanilla verifies no drafts"),
    (dict(method="linear", chain_rule="leviathan", accept_threshold_single=0.5), "leviathan rule"),
])
def test_bad_thresholds_are_refused(knobs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SpecConfig.from_knobs(**knobs)


def test_lossy_is_said_and_refused_under_greedy():
    exact, lossy = SpecConfig(), SpecConfig.from_knobs("static", accept_threshold_acc=0.5)
    assert not exact.lossy and "lossy" not in exact.describe()
    assert lossy.lossy and "lossy acceptance (accept_threshold_single=1, accept_threshold_acc=0.5)" in lossy.describe()
    exact.check_sampling(greedy=True)
    with pytest.raises(ValueError, match="set a temperature above 0"):
        lossy.check_sampling(greedy=True)


def test_cli_flags_default_exact_and_name_lossy():
    parser = argparse.ArgumentParser()
    add_spec_args(parser)
    spec, _ = spec_from_args(parser.parse_args([]))
    assert not spec.lossy
    spec, _ = spec_from_args(parser.parse_args(["--temperature", "1", "--speculative-accept-threshold-single", "0.4"]))
    assert (spec.accept_threshold_single, spec.accept_threshold_acc) == (0.4, 1.0)
    with pytest.raises(UserError, match="temperature above 0"):
        spec_from_args(parser.parse_args(["--speculative-accept-threshold-acc", "0.5"]))
    helps = [a.help for a in parser._actions if a.dest.startswith("speculative_accept_threshold")]
    assert len(helps) == 2 and all("lossy below 1" in h and "1 = exact" in h for h in helps)


def exact_rule(tokens, probs, generator):
    """The exact target-only rule, stated plainly: (path, bonus, coins) of one walk."""
    path, coins, node = [0], [], 0
    while True:
        p = probs[node].clone()
        children, child = [], NEXT_TOKEN[node]
        while child != -1:
            children.append(child)
            child = NEXT_SIBLING[child]
        for child in children:
            coins.append(float(torch.rand((), generator=generator)))
            if coins[-1] < float(p[tokens[child]] / p.sum()):
                path.append(child)
                node = child
                break
            p[tokens[child]] = 0.0
        else:
            return path, int(torch.multinomial(p / p.sum(), 1, generator=generator)), coins


def test_walk_at_threshold_one_is_the_exact_rule_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    tokens = [0, 1, 2, 3, 2, 4, 5]
    for seed in range(200):
        probs = torch.softmax(torch.randn(7, VOCAB, generator=gen) * 1.5, -1)
        res = sampling_walk(tokens, NEXT_TOKEN, next_sibling=NEXT_SIBLING, probs=probs,
                            generator=torch.Generator().manual_seed(seed), threshold_single=1.0, threshold_acc=1.0)
        path, bonus, coins = exact_rule(tokens, probs, torch.Generator().manual_seed(seed))
        assert (res.path, res.bonus, [m.coin for m in res.moves]) == (path, bonus, coins)
        assert res.thresholds is None and all(m.accept_prob is None for m in res.moves)


def test_relaxed_probability_is_the_exact_one_at_threshold_one():
    assert relaxed_accept_prob(0.2, 0.3, 1.0, 1.0) == pytest.approx(0.2 / 0.7, rel=1e-12)
    assert relaxed_accept_prob(0.2, 0.3, 0.2, 1.0) == 1.0  # the single threshold takes it outright
    assert relaxed_accept_prob(0.2, 0.3, 1.0, 0.5) == pytest.approx((1.0 - 0.6) / (1 - 0.6))


@pytest.mark.parametrize("single, acc", [(1.0, 1.0), (1.0, 0.6), (0.15, 1.0), (0.3, 0.8)])
def test_walk_follows_the_closed_form_law_at_one_node(single, acc):
    """Children 1, 2, 3 of the root are leaves here (no grandchildren): the emitted token is an
    accepted child or the bonus, whose law ``threshold_node_law`` states."""
    p = torch.softmax(torch.randn(VOCAB, generator=torch.Generator().manual_seed(3)), -1)
    tokens, next_token, next_sibling = [0, 5, 2, 6], [1, -1, -1, -1], [-1, 2, 3, -1]
    node = threshold_node_law(p, tokens[1:], single, acc)
    if (single, acc) == (1.0, 1.0):
        assert torch.allclose(node.law, p.double(), atol=1e-12)
    gen, counts = torch.Generator().manual_seed(1), torch.zeros(VOCAB)
    probs = p.expand(4, VOCAB)
    for _ in range(8000):
        res = sampling_walk(tokens, next_token, next_sibling=next_sibling, probs=probs, generator=gen,
                            threshold_single=single, threshold_acc=acc)
        counts[tokens[res.path[1]] if res.num_accepted else res.bonus] += 1
    assert chi_square_pvalue(counts, node.law) > ALPHA


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny8-lossy"), vocab_size=VOCAB, head_std=0.5)


def test_engine_drifts_as_the_closed_form_says(pair):
    """The tiny exact-law setup: t1 from the prefill, t2 from the first speculative step. Below 1
    the engine matches the relaxed law, accepts more drafts and leaves the target's law."""
    target, head = pair
    tree = dict(method="eagle2", num_steps=3, topk=4, num_draft_tokens=16)
    exact_law = sequence_law(target, PROMPT, HOT, 2)  # [V, V]
    runs = {}
    for acc in (1.0, 0.5):
        counts, accepted = sample_sequences(target, head, SpecConfig.from_knobs(**tree, accept_threshold_acc=acc),
                                            HOT, PROMPT, 2, N)
        relaxed = first_two_tokens_law(target, head, PROMPT, HOT, 4, threshold_acc=acc)
        assert chi_square_pvalue(counts, relaxed) > ALPHA, f"acc={acc}: the engine is not the closed form"
        runs[acc] = (counts, sum(accepted) / N, relaxed)
    assert torch.allclose(runs[1.0][2], exact_law, atol=1e-9)  # at 1 the closed form is the target's law
    (exact_counts, exact_rate, _), (lossy_counts, lossy_rate, lossy_law) = runs[1.0], runs[0.5]
    assert lossy_rate > exact_rate
    assert chi_square_pvalue(exact_counts, exact_law) > ALPHA
    assert chi_square_pvalue(lossy_counts, exact_law) < ALPHA
    assert total_variation(lossy_counts, exact_law) > total_variation(exact_counts, exact_law)
    assert 0.5 * float((lossy_law - exact_law).abs().sum()) > 0.01


def test_lossy_steps_trace_their_thresholds(pair):
    target, head = pair
    spec = SpecConfig.from_knobs("eagle2", num_steps=3, topk=4, num_draft_tokens=16, accept_threshold_single=0.3)
    eng = Engine(target, head, spec, sampling=HOT, trace=True)
    eng.add_requests([PROMPT], 6)
    spec_steps = [t for _ in range(3) for t in eng.step() if t["kind"] == "spec"]
    assert spec_steps
    for t in spec_steps:
        assert t["accept"]["lossy"] == {"accept_threshold_single": 0.3, "accept_threshold_acc": 1.0}
        assert trace_expectation(t) is None  # the exact rule's expectation does not hold here
        exact = {**t, "accept": {k: v for k, v in t["accept"].items() if k != "lossy"}}
        assert trace_expectation(exact) is not None  # the same tree without thresholds has one
        assert all("accept_prob" in m for m in t["accept"]["moves"])
    with pytest.raises(ValueError, match="set a temperature above 0"):
        Engine(target, head, spec, sampling=SamplingParams())


def test_app_settings_carry_the_thresholds_and_say_lossy():
    from workbench.app.state import Settings, acceptance_note

    assert not Settings().spec().lossy
    assert Settings(method="static", accept_threshold_acc=0.5).spec().accept_threshold_acc == 0.5
    with pytest.raises(ValueError, match="accept_threshold_single is empty"):
        Settings(accept_threshold_single=None).spec()
    assert acceptance_note(1.0, 1.0).startswith("exact")
    assert "**lossy**" in acceptance_note(1.0, 0.7) and "**lossy**" in acceptance_note(0.9, 1.0)


def test_drift_sentence_follows_the_numbers():
    from workbench.lessons.lossy import drift_sentence

    text = drift_sentence(["exact", "acc 0.5", "single 0.3"], [0.5, 0.9, 0.6], [0.0, 0.1, 0.02],
                          [0.4, 1e-9, 0.2], 1e-3)
    assert text.startswith("2 of 2 lossy settings accepted more") and "acc 0.5: 0.90, +80%" in text
    assert "tells 1 of 2 apart" in text and "came with a moved output law" in text
    text = drift_sentence(["exact", "acc 0.9"], [0.5, 0.5], [0.0, 0.0], [0.4, 0.5], 1e-3)
    assert text.startswith("0 of 1") and "moved output law" not in text
    with pytest.raises(ValueError):
        drift_sentence(["exact"], [0.5], [0.0], [0.4], 1e-3)


def test_app_step_header_says_lossy(tmp_path):
    from workbench.app.state import Session, Settings
    from workbench.testing.tiny import make_tiny_app_model
    from workbench.app.views import VIEWS, render
    from workbench.pipeline import Workbench

    wb = Workbench.load(target=str(make_tiny_app_model(tmp_path, seed=1)), draft="random:1", dtype="fp32")
    session = Session.start(wb, Settings(prompt="tell me about the cat", temperature=1.0, accept_threshold_acc=0.5,
                                         max_new_tokens=8))
    session.step()
    session.step()  # the prefill, then a speculative step
    summary = dict(zip(VIEWS, render(session, wb)))["summary"]
    assert "lossy acceptance (accept_threshold_single=1, accept_threshold_acc=0.5)" in summary
