"""τ counts what a verify step emitted (docs/design.md §6): a step that a stop token or
``max_new_tokens`` cuts counts the tokens it appended, not the n + 1 its walk accepted, so a
request's accept lengths add up to its output less the prefill's token and τ = (tokens - 1) /
(verify steps). The walk's own count stays apart: ``Request.drafts_accepted`` and a trace's
``accept.path``. Checked on the engine, its traces and ``generate --json``, on tiny random models."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from helpers import random_prompts, tiny_pair
from workbench.engine.config import SpecConfig
from workbench.engine.drafts.ngram import NgramSource
from workbench.engine.engine import Engine
from workbench.metrics import requests_tau, tau, traces_tau

TREE = SpecConfig("eagle2", num_steps=4, topk=4, num_draft_tokens=16)  # over 16 tokens: steps that accept 1-3 drafts are common
SPECS = [SpecConfig("vanilla"), SpecConfig.linear(3), TREE, SpecConfig.static(8), SpecConfig(draft=NgramSource())]
PROMPTS = random_prompts(4, 16, seed=9)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny-tau"))


def decode(pair, spec, prompts, max_new, stop_ids=()):
    """Every request of one traced batch, and each one's verify-step traces (prefill left out)."""
    target, head = pair
    eng = Engine(target, head if spec.draft.needs.head else None, spec, stop_ids=stop_ids, trace=True)
    eng.add_requests(prompts, max_new)
    traces = []
    while not eng.done:
        traces.extend(eng.step())
    return [(r, [t for t in traces if t["request"] == r.rid and t["kind"] != "prefill"]) for r in eng.requests]


def cut(req) -> bool:
    """The output ended inside the last step: it emitted fewer tokens than its walk accepted."""
    return bool(req.accept_lengths) and req.accept_lengths[-1] < req.drafts_accepted[-1] + 1


def check_counts(req, steps: list[dict]) -> None:
    """Accept lengths are tokens emitted, one per verify step; the walk's count stays beside them."""
    assert sum(req.accept_lengths) == len(req.output_ids) - 1  # the prefill emits the first token
    assert len(req.accept_lengths) == len(req.drafts_accepted) == len(steps) == req.target_forwards - 1
    assert req.accept_lengths == [t["accept_length"] for t in steps] == [len(t["emitted"]) for t in steps]
    walks = [len(t["accept"]["path"]) - 1 if t["kind"] == "spec" else 0 for t in steps]
    assert req.drafts_accepted == walks
    # every step but the last emitted all its walk accepted; the last at least one token, at most that
    assert [a - 1 for a in req.accept_lengths[:-1]] == req.drafts_accepted[:-1]
    assert not steps or 1 <= req.accept_lengths[-1] <= req.drafts_accepted[-1] + 1
    want = (len(req.output_ids) - 1) / len(steps) if steps else None
    assert tau(req.accept_lengths) == pytest.approx(want)
    assert requests_tau(req) == traces_tau(steps) == tau(req.accept_lengths)  # one formula, whatever holds the lengths


def test_tau_pools_the_verify_steps_of_requests_or_traces():
    cut = SimpleNamespace(accept_lengths=[2, 4])  # the last step may have been cut at max_new_tokens
    assert requests_tau(cut) == 3.0 and requests_tau([cut, SimpleNamespace(accept_lengths=[1])]) == pytest.approx(7 / 3)
    assert requests_tau(SimpleNamespace(accept_lengths=[])) is None  # no verify step: no τ
    traces = [{"kind": "prefill", "accept_length": 0}, {"kind": "spec", "accept_length": 3},
              {"kind": "decode", "accept_length": 1}]
    assert traces_tau(traces) == 2.0 and traces_tau(traces[:1]) is None  # the prefill is no verify step


def test_a_step_cut_by_max_new_tokens_counts_what_it_emitted(pair):
    seen = []
    for max_new in (5, 9, 13, 24):
        for req, steps in decode(pair, TREE, PROMPTS, max_new):
            check_counts(req, steps)
            if cut(req):
                assert req.finish_reason == "length" and len(req.output_ids) == max_new
                emitted_before = len(req.output_ids) - req.accept_lengths[-1]
                assert req.accept_lengths[-1] == max_new - emitted_before  # room left, not n + 1
                seen.append(req)
    assert seen, "no run ended inside a step: the cut case went untested"


def test_a_step_cut_by_a_stop_token_counts_what_it_emitted(pair):
    """A stop token that first appears inside a step (not at its end) ends the output there."""
    stop = None
    for req, steps in decode(pair, TREE, PROMPTS, 24):
        start = 1  # output index of each step's first token (the prefill emitted index 0)
        for t in steps:
            for j, tok in enumerate(t["emitted"][:-1]):
                if tok not in req.output_ids[: start + j]:
                    stop = stop or (req.rid, tok, start + j)
            start += len(t["emitted"])
    assert stop is not None, "no token first appears inside a step: pick other prompts"
    rid, tok, at = stop
    results = decode(pair, TREE, PROMPTS, 24, stop_ids=(tok,))
    for req, steps in results:
        check_counts(req, steps)
    req = results[rid][0]
    assert req.finish_reason == "stop" and len(req.output_ids) == at + 1 and cut(req)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_tau_is_tokens_emitted_over_verify_steps_for_every_request(pair, spec):
    """Prompts that stop early and late: by length (1 token: no verify step at all) and by stop tokens."""
    for max_new, stop_ids in ((1, ()), (2, ()), (7, ()), (24, ()), (24, (3, 9)), (24, (5,))):
        for req, steps in decode(pair, spec, PROMPTS, max_new, stop_ids):
            check_counts(req, steps)
            if not spec.speculative:
                assert set(req.accept_lengths) <= {1} and set(req.drafts_accepted) <= {0}


def test_cli_json_tau_is_tokens_emitted_over_verify_steps(tmp_path, capsys):
    from workbench.testing.tiny import make_tiny_app_model
    from workbench.cli import main

    tiny = make_tiny_app_model(tmp_path / "tiny")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in
                               ("tell me about the cat", "the dog ran on the mat", "soft rug and the cat sat")))
    records = []
    for max_new in (3, 6, 11):
        rc = main(["generate", "--target", str(tiny), "--draft", "random", "--dtype", "fp32", "--method", "eagle2",
                   "--num-steps", "4", "--topk", "4", "--num-draft-tokens", "12", "--prompts", str(prompts),
                   "--max-new-tokens", str(max_new), "--json"])
        assert rc == 0
        records += [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 9
    for r in records:
        verify_steps = r["target_forwards"] - 1
        assert len(r["accept_lengths"]) == len(r["drafts_accepted"]) == verify_steps
        assert sum(r["accept_lengths"]) == r["new_tokens"] - 1
        assert r["tau"] == (round((r["new_tokens"] - 1) / verify_steps, 3) if verify_steps else 0.0)
    assert any(r["accept_lengths"][-1] < r["drafts_accepted"][-1] + 1 for r in records), \
        "no output ended inside a step: the cut case went untested"
