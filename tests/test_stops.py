"""Why a step stopped (engine/stops.py): each cause built on purpose, a property check that every
stop of random trees gets exactly the cause its facts give, and tiny engines where every
speculative step's record and trace carry one."""

import random
from types import SimpleNamespace

import pytest
import torch

from helpers import random_prompts, score_driven_candidates, tiny_pair
from workbench.engine.accept import greedy_walk, sampling_walk
from workbench.engine.config import SpecConfig
from workbench.engine.drafts.head import HeadSource
from workbench.engine.drafts.ngram import NgramSource
from workbench.engine.engine import Engine
from workbench.engine.ngram import ngram_candidates
from workbench.engine.sampling import SamplingParams
from workbench.engine.stops import CAUSES, REACH, children_of, stop_cause
from workbench.engine.trace import step_trace
from workbench.engine.tree import Candidates, build_tree, rerank, score_order
from workbench.metrics import requests_serving, serving_metrics, stop_counts, traces_serving, traces_stop_causes

HEAD, NGRAM = HeadSource(), NgramSource()
A, B, C, D, E, F, G, H, I, J = range(20, 30)  # score_driven_candidates' tokens, flat index = token - 20
OTHER = 5  # a token no candidate has


def walk(cands, num_draft_tokens, wants: dict[int, int]):
    """The score-driven tree under ``num_draft_tokens`` and the greedy walk where the target
    wants ``wants[tree node]`` after each node (OTHER elsewhere)."""
    kept, dropped = rerank(cands, num_draft_tokens)
    tree = build_tree(1, cands, kept, prefix_len=4, dropped=dropped)
    argmax = [wants.get(n, OTHER) for n in range(tree.num_nodes)]
    return tree, greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, argmax)


def node_of(tree, token):
    return tree.tokens.index(token)


def cause_of(cands, tree, result, *, rule="greedy", method="eagle2", source=HEAD, proposes=lambda t: True,
             num_steps=3, topk=2):
    spec = SimpleNamespace(method=method, num_steps=num_steps, topk=topk)  # the knobs stop_cause reads
    return stop_cause(cands=cands, tree=tree, result=result, rule=rule, method=method, spec=spec, source=source,
                      proposes=proposes)


def test_depth_at_the_last_level():
    c = score_driven_candidates()
    tree, res = walk(c, 11, {0: A})
    tree, res = walk(c, 11, {0: A, node_of(tree, A): C, node_of(tree, C): G})
    stop = cause_of(c, tree, res)
    assert (stop.cause, stop.depth, stop.catch) == ("depth", 3, {"num_steps": 4})


def test_budget_names_the_num_draft_tokens_that_keeps_the_token():
    c = score_driven_candidates()
    tree, _ = walk(c, 5, {})
    assert D not in tree.tokens  # 4 drafts kept: A, C, B, E; D (score .168) dropped
    tree, res = walk(c, 5, {0: A, node_of(tree, A): D})
    stop = cause_of(c, tree, res)
    assert stop.cause == "budget" and res.path == [0, node_of(tree, A)]
    assert stop.catch == {"num_draft_tokens": 7}  # D is 6th by score: 6 drafts + the root
    assert (stop.rank, stop.prob) == (None, .28)  # no kept top: its prob as proposed (these name no rank)
    kept, _ = rerank(c, 7)
    assert D - A in kept  # and 7 does keep it


def test_frontier_names_the_topk_that_expands_the_node():
    c = score_driven_candidates()
    tree, _ = walk(c, 11, {})
    tree, res = walk(c, 11, {0: A, node_of(tree, A): D})
    stop = cause_of(c, tree, res)
    assert stop.cause == "frontier" and stop.depth == 2 and res.stop == "leaf"
    assert stop.catch == {"topk": 3}  # depth 2 by score: C, E, D, F


def test_width_and_draft_by_the_rank_at_the_stop_node():
    c = score_driven_candidates()
    c.top[-1] = [(A, .6), (B, .3), (OTHER, .05), (7, .01)]
    tree, res = walk(c, 11, {0: OTHER})
    stop = cause_of(c, tree, res)
    assert (stop.cause, stop.rank, stop.prob, stop.catch) == ("width", 2, .05, {"topk": 3})
    c.top[-1] = [(A, .6), (B, .3)]  # the token beyond the kept top: the draft disagreed
    stop = cause_of(c, tree, res)
    assert (stop.cause, stop.rank, stop.prob, stop.catch) == ("draft", None, None, {})


def test_a_rank_beyond_reach_is_the_draft():
    c = score_driven_candidates()
    c.top[-1] = [(100 + r, .01) for r in range(REACH)] + [(OTHER, .001)]
    tree, res = walk(c, 11, {0: OTHER})
    assert cause_of(c, tree, res).cause == "draft"


def test_vocabulary_when_the_draft_cannot_propose_the_token():
    c = score_driven_candidates()
    tree, res = walk(c, 11, {0: OTHER})
    assert cause_of(c, tree, res, proposes=lambda t: t != OTHER).cause == "vocabulary"


def test_coin_under_sampling():
    c = score_driven_candidates()
    kept, dropped = rerank(c, 11)
    tree = build_tree(1, c, kept, prefix_len=4, dropped=dropped)
    probs = torch.zeros(tree.num_nodes, 32)
    probs[:, OTHER] = 1.0  # the target never takes a draft: every coin rejects
    res = sampling_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, probs,
                        torch.Generator().manual_seed(0))
    stop = cause_of(c, tree, res, rule="target-only")
    assert (stop.cause, stop.token, stop.node) == ("coin", OTHER, 0)


def test_static_tree_leaf_above_the_last_level_is_its_shape():
    c = score_driven_candidates()
    tree, _ = walk(c, 11, {})
    tree, res = walk(c, 11, {0: A, node_of(tree, A): D})
    stop = cause_of(c, tree, res, method="static")
    assert (stop.cause, stop.catch) == ("shape", {})


def test_ngram_no_match_and_continuation():
    empty = Candidates()
    tree = build_tree(1, empty, [], prefix_len=4)
    res = greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, [OTHER])
    assert cause_of(empty, tree, res, source=NGRAM).cause == "no match"
    c = ngram_candidates([1, 2, 3, 9, 1, 2], 1, max_match=2, num_steps=2, topk=2)  # "1 2" was followed by 3
    kept, dropped = rerank(c, 4)
    tree = build_tree(2, c, kept, prefix_len=6, dropped=dropped)
    res = greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, [4] * tree.num_nodes)
    stop = cause_of(c, tree, res, source=NGRAM, num_steps=2)
    assert (stop.cause, stop.rank, stop.prob) == ("continuation", None, None)


# ---- the property: every stop of a random tree has the one cause its facts give ------------------------
def random_step(rng: random.Random, vocab: int = 12):
    """A tree grown as ``draft.grow_tree`` grows one (random probabilities), a random budget, a
    random draft top at each expanded node, and a target that often agrees with the draft."""
    num_steps, topk = rng.randint(1, 4), rng.randint(1, 3)
    c, frontier, expanded = Candidates(), [-1], {-1}
    for depth in range(1, num_steps + 1):
        first = len(c.tokens)
        for parent in frontier:
            toks = rng.sample(range(vocab), topk + 2)
            c.top[parent] = [(t, 1 / (r + 2)) for r, t in enumerate(toks)]
            base = 1.0 if parent == -1 else c.scores[parent]
            for r, t in enumerate(toks[:topk]):
                p = rng.uniform(0.05, 0.9) / (r + 1)
                c.add(t, p, score=base * p, parent=parent, depth=depth, rank=r)
        level = list(range(first, len(c.tokens)))
        frontier = [level[j] for j in score_order([c.scores[i] for i in level]).tolist()[:topk]]
        expanded |= set(frontier) if depth < num_steps else set()
    kept, dropped = rerank(c, rng.randint(2, len(c.tokens) + 1))
    tree = build_tree(0, c, kept, prefix_len=3, dropped=dropped)
    return c, tree, expanded, num_steps, topk


def independent_cause(c, tree, res, expanded, num_steps, sampled, proposes) -> list[str]:
    """Every cause whose definition (docs/design.md) holds, read off the walk's moves and the
    growth's frontiers, not off the module's own facts: exactly one must."""
    s = res.path[-1]
    cs, t = tree.candidate_index[s], res.bonus
    proposed = [i for i, p in enumerate(c.parents) if p == cs]
    rejected = any(m.node == s and not m.match for m in res.moves)
    dropped_hit = any(c.tokens[i] == t and i not in tree.candidate_index for i in proposed)
    rank = next((r for r, (tok, _) in enumerate(c.top.get(cs, [])) if tok == t), None)
    base = not (sampled and rejected) and not dropped_hit and proposes(t)
    holds = {
        "coin": sampled and rejected,
        "budget": not (sampled and rejected) and dropped_hit,
        "vocabulary": not (sampled and rejected) and not dropped_hit and not proposes(t),
        "depth": base and tree.depths[s] == num_steps,
        "frontier": base and tree.depths[s] < num_steps and cs not in expanded,
        "width": base and cs in expanded and rank is not None and rank < REACH,
        "draft": base and cs in expanded and (rank is None or rank >= REACH),
    }
    return [k for k, v in holds.items() if v]


def test_every_random_stop_has_exactly_the_cause_its_facts_give():
    rng, seen = random.Random(0), set()
    for _ in range(600):
        c, tree, expanded, num_steps, topk = random_step(rng)
        sampled = rng.random() < 0.3
        hot = set(rng.sample(range(12), 10))
        if sampled:
            probs = torch.rand(tree.num_nodes, 12) ** 4
            res = sampling_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, probs,
                                torch.Generator().manual_seed(rng.randint(0, 999)))
        else:
            argmax = [rng.choice([t for t, _ in c.top.get(cs, [])] or [0]) if rng.random() < 0.8 else rng.randrange(12)
                      for cs in tree.candidate_index]
            res = greedy_walk(tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling, argmax)
        stop = cause_of(c, tree, res, rule="target-only" if sampled else "greedy", proposes=hot.__contains__,
                        num_steps=num_steps, topk=topk)
        assert stop.cause in CAUSES
        assert independent_cause(c, tree, res, expanded, num_steps, sampled, hot.__contains__) == [stop.cause]
        assert stop.node == res.path[-1] and stop.token == res.bonus
        seen.add(stop.cause)
        if stop.cause == "budget":  # the named budget keeps the token's candidate
            hit = next(i for i in children_of(c, stop.candidate) if c.tokens[i] == stop.token)
            assert hit in rerank(c, stop.catch["num_draft_tokens"])[0]
            assert hit not in rerank(c, stop.catch["num_draft_tokens"] - 1)[0]
    assert seen == {"coin", "budget", "vocabulary", "depth", "frontier", "width", "draft"}  # each was exercised


# ---- tiny engines: every speculative step's record says why ----------------------------------------------
@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny_stops"))


@pytest.mark.parametrize("spec, sampling", [
    (SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=5), SamplingParams()),
    (SpecConfig("eagle2", num_steps=2, topk=3, num_draft_tokens=6), SamplingParams(temperature=1.0, seed=3)),
    (SpecConfig.static(6), SamplingParams()),
    (SpecConfig("eagle2", num_steps=2, topk=2, num_draft_tokens=4, draft=NGRAM), SamplingParams()),
])
def test_every_spec_step_of_a_tiny_engine_has_a_cause(pair, spec, sampling):
    target, head = pair
    eng = Engine(target, head if not spec.draft.model_free else None, spec, sampling=sampling, trace=True)
    eng.add_requests(random_prompts(2, 16, seed=5), 12)
    spec_steps = 0
    while not eng.done:
        for rec in eng.step_records():
            if rec.kind != "spec":
                assert rec.stop is None
                continue
            spec_steps += 1
            assert rec.stop.cause in CAUSES and rec.stop.node == rec.result.path[-1]
            assert rec.stop.token == rec.result.bonus
            if rec.stop.cause == "coin":
                assert rec.rule != "greedy"
            if not spec.draft.model_free:  # a neural draft kept its top at every node it ran
                assert -1 in rec.candidates.top and rec.stop.cause not in ("no match", "continuation")
            trace = step_trace(rec)
            assert trace["stop"]["cause"] == rec.stop.cause and trace["stop"]["token"] == rec.result.bonus
    assert spec_steps > 0


def test_without_tracing_the_draft_keeps_no_top(pair):
    target, head = pair
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=2, topk=2, num_draft_tokens=4))
    eng.add_requests(random_prompts(1, 16, seed=5), 4)
    phases, grow = [], eng.drafter.grow

    def recorded(*args, **kwargs):
        phases.append(grow(*args, **kwargs))
        return phases[-1]

    eng.drafter.grow = recorded
    eng.run()
    assert phases and all(p.candidates[0].top == {} and p.candidates[0].tokens for p in phases)


# ---- the serving engines' metrics, recomputed from the per-step records ----------------------------------
def test_serving_metrics_follow_vllms_definitions():
    m = serving_metrics([2, 0, 1, 0], [7, 7, 7, 0], positions=3)  # the last step drafted nothing: not counted
    assert (m.num_drafts, m.num_draft_tokens, m.num_accepted_tokens) == (3, 21, 3)
    assert m.mean_acceptance_length == 2.0 and m.draft_acceptance_rate == pytest.approx(3 / 21)
    assert m.acceptance_histogram == [1, 1, 1, 0] and m.per_position == pytest.approx([2 / 3, 1 / 3, 0])
    assert serving_metrics([0], [0]) is None
    with pytest.raises(ValueError, match="one of each per step"):
        serving_metrics([1], [])


def test_a_run_s_metrics_and_stop_counts_recomputed_from_its_records(pair):
    target, head = pair
    spec = SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)
    eng = Engine(target, head, spec, trace=True)
    eng.add_requests(random_prompts(2, 16, seed=7), 16)
    records = []
    while not eng.done:
        records += eng.step_records()
    spec_recs = [r for r in records if r.kind == "spec"]
    traces = [step_trace(r) for r in records]
    accepted = [len(r.result.path) - 1 for r in spec_recs]
    drafted = [r.tree.num_nodes - 1 for r in spec_recs]
    from_traces, from_requests = traces_serving(traces), requests_serving(eng.requests, positions=3)
    for m in (from_traces, from_requests):
        assert m.num_drafts == sum(d > 0 for d in drafted)
        assert m.num_accepted_tokens == sum(accepted) and m.num_draft_tokens == sum(drafted)
        assert m.mean_acceptance_length == pytest.approx(1 + sum(accepted) / m.num_drafts)
        assert m.per_position[0] == pytest.approx(sum(a >= 1 for a in accepted) / m.num_drafts)
        assert sum(m.acceptance_histogram) == m.num_drafts
    counts = traces_stop_causes(traces)
    assert sum(counts.values()) == len(spec_recs)  # every spec step counted once
    assert counts == stop_counts([c for r in eng.requests for c in r.stop_causes])


def test_bench_summary_and_report_carry_the_metrics_and_the_stop_causes():
    from workbench.bench.report import serving_table, stop_table
    from workbench.measure.metrics import serving_summary

    recs = [{"drafts_accepted": [[2, 0]], "drafts_verified": [[5, 5]], "stop_causes": [["depth", "width"]]},
            {"drafts_accepted": [[1]], "drafts_verified": [[5]], "stop_causes": [["width"]]}]
    s = serving_summary(recs, num_steps=2)
    assert s["stop_causes"] == {"width": 2, "depth": 1}
    assert s["vllm"]["num_drafts"] == 3 and s["vllm"]["draft_acceptance_rate"] == pytest.approx(3 / 15)
    assert serving_summary([{"drafts_accepted": [[1]]}], 2) == {}  # a journal older than the counts
    result = {"summary": {"eagle2": {"tau": 2.0, **s}, "vanilla": {}}}
    table = stop_table(result)
    assert "| `eagle2` | 3 | 2 | 1 |" in table and "vanilla" not in table
    assert "| `eagle2` | 2.00 | 2.00 | 0.20 |" in serving_table(result)


def test_generate_json_prints_vllms_metrics_and_with_a_trace_the_stop_causes(tmp_path, capsys):
    import json

    from workbench.testing.tiny import make_tiny_app_model
    from workbench.cli import main

    tiny = make_tiny_app_model(tmp_path / "tiny")
    trace = tmp_path / "trace.jsonl"
    assert main(["generate", "--target", str(tiny), "--draft", "random", "--prompt", "the cat sat on the mat",
                 "--max-new-tokens", "10", "--method", "eagle2", "--num-steps", "3", "--topk", "2",
                 "--num-draft-tokens", "5", "--json", "--trace", str(trace)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    v = out["vllm_metrics"]
    assert v["per_step_accepted"] == out["drafts_accepted"]  # every step drafted: the head always proposes
    assert v["num_drafts"] == len(out["accept_lengths"]) and len(v["per_position_acceptance"]) == 3
    assert v["mean_acceptance_length"] == pytest.approx(1 + sum(out["drafts_accepted"]) / v["num_drafts"], abs=1e-4)
    assert out["stop_causes"] == traces_stop_causes(steps)
    assert sum(out["stop_causes"].values()) == v["num_drafts"]


# ---- what the pages say: one sentence per step, the stop marked, the counts per run ----------------------
def traced_run(pair, spec, sampling=SamplingParams(), n=16):
    target, head = pair
    eng = Engine(target, head if not spec.draft.model_free else None, spec, sampling=sampling, trace=True)
    eng.add_requests(random_prompts(1, 16, seed=11), n)
    traces = []
    while not eng.done:
        traces += eng.step()
    return traces


def test_every_speculative_step_gets_one_sentence_naming_its_cause(pair):
    from workbench.app.guide import miss_line, stop_line

    traces = traced_run(pair, SpecConfig("eagle2", num_steps=2, topk=2, num_draft_tokens=4))
    spec = [t for t in traces if t["kind"] == "spec"]
    assert any(t["accept"]["accepted"] for t in spec)  # partly accepted steps are among them
    for t in spec:
        line = stop_line(t)
        n = len(t["accept"]["accepted"])
        assert line.startswith(f"Step {t['step']} accepted {n} draft" if n else f"Nothing accepted at step {t['step']}")
        assert line.count(". ") == 0 and line.endswith(".")  # one sentence
        assert f"`{t['stop']['text']}`" in line
        if t["stop"]["rank"] is not None:
            assert f"#{t['stop']['rank'] + 1} with probability {t['stop']['prob']:.3g}" in line
        assert miss_line(t) == ("" if n else line)
    assert stop_line(traces[0]) == ""  # the prefill: no walk


@pytest.mark.parametrize("cause, catch, words", [
    ("depth", {"num_steps": 3}, "on the tree's last level, with nothing drafted below it; num_steps = 3 would"),
    ("depth", {}, "on the tree's last level, with nothing drafted below it."),
    ("budget", {"num_draft_tokens": 9}, "the rerank dropped it (num_draft_tokens = 9 would have kept it)"),
    ("frontier", {"topk": 3}, "not among the topk best nodes of its level, so the draft never ran there (topk = 3"),
    ("width", {"topk": 4}, "below the 2 it proposed (topk = 4 would have proposed it)"),
    ("width", {}, "below the 2 it proposed."),  # a static shape: no topk to change
    ("draft", {}, "which the draft did not guess (it guessed"),
    ("vocabulary", {}, "not among the draft's hot draft tokens"),
    ("shape", {}, "the static tree's shape has no node below"),
    ("no match", {}, "no earlier occurrence continuing after"),
    ("continuation", {}, "the earlier text went on differently (it guessed"),
])
def test_each_cause_has_its_words(pair, cause, catch, words):
    from workbench.app.guide import stop_line

    t = next(t for t in traced_run(pair, SpecConfig("eagle2", num_steps=2, topk=2, num_draft_tokens=4), n=6)
             if t["kind"] == "spec")
    line = stop_line({**t, "stop": {**t["stop"], "cause": cause, "catch": catch, "rank": 3, "prob": 0.0421}})
    assert words in line
    if cause in ("width", "draft", "budget"):
        assert "ranked it #4 with probability 0.0421" in line
    assert "()" not in line and "( " not in line  # a cause without a change says none


def test_a_sampled_step_names_the_rule_whose_coins_rejected(pair):
    from workbench.app.guide import stop_line

    traces = traced_run(pair, SpecConfig("eagle2", num_steps=2, topk=2, num_draft_tokens=4),
                        SamplingParams(temperature=1.0, seed=2), n=24)
    coins = [t for t in traces if t.get("stop", {}).get("cause") == "coin"]
    assert coins and all("(target-only rule)" in stop_line(t) for t in coins)


def test_the_tree_rings_the_stop_node_and_compare_counts_every_step(pair):
    from workbench.viz.compare import stops_html
    from workbench.viz.tree import tree_figure

    traces = traced_run(pair, SpecConfig("eagle2", num_steps=2, topk=2, num_draft_tokens=4))
    t = next(t for t in traces if t["kind"] == "spec")
    ring = next(d for d in tree_figure(t).data if d.meta == "stop")
    assert ring.name == f"stop: {t['stop']['cause']}"
    runs = {"eagle2": {"traces": traces}, "vanilla": {"traces": [x for x in traces if x["kind"] == "prefill"]}}
    html_out = stops_html(runs)
    steps = sum(x["kind"] == "spec" for x in traces)
    assert f"data-method='eagle2' data-steps='{steps}'" in html_out and "data-method='vanilla'" not in html_out
    counts = traces_stop_causes(traces)
    assert sum(counts.values()) == steps
    assert stops_html({"vanilla": runs["vanilla"]}) == ""


def test_a_head_with_hot_draft_tokens_proposes_only_those(pair):
    target, head = pair
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=2, topk=2, num_draft_tokens=4), trace=True)
    head.set_hot_tokens(torch.tensor([3, 4, 5, 6, 7, 8]))
    try:
        assert eng.drafter.proposes(5) and not eng.drafter.proposes(9)
        eng.add_requests(random_prompts(1, 16, seed=3), 12)
        records = []
        while not eng.done:
            records += eng.step_records()
        for rec in (r for r in records if r.kind == "spec"):
            hot = rec.result.bonus in range(3, 9)
            assert (rec.stop.cause == "vocabulary") == (not hot and rec.stop.cause not in ("coin", "budget"))
        assert any(r.stop.cause == "vocabulary" for r in records if r.kind == "spec")
    finally:
        head.set_hot_tokens(None)
