"""The engine's promises on tiny random models: greedy output is unchanged by speculation,
the KV cache always equals a fresh prefill, no slot leaks, bad knobs get clear errors."""

import pytest
import torch

from helpers import alone_outputs, fresh_prefill, random_prompts, score_driven_candidates, tiny_pair
from workbench.attention.batch import extend_batch
from workbench.engine.accept import AcceptResult
from workbench.engine.config import SpecConfig, check_context
from workbench.engine.engine import Engine
from workbench.engine.request import Request
from workbench.engine.trace import step_trace
from workbench.engine.tree import build_tree
from workbench.models.draft import random_head
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint

SHAPES = [SpecConfig.linear(1), SpecConfig.linear(3), SpecConfig.linear(6),
          SpecConfig("eagle2", num_steps=1, topk=4, num_draft_tokens=5), SpecConfig("eagle2", num_steps=2, topk=2, num_draft_tokens=2), SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6),
          SpecConfig("eagle2", num_steps=4, topk=4, num_draft_tokens=16), SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8), SpecConfig("eagle2", num_steps=6, topk=10, num_draft_tokens=64),
          SpecConfig("eagle2", num_steps=2, topk=10, num_draft_tokens=30),
          SpecConfig.static(8), SpecConfig.static(26), SpecConfig.static(60),
          SpecConfig.static(tree=[[0], [1], [0, 0], [0, 1], [0, 0, 0]]),
          SpecConfig.static(tree=[[2], [2, 5], [2, 5, 0], [2, 5, 0, 3]])]  # a chain off the top ranks


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="module")
def pair(tiny_dir):
    return tiny_pair(tiny_dir)


def decode(target, head, spec, prompts, n=24, check=False):
    eng = Engine(target, head, spec)
    eng.add_requests(prompts, n)
    while not eng.done:
        eng.step()
        if check:
            eng.check_integrity()
    return eng


def test_vanilla_matches_transformers_generate(pair, tiny_dir):
    from transformers import AutoModelForCausalLM

    target, _ = pair
    hf = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()  # the checkpoint ``pair`` loaded
    prompts = random_prompts(4, 16, seed=3)
    ours = decode(target, None, SpecConfig("vanilla"), prompts)
    for p, r in zip(prompts, ours.requests):
        ref = hf.generate(torch.tensor([p]), max_new_tokens=24, min_new_tokens=24, do_sample=False,
                          eos_token_id=None, pad_token_id=0)[0, len(p):].tolist()
        assert r.output_ids == ref


@pytest.fixture(scope="module")
def plain_outputs(pair):
    """{B: (prompts, plain greedy outputs)} for B = 1 and a ragged batch of 4, decoded once for
    every tree shape."""
    target, _ = pair
    runs = {}
    for bsz in (1, 4):
        prompts = random_prompts(bsz, 16, seed=bsz)
        runs[bsz] = prompts, [r.output_ids for r in decode(target, None, SpecConfig("vanilla"), prompts).requests]
    return runs


@pytest.mark.parametrize("spec", SHAPES, ids=lambda s: s.describe())
def test_greedy_speculation_is_lossless(pair, plain_outputs, spec):
    target, head = pair
    for prompts, plain in plain_outputs.values():
        spec_run = decode(target, head, spec, prompts, check=True)
        for want, got in zip(plain, spec_run.requests):
            assert got.output_ids == want
            assert all(1 <= n <= spec.num_steps + 1 for n in got.accept_lengths)


def test_drafts_really_get_accepted(pair):
    """Guards the losslessness tests against passing only because nothing is ever accepted."""
    target, head = pair
    eng = decode(target, head, SpecConfig("eagle2", num_steps=4, topk=4, num_draft_tokens=16), random_prompts(4, 16, seed=9), n=40)
    lengths = [n for r in eng.requests for n in r.accept_lengths]
    assert max(lengths) >= 3 and sum(lengths) / len(lengths) > 1.2


def test_kv_equals_fresh_prefill_after_50_steps(pair):
    target, head = pair
    prompts = random_prompts(2, 16, seed=5)
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6))
    eng.add_requests(prompts, 400)
    for _ in range(50):
        eng.step()
        a = eng.table.allocator
        assert a.num_used + a.num_free == a.num_slots
        eng.check_integrity()
    for r in eng.requests:
        seq = r.prompt_ids + r.output_ids[:-1]  # the last output (the next root) has no KV yet
        slots = eng.table.slots(r.rid)
        assert len(slots) == len(seq)
        kv, fresh_slots, hidden = fresh_prefill(target, seq)
        for layer in range(target.config.num_layers):
            torch.testing.assert_close(eng.target_kv.k[layer][slots], kv.k[layer][fresh_slots], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(eng.target_kv.v[layer][slots], kv.v[layer][fresh_slots], atol=1e-4, rtol=1e-4)
        # Draft KV: pairs (f_t, x_{t+1}) for every committed t, from a fresh target prefill,
        # except the last step's root + accepted drafts: their pairs are the next draft extend.
        dkv = head.new_kv_pool(len(seq))
        pairs = seq[1:] + [r.output_ids[-1]]
        head(hidden, extend_batch(tokens=[pairs], prefix_slots=[[]], new_slots=[fresh_slots], device="cpu"), dkv)
        assert r.pending_tokens == pairs[len(seq) - len(r.pending_tokens):]
        done = len(seq) - len(r.pending_tokens)
        ours, fresh = slots[:done], fresh_slots[:done]
        torch.testing.assert_close(eng.draft_kv.k[0][ours], dkv.k[0][fresh], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(eng.draft_kv.v[0][ours], dkv.v[0][fresh], atol=1e-4, rtol=1e-4)


def test_commit_of_the_score_driven_example(pair):
    """docs/design.md §5 example: accept B, E, bonus X; their rows move to the step's 2nd and 3rd
    slots; keep the first three (r, B, E); free the rest; L 10 -> 13."""
    target, head = pair
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6))
    eng.add_requests([list(range(3, 13))], 20)  # L = 10 once prefilled
    eng.step()
    r = eng.requests[0]
    tree = build_tree(r.root, score_driven_candidates(), [0, 1, 2, 4, 6], prefix_len=10)
    slots = eng.table.allocator.alloc(6)
    res = AcceptResult(path=[0, 2, 4], bonus=5, stop="leaf")
    hidden = torch.arange(6.0)[:, None].expand(6, target.config.hidden_size)
    c = eng._commit(r, tree, res=res, slots=slots, hidden=hidden)
    assert c.kept == slots[:3] and c.freed == slots[3:]
    assert c.moved == [(slots[2], slots[1]), (slots[4], slots[2])]  # B (node 2) and E (node 4)
    assert eng.table.slots(r.rid)[10:] == slots[:3]
    emitted = c.emitted
    assert eng.table.length(r.rid) == 13
    assert emitted == [21, 24, 5] and r.root == 5
    assert r.pending_tokens == [21, 24, 5]  # next extend: tokens B, E, X at positions 10, 11, 12
    assert r.pending_features[:, 0].tolist() == [0.0, 2.0, 4.0]  # with f(r), f(B), f(E)
    eng.check_integrity()


def test_stop_token_mid_step_truncates():
    r = Request(0, [1, 2], max_new_tokens=10)
    assert r.emit([5, 2, 7], ["accepted", "accepted", "bonus"], stop_ids={2}) == [5, 2]
    assert r.finish_reason == "stop" and r.output_ids == [5, 2]
    r = Request(1, [1], max_new_tokens=2)
    assert r.emit([5, 6, 7], ["accepted"] * 3, stop_ids=set()) == [5, 6] and r.finish_reason == "length"


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="eagle2", num_steps=0), "num_steps must be in"),
    (dict(method="eagle2", topk=0), "topk must be in"),
    (dict(method="eagle2", num_steps=2, topk=2, num_draft_tokens=8), "at most 7 nodes"),
    (dict(method="eagle2", num_draft_tokens=1), "num_draft_tokens must be in"),
    (dict(method="beam"), "method 'beam' is unknown"),
    (dict(method="linear", num_steps=3, topk=2, num_draft_tokens=4), "linear is the chain: topk must be 1"),
    (dict(method="eagle2", topk=2, chain_rule="leviathan"), "needs method linear"),
    (dict(method="static"), "method static needs a tree shape"),
    (dict(method="static", num_steps=1, topk=1, num_draft_tokens=3, tree=((0,),)), "the root = 2 verify tokens"),
    (dict(method="static", num_steps=2, topk=1, num_draft_tokens=2, tree=((0,),)), "leave num_steps and topk out"),
    (dict(method="eagle2", tree=((0,),)), "use it with method static, not eagle2"),
])
def test_bad_knobs_get_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SpecConfig(**kwargs)


def test_mismatched_head_is_refused(pair, tmp_path):
    target, _ = pair
    other = load_target(make_tiny_checkpoint(tmp_path / "wide", hidden_size=32, vocab_size=16))
    with pytest.raises(ValueError, match="hidden size 32 does not fit the target's 64"):
        random_head(other).attach(target)
    other = load_target(make_tiny_checkpoint(tmp_path / "vocab", vocab_size=20))
    with pytest.raises(ValueError, match="vocabulary 20 does not fit"):
        random_head(other).attach(target)


def test_engine_rejects_bad_requests(pair):
    target, head = pair
    eng = Engine(target, head, SpecConfig())
    with pytest.raises(ValueError, match="at least one token"):
        eng.add_requests([[]], 8)
    with pytest.raises(ValueError, match="exceeds the model's context"):
        eng.add_requests([[3] * 1020], 8)
    with pytest.raises(ValueError, match="needs a draft head"):
        Engine(target, None, SpecConfig("eagle2"))


@pytest.mark.parametrize("kwargs, expected", [
    (dict(), SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)),
    (dict(method="linear", num_steps=3), SpecConfig.linear(3)),
    (dict(method="linear", num_steps=3, topk=1, num_draft_tokens=4), SpecConfig.linear(3)),
    (dict(method="vanilla", num_steps=99), SpecConfig("vanilla")),
    (dict(num_steps=3, topk=2), SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=8)),
    (dict(method="static"), SpecConfig.static(8)),
    (dict(method="static", num_draft_tokens=16), SpecConfig.static(16)),
    (dict(method="static", tree="[[0],[1],[0,0]]"), SpecConfig.static(tree=[[0], [1], [0, 0]])),
    (dict(method="static", num_draft_tokens=4, tree=[[0, 0], [0], [1]]), SpecConfig.static(4, [[0], [1], [0, 0]])),
    (dict(method="eagle2", tree="  "), SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8)),  # an empty tree box is no tree
])
def test_from_knobs_fills_the_defaults(kwargs, expected):
    assert SpecConfig.from_knobs(**kwargs) == expected


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="linear", topk=2), "linear is the chain: topk must be 1"),
    (dict(method="linear", num_steps=3, num_draft_tokens=8), "leave num_draft_tokens out"),
    (dict(method="beam"), "method 'beam' is unknown"),
    (dict(num_steps=0), "num_steps must be in"),
    (dict(method="static", topk=3), "leave num_steps and topk out"),
    (dict(method="static", chain_rule="leviathan"), "needs method linear"),
    (dict(method="static", num_draft_tokens=5, tree="[[0],[1]]"), "the root = 3 verify tokens"),
    (dict(method="static", tree="[[0],[1,0]]"), "tree path \\[1, 0\\] has no parent"),
    (dict(method="static", tree="[[0"), "tree is not valid JSON"),
    (dict(method="eagle2", tree="[[0]]"), "use it with method static, not eagle2"),
])
def test_from_knobs_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SpecConfig.from_knobs(**kwargs)


def test_context_check_reserves_the_verify_block():
    check_context(SpecConfig("vanilla"), 100, 89, 10)  # 89 + 10 + 1 fits
    with pytest.raises(ValueError, match="exceeds the model's context of 100 \\(at most 82 prompt tokens fit\\)"):
        check_context(SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8), 100, 83, 10)


def test_step_records_carry_what_the_walk_decided(pair):
    """The record holds the stop reason and which pointer each move read; the trace copies them."""
    target, head = pair
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=3, num_draft_tokens=8), trace=True)
    eng.add_requests(random_prompts(2, 12, seed=3), 16)
    seen = set()
    while not eng.done:
        for rec in eng.step_records():
            trace = step_trace(rec)
            assert trace["L"] == rec.kv.committed_before and trace["emitted"] == rec.emitted
            if rec.kind != "spec":
                continue
            tree, res = rec.tree, rec.result
            assert trace["accept"]["stop"] == res.stop and [m["read"] for m in trace["accept"]["moves"]] == \
                [m.read for m in res.moves]
            last = res.path[-1]
            children = [m for m in res.moves if m.node == last]
            if res.stop == "leaf":
                assert tree.retrieve_next_token[last] == -1 and not children
            else:
                assert children and not any(m.match for m in children)
            for m in res.moves:
                pointer = tree.retrieve_next_token if m.via == "next_token" else tree.retrieve_next_sibling
                assert pointer[m.read] == m.child
            for lv in rec.levels:  # draft levels run one position behind the target's nodes
                assert lv.position == rec.kv.committed_before + lv.level - 1
            seen.add(res.stop)
    assert seen  # at least one spec step was recorded


def test_debug_checks_catch_misplaced_pending_pairs(pair):
    target, head = pair
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=2, topk=2, num_draft_tokens=4), debug=True)
    eng.add_requests(random_prompts(1, 8, seed=1), 8)
    eng.step()
    r, L = eng.requests[0], eng.table.length(0)
    r.draft_length += 1  # as if the pending pairs did not sit in the last committed slots
    with pytest.raises(AssertionError, match=f"draft KV covers 1 positions \\+ {L} pending pairs, but {L} are"):
        eng.step()


# ---- the method grammar: one parser, one namer ------------------------------------------------------
@pytest.mark.parametrize("name", ["vanilla", "linear:1", "linear:5", "eagle2:8/5/4", "eagle2:60/6/10", "static:8",
                                  "eagle2:8/5/4@ngram:1-12", "linear:4@exit:24", "static:12@exit:3"])
def test_method_names_parse_and_print_back(name):
    from workbench.engine.config import parse_spec

    spec = parse_spec(name)
    assert spec.name == name
    assert parse_spec(spec.name) == spec


def test_a_parsed_name_is_the_config_the_knobs_give():
    from workbench.engine.config import parse_spec

    assert parse_spec("eagle2:60/6/10") == SpecConfig.from_knobs("eagle2", num_steps=6, topk=10, num_draft_tokens=60)
    assert parse_spec("linear:3") == SpecConfig.linear(3)


@pytest.mark.parametrize("name, message", [
    ("eagle2:8/5", "unknown method"), ("eagle2:a/b/c", "unknown method"), ("beam:4", "unknown method"),
    ("linear:0", "num_steps"), ("vanilla@ngram", "only a speculative method"), ("eagle2:8/5/4@ngarm", "ngarm"),
    ("eagle2:200/5/4", "num_draft_tokens")])
def test_bad_method_names_say_what_is_wrong(name, message):
    from workbench.engine.config import parse_spec

    with pytest.raises(ValueError, match=message):
        parse_spec(name)


def test_configs_without_a_short_name_say_so():
    lossy = SpecConfig.from_knobs("eagle2", accept_threshold_acc=0.5)
    with pytest.raises(ValueError, match="no short name"):
        lossy.name


def test_a_lone_request_keeps_one_run_of_slots_and_its_moved_rows(pair):
    """A tree's accepted nodes verified off the front of the step's slots have their rows moved
    there: a lone request's table stays one ascending run, which attention reads as a view, and
    its cache still equals a fresh prefill."""
    target, head = pair
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=4, topk=4, num_draft_tokens=16), trace=True)
    (r,) = eng.add_requests(random_prompts(1, 16, seed=9), 400)
    moved = 0
    for _ in range(30):  # not to the end: a finished request's slots leave the table
        for t in eng.step():
            moved += len(t["kv"]["target"].get("moved", []))
            kept, written = t["kv"]["target"]["kept"], t["kv"]["target"]["written"]
            assert kept == written[: len(kept)]
        slots = eng.table.slots(r.rid)
        assert slots == list(range(slots[0], slots[0] + len(slots))), "the cache left one run of slots"
        eng.check_integrity()
    assert moved > 0, "no accepted node was off the front: the test shows nothing"
    seq = r.prompt_ids + r.output_ids[:-1]
    kv, fresh_slots, _ = fresh_prefill(target, seq)
    slots = eng.table.slots(r.rid)
    for layer in range(target.config.num_layers):
        torch.testing.assert_close(eng.target_kv.k[layer][slots], kv.k[layer][fresh_slots], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(eng.target_kv.v[layer][slots], kv.v[layer][fresh_slots], atol=1e-4, rtol=1e-4)


def test_requests_decoding_together_each_keep_one_run_of_slots(pair):
    """Requests that come and go in one pool each hold a run of slots set aside at admission
    (``SlotAllocator.reserve``): every running request's cache stays one ascending run through
    plain and speculative steps, so attention reads each as a view in a batch too, and the
    outputs equal plain decoding's."""
    target, head = pair
    prompts = random_prompts(5, 16, seed=3)
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), kv_slots=400)
    reqs = [eng.submit(p, 20) for p in prompts[:3]]
    steps = 0
    while not eng.done:
        eng.step()
        steps += 1
        if steps == 4:  # two more arrive while the first three run
            reqs += [eng.submit(p, 20) for p in prompts[3:]]
        for r in eng.running:
            if r.rid in eng.table.tables:
                slots = eng.table.slots(r.rid)
                assert slots == list(range(slots[0], slots[0] + len(slots))), f"request {r.rid} left one run"
        eng.check_integrity()
    assert steps > 8 and len({len(r.prompt_ids) for r in reqs}) > 1
    assert [r.output_ids for r in reqs] == alone_outputs(target, prompts, 20)
