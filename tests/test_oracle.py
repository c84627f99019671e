"""Expected accept length and the perfect-head tree (workbench/analysis/expectation.py, oracle.py).

* the expectation formula against the walk itself: many coin draws of ``sampling_walk`` on one
  tree average to ``expectation`` (and its per-depth reach), within a 5-sigma band;
* a step record's expectation is the same sum over its own verify logits, and greedy gives the
  accept length itself; a trace's (from each node's recorded ``target_prob``) is the record's,
  for the target-only rule only;
* the perfect head's tree equals the same procedure done by brute force, every node's
  distribution from a fresh causal forward of its whole path (so positions and masks are
  right); greedy, it takes every level;
* an early-exit draft (the target's first n layers) grows the tree a brute-force rebuild grows,
  and its expectation is the tree's worth under the whole target; with every layer it is the
  perfect head, and its agreement counts the answer positions where the exit's argmax is the
  target's.
"""

import math

import pytest
import torch

from helpers import fresh_prefill, random_prompts, tiny_pair
from workbench.attention.batch import extend_batch
from workbench.engine.accept import sampling_walk
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.analysis.expectation import expectation, path_mass, step_expectation, trace_expectation
from workbench.analysis.oracle import early_exit_trees, perfect_head_trees
from workbench.engine.sampling import SamplingParams, target_probs
from workbench.engine.tree import Candidates, build_tree

VOCAB = 16


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny16"), vocab_size=VOCAB, head_std=0.5)


def _tree():
    """Root 0; children 1 (tok 2), 2 (tok 5); 1's children 3 (tok 7), 4 (tok 2); 3's child 5 (tok 1)."""
    c = Candidates()
    a = c.add(2, 0.5, score=0.5, parent=-1, depth=1)
    c.add(5, 0.3, score=0.3, parent=-1, depth=1)
    b = c.add(7, 0.6, score=0.3, parent=a, depth=2)
    c.add(2, 0.2, score=0.1, parent=a, depth=2)
    c.add(1, 0.9, score=0.27, parent=b, depth=3)
    return build_tree(9, c, [0, 1, 2, 3, 4], prefix_len=4)


def test_expectation_matches_the_walk():
    tree = _tree()
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(tree.num_nodes, VOCAB, generator=gen) * 1.5, -1)
    want = expectation(tree.tokens, tree.parents, depths=tree.depths, probs=probs, num_steps=3)
    n, lengths, past = 20000, [], [0, 0, 0]
    for _ in range(n):
        res = sampling_walk(tree.tokens, tree.retrieve_next_token, next_sibling=tree.retrieve_next_sibling, probs=probs,
                            generator=gen)
        lengths.append(len(res.path))
        for d in range(1, len(res.path)):
            past[d - 1] += 1
    got = sum(lengths) / n
    sd = math.sqrt(sum((x - got) ** 2 for x in lengths) / (n - 1) / n)
    assert abs(got - want.accept_length) < 5 * sd + 1e-9, (got, want)
    for d in range(3):
        p = want.reach[d]
        assert abs(past[d] / n - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-9, (d, past[d] / n, p)
    # by hand: 1 + p0[2] + p0[5] + p0[2] p1[7] + p0[2] p1[2] + p0[2] p1[7] p3[1]
    p = probs
    hand = 1 + p[0, 2] + p[0, 5] + p[0, 2] * p[1, 7] + p[0, 2] * p[1, 2] + p[0, 2] * p[1, 7] * p[3, 1]
    assert want.accept_length == pytest.approx(float(hand), rel=1e-6)


def test_path_mass_rejects_a_parent_after_its_child():
    with pytest.raises(ValueError, match="does not come before"):
        path_mass([1, 2, 3], [-1, 2, 0], torch.full((3, 4), 0.25))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_step_expectation_from_records(pair, temperature):
    target, head = pair
    sampling = SamplingParams(temperature=temperature, seed=3)
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), sampling=sampling,
                 trace=True)
    eng.add_requests(random_prompts(2, VOCAB, 1), 10)
    seen = 0
    while not eng.done:
        for rec in eng.step_records():
            if rec.kind != "spec":
                continue
            e = step_expectation(rec, 3)
            probs = target_probs(rec.logits, sampling)
            assert e == expectation(rec.tree.tokens, rec.tree.parents, depths=rec.tree.depths, probs=probs, num_steps=3)
            if temperature == 0:  # deterministic walk: the expectation is what happened
                assert e.accept_length == pytest.approx(len(rec.result.path))
            seen += 1
    assert seen > 0
    with pytest.raises(ValueError, match="only speculative steps"):
        step_expectation(rec.__class__(**{**rec.__dict__, "kind": "decode", "tree": None}), 3)


def test_perfect_head_scores_are_target_path_probabilities(pair):
    target, _ = pair
    sampling = SamplingParams(temperature=1.0)
    seqs = random_prompts(3, VOCAB, 7, lengths=(9, 14, 6))
    points = [(0, 4), (1, 13), (2, 0), (1, 5)]
    spec = SpecConfig("eagle2", num_steps=3, topk=3, num_draft_tokens=8)
    got = perfect_head_trees(target, seqs, points, spec.num_steps, spec.topk, spec.num_draft_tokens, sampling,
                             chunk=3)
    assert len(got) == len(points)
    for (i, L), e in zip(points, got):
        # rebuild the same tree by brute force: best paths by the target's own probabilities
        context, root = seqs[i][:L], seqs[i][L]
        best = _brute_force_tree(target, context, root, spec, sampling)
        assert e.accept_length == pytest.approx(best, rel=1e-4)
        assert 1.0 <= e.accept_length <= spec.num_steps + 1
        assert e.reach == tuple(sorted(e.reach, reverse=True))


def _brute_force_tree(target, context, root, spec, sampling, num_layers=None):
    """The same EAGLE-2 procedure, each node's distribution from a fresh causal forward: the
    target's own (the perfect head: 1 + the kept scores), or with ``num_layers`` an early exit's
    at temperature 1 (then 1 + the kept paths' probabilities under the whole target)."""
    def dist(path):
        _, _, hidden = fresh_prefill(target, context + [root] + path)
        return target_probs(target.logits(hidden[-1:]), sampling)[0]

    if num_layers is not None:
        def draft(path):
            tokens = context + [root] + path
            kv = target.new_kv_pool(len(tokens))
            batch = extend_batch(tokens=[tokens], prefix_slots=[[]], new_slots=[list(range(len(tokens)))],
                                 device="cpu")
            return torch.softmax(target.logits(target(batch, kv, num_layers=num_layers)[-1:]), -1)[0]

        level = [([], 1.0)]
        cands = []
        for _ in range(spec.num_steps):
            new = []
            for path, score in level:
                vals, ids = draft(path).topk(spec.topk)
                new.extend((path + [int(t)], score * float(v)) for v, t in zip(vals, ids))
            cands.extend(new)
            level = sorted(new, key=lambda x: -x[1])[: spec.topk]
        kept = [p for p, _ in sorted(cands, key=lambda x: -x[1])[: spec.num_draft_tokens - 1]]
        worth = 1.0
        for path in kept:  # P(path) under the target: product of its own probabilities along it
            mass = 1.0
            for d in range(len(path)):
                mass *= float(dist(path[:d])[path[d]])
            worth += mass
        return worth

    level = [([], 1.0)]  # (path, score) of the frontier
    cands = []
    for _ in range(spec.num_steps):
        new = []
        for path, score in level:
            p = dist(path)
            vals, ids = p.topk(spec.topk)
            new.extend((path + [int(t)], score * float(v)) for v, t in zip(vals, ids))
        cands.extend(new)
        level = sorted(new, key=lambda x: -x[1])[: spec.topk]
    kept = sorted((s for _, s in cands), reverse=True)[: spec.num_draft_tokens - 1]
    return 1.0 + sum(kept)


def test_perfect_head_greedy_takes_every_level(pair):
    """Greedy: p is one-hot, so the perfect head's spine is always accepted: num_steps + 1."""
    target, _ = pair
    seq = random_prompts(1, VOCAB, 5, lengths=(8,))[0]
    spec = SpecConfig("eagle2", num_steps=4, topk=2, num_draft_tokens=5)
    (e,) = perfect_head_trees(target, [seq], [(0, 6)], spec.num_steps, spec.topk, spec.num_draft_tokens,
                              SamplingParams())
    assert e.accept_length == pytest.approx(spec.num_steps + 1)
    assert e.reach == (1.0,) * spec.num_steps


def test_perfect_head_rejects_a_point_outside_the_sequences(pair):
    target, _ = pair
    with pytest.raises(ValueError, match="no such sequence position"):
        perfect_head_trees(target, [[1, 2, 3]], [(0, 3)], 2, 2, 4, SamplingParams(temperature=1.0))


def test_the_expectation_derived_from_a_trace_is_the_records_and_the_app_shows_it(pair):
    from workbench.engine.trace import step_trace
    from workbench.viz.sampling import sampling_html

    target, head = pair
    lossy = SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6, accept_threshold_single=0.5, accept_threshold_acc=0.5)
    for sampling, spec, has in [(SamplingParams(temperature=1.0, seed=2), SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), True),
                                (SamplingParams(), SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), False),
                                (SamplingParams(temperature=1.0, seed=2), SpecConfig.linear(3, "leviathan"), False),
                                (SamplingParams(temperature=1.0, seed=2), lossy, False)]:
        eng = Engine(target, head, spec, sampling=sampling, trace=True)
        eng.add_requests(random_prompts(1, VOCAB, 4), 8)
        eng.step_records()  # prefill
        (rec,) = eng.step_records()
        t = step_trace(rec)
        got = trace_expectation(t)
        assert (got is not None) == has
        if has:
            e = step_expectation(rec, max(rec.tree.depths))
            assert got.accept_length == pytest.approx(e.accept_length, abs=1e-4)  # target_prob kept to 6 places
            assert got.reach == pytest.approx(e.reach, abs=1e-4)
            assert f"<b>{got.accept_length:.2f}</b> tokens on average" in sampling_html(t)


def test_early_exit_with_every_layer_is_the_perfect_head(pair):
    target, _ = pair
    sampling = SamplingParams(temperature=1.0)
    seqs = random_prompts(3, VOCAB, 11, lengths=(9, 12, 7))
    points = [(0, 4), (1, 11), (2, 2)]
    spec = SpecConfig("eagle2", num_steps=3, topk=3, num_draft_tokens=8)
    every = len(target.model.layers)
    got = early_exit_trees(target, seqs, [3, 5, 2], points, every, spec.num_steps, spec.topk,
                           spec.num_draft_tokens, sampling, chunk=2)
    want = perfect_head_trees(target, seqs, points, spec.num_steps, spec.topk, spec.num_draft_tokens, sampling)
    assert [e.accept_length for e in got.expectations] == pytest.approx([e.accept_length for e in want], rel=1e-4)
    assert got.agreement == 1.0 and got.positions == (9 - 3) + (12 - 5) + (7 - 2)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_early_exit_tree_matches_brute_force(pair, temperature):
    target, _ = pair
    sampling = SamplingParams(temperature=temperature)
    seqs = random_prompts(2, VOCAB, 12, lengths=(10, 8))
    points = [(0, 5), (1, 7), (0, 0)]
    spec = SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=5)
    got = early_exit_trees(target, seqs, [4, 4], points, 1, spec.num_steps, spec.topk, spec.num_draft_tokens,
                           sampling, chunk=2)
    for (i, L), e in zip(points, got.expectations):
        best = _brute_force_tree(target, seqs[i][:L], seqs[i][L], spec, sampling, num_layers=1)
        assert e.accept_length == pytest.approx(best, rel=1e-4)
        assert 1.0 <= e.accept_length <= spec.num_steps + 1


def test_early_exit_agreement_counts_answer_positions(pair):
    target, _ = pair
    seq = random_prompts(1, VOCAB, 13, lengths=(14,))[0]
    got = early_exit_trees(target, [seq], [6], [(0, 6)], 1, 2, 2, 3, SamplingParams())
    _, _, full = fresh_prefill(target, seq)
    kv = target.new_kv_pool(len(seq))
    short = target(extend_batch(tokens=[seq], prefix_slots=[[]], new_slots=[list(range(len(seq)))],
                                device="cpu"), kv, num_layers=1)
    rows = slice(5, len(seq) - 1)  # the positions whose next token is one of the answer's 8
    same = (target.logits(short[rows]).argmax(-1) == target.logits(full[rows]).argmax(-1)).float().mean()
    assert got.positions == 8 and got.agreement == pytest.approx(float(same))
    assert 0.0 <= got.agreement < 1.0  # one layer of a random model is not the whole of it


def test_forward_num_layers_is_the_residual_after_them_normed(pair):
    target, _ = pair
    seq = random_prompts(1, VOCAB, 14, lengths=(9,))[0]
    _, _, wide = fresh_prefill(target, seq, taps=(0,))
    kv = target.new_kv_pool(len(seq))
    short = target(extend_batch(tokens=[seq], prefix_slots=[[]], new_slots=[list(range(len(seq)))],
                                device="cpu"), kv, num_layers=1)
    hid = target.config.hidden_size
    assert torch.allclose(short, target.model.norm(wide[:, :hid]), atol=1e-6)
    with pytest.raises(ValueError, match="num_layers 0"):
        target(extend_batch(tokens=[seq], prefix_slots=[[]], new_slots=[list(range(len(seq)))],
                            device="cpu"), kv, num_layers=0)


def test_early_exit_rejects_bad_input(pair):
    target, _ = pair
    every = len(target.model.layers)
    with pytest.raises(ValueError, match=f"the target has {every} layers"):
        early_exit_trees(target, [[1, 2, 3]], [1], [(0, 1)], every + 1, 2, 2, 4, SamplingParams())
    with pytest.raises(ValueError, match="1 answer starts for 2 sequences"):
        early_exit_trees(target, [[1, 2, 3], [4, 5]], [1], [(0, 1)], 1, 2, 2, 4, SamplingParams())
    with pytest.raises(ValueError, match="no such sequence position"):
        early_exit_trees(target, [[1, 2, 3]], [1], [(0, 3)], 1, 2, 2, 4, SamplingParams())
