"""Sampling losslessness: speculative sampling reproduces the target's distribution exactly.

The joint distribution of the first 3 generated tokens of a tiny target (vocabulary 8, so 512
outcomes) is computed exactly (``workbench.lessons.exact_law``), then compared with N samples
from the engine by a chi-square test (``workbench.lessons.chi_square``, cells with expected count
< 5 pooled; the set-up is ``helpers.LOSSLESS_*``). Each test fails falsely with probability
ALPHA = 1e-3 when the engine is right. ``test_the_test_has_power`` shows it rejects a wrong
distribution (temperature 1 samples scored against the temperature 0.7 law).

top-k and top-k with top-p run on fewer draws (TOPK_DRAWS): they leave 27 and 23 possible
outcomes, where a few hundred samples fill the cells, and a sample the filter forbids (a draft
accepted outside the top k, a bonus drawn from the unfiltered residual) has probability 0 under
the law, so the test's p-value is 0.
"""

import pytest
import torch

from helpers import (LOSSLESS_ALPHA as ALPHA, LOSSLESS_DRAWS as N, LOSSLESS_LENGTH, LOSSLESS_PROMPT as PROMPT,
                     LOSSLESS_SAMPLINGS as SAMPLINGS, LOSSLESS_VOCAB as VOCAB, assert_samples_like_target,
                     tiny_pair)
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.lessons.chi_square import chi_square_pvalue, total_variation
from workbench.lessons.exact_law import sample_sequences, sequence_law

CASES = [
    ("eagle2", SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)),
    ("static", SpecConfig.static(tree=[[0], [1], [0, 0], [0, 1], [0, 0, 0]])),
    ("linear target-only", SpecConfig.linear(3)),
    ("linear leviathan", SpecConfig.linear(3, "leviathan")),
    ("linear block", SpecConfig.linear(3, "block")),
    ("linear block 1", SpecConfig.linear(1, "block")),
]
TOPK_DRAWS = 600
TOP_K = SamplingParams(temperature=1.0, top_k=3, seed=13)
TOP_K_TOP_P = SamplingParams(temperature=1.0, top_k=4, top_p=0.8, seed=14)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny8"), vocab_size=VOCAB, head_std=0.5)


@pytest.mark.parametrize("params", SAMPLINGS, ids=["T1", "T0.7-top_p0.9"])
@pytest.mark.parametrize("name, spec", CASES, ids=[c[0] for c in CASES])
def test_speculative_sampling_matches_target(pair, name, spec, params):
    target, head = pair
    assert_samples_like_target(target, head, spec, params, name, min_accepted=N // 10)


def law(target, params: SamplingParams) -> torch.Tensor:
    return sequence_law(target, PROMPT, params, LOSSLESS_LENGTH)


def test_the_filters_change_the_law(pair):
    """The top-k cases below test something: each filter moves the tiny target's law far (total
    variation > 0.2) from what it would be without it, and the two together from either alone."""
    target, _ = pair
    assert int((law(target, TOP_K) > 0).sum()) == 3 ** LOSSLESS_LENGTH
    assert total_variation(law(target, TOP_K), law(target, SamplingParams(temperature=1.0))) > 0.2
    both = law(target, TOP_K_TOP_P)
    assert total_variation(both, law(target, SamplingParams(temperature=1.0, top_k=4))) > 0.2
    assert total_variation(both, law(target, SamplingParams(temperature=1.0, top_p=0.8))) > 0.2


@pytest.mark.parametrize("params", [TOP_K, TOP_K_TOP_P], ids=["T1-top_k3", "T1-top_k4-top_p0.8"])
@pytest.mark.parametrize("name, spec", CASES, ids=[c[0] for c in CASES])
def test_speculative_sampling_matches_target_under_top_k(pair, name, spec, params):
    """top-k (and top-k with top-p) through every acceptance rule; fails falsely with
    probability ALPHA = 1e-3 each."""
    target, head = pair
    assert_samples_like_target(target, head, spec, params, name, min_accepted=TOPK_DRAWS // 10, draws=TOPK_DRAWS)


def test_the_test_has_power(pair):
    target, head = pair
    counts, _ = sample_sequences(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), SamplingParams(temperature=1.0, seed=3),
                                 PROMPT, LOSSLESS_LENGTH, N)
    wrong = law(target, SamplingParams(temperature=0.7, seed=0))
    assert chi_square_pvalue(counts, wrong) < ALPHA
    assert total_variation(counts, wrong) > total_variation(counts, law(target, SamplingParams(temperature=1.0)))
