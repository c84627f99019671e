"""Sampling losslessness: speculative sampling reproduces the target's distribution exactly.

The joint distribution of the first 3 generated tokens of a tiny target (vocabulary 8, so 512
outcomes) is computed exactly, then compared with N samples from the engine by a chi-square
test (cells with expected count < 5 pooled). Each test fails falsely with probability
ALPHA = 1e-3 when the engine is right. ``test_the_test_has_power`` shows it rejects a wrong
distribution (temperature 1 samples scored against the temperature 0.7 law).
"""

import itertools

import pytest
import torch

from helpers import fresh_prefill, tiny_pair
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.engine.sampling import SamplingParams, target_probs

ALPHA = 1e-3
N = 3000
VOCAB = 8
PROMPT = [3, 5, 1, 6]
CASES = [
    ("eagle2", SpecConfig("eagle2", 3, 2, 6)),
    ("static", SpecConfig.static(tree=[[0], [1], [0, 0], [0, 1], [0, 0, 0]])),
    ("linear target-only", SpecConfig.linear(3)),
    ("linear leviathan", SpecConfig.linear(3, "leviathan")),
]
SAMPLINGS = [SamplingParams(temperature=1.0, seed=11), SamplingParams(temperature=0.7, top_p=0.9, seed=12)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny8"), vocab_size=VOCAB, head_std=0.5)


def exact_joint(target, params: SamplingParams) -> dict[tuple, float]:
    def dist(prefix):
        _, _, hidden = fresh_prefill(target, PROMPT + list(prefix))
        return target_probs(target.logits(hidden[-1:]), params)[0]

    p1 = dist(())
    joint = {}
    for a in range(VOCAB):
        if p1[a] == 0:
            continue
        p2 = dist((a,))
        for b in range(VOCAB):
            if p2[b] == 0:
                continue
            p3 = dist((a, b))
            for c in range(VOCAB):
                joint[(a, b, c)] = float(p1[a] * p2[b] * p3[c])
    return joint


def engine_samples(target, head, spec, params) -> list[tuple]:
    eng = Engine(target, head, spec, params)
    eng.add_requests([PROMPT] * N, 3)
    eng.run()
    return [tuple(r.output_ids) for r in eng.requests], eng


def chi_square_pvalue(samples: list[tuple], joint: dict[tuple, float]) -> float:
    counts = {k: 0 for k in joint}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    assert set(counts) == set(joint), "sampled an outcome the target gives probability 0"
    obs, exp, pool_o, pool_e = [], [], 0, 0.0
    for k, p in joint.items():
        if p * len(samples) >= 5:
            obs.append(counts[k])
            exp.append(p * len(samples))
        else:
            pool_o += counts[k]
            pool_e += p * len(samples)
    if pool_e > 0:
        obs.append(pool_o)
        exp.append(pool_e)
    o, e = torch.tensor(obs, dtype=torch.float64), torch.tensor(exp, dtype=torch.float64)
    stat = ((o - e) ** 2 / e).sum()
    df = torch.tensor(len(obs) - 1, dtype=torch.float64)
    return float(torch.special.gammaincc(df / 2, stat / 2))


def assert_samples_like_target(target, head, spec, params, name: str, min_accepted: int) -> None:
    """N engine samples pass the chi-square test against the exact joint, with more than
    ``min_accepted`` drafts accepted (fewer and the test would say little about acceptance)."""
    samples, eng = engine_samples(target, head, spec, params)
    accepted = sum(n - 1 for r in eng.requests for n in r.accept_lengths)
    assert accepted > min_accepted, "too few drafts accepted for the test to mean anything"
    p = chi_square_pvalue(samples, exact_joint(target, params))
    assert p > ALPHA, f"{name}: chi-square p = {p:.2e}: the output distribution differs from the target's"


@pytest.mark.parametrize("params", SAMPLINGS, ids=["T1", "T0.7-top_p0.9"])
@pytest.mark.parametrize("name, spec", CASES, ids=[c[0] for c in CASES])
def test_speculative_sampling_matches_target(pair, name, spec, params):
    target, head = pair
    assert_samples_like_target(target, head, spec, params, name, min_accepted=N // 10)


def test_the_test_has_power(pair):
    target, head = pair
    samples, _ = engine_samples(target, head, SpecConfig("eagle2", 3, 2, 6), SamplingParams(temperature=1.0, seed=3))
    wrong = exact_joint(target, SamplingParams(temperature=0.7, seed=0))
    wrong = {k: v for k, v in wrong.items()}
    for s in set(samples) - set(wrong):  # outcomes impossible under the wrong law: give them a trace
        wrong[s] = 1e-12
    assert chi_square_pvalue(samples, wrong) < ALPHA
