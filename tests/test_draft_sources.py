"""Where drafts come from: the n-gram lookup and the early exit of the target run through the
same tree, verify, accept walk and commit as the EAGLE head, and keep their promises: greedy
output unchanged, the target's distribution under sampling, no slot leaked."""

import json

import pytest
import torch

from helpers import LOSSLESS_DRAWS, LOSSLESS_SAMPLINGS as SAMPLINGS, assert_samples_like_target, random_prompts, tiny_pair
from workbench.attention.batch import extend_batch
from workbench.engine.config import SpecConfig, parse_spec
from workbench.engine.drafts.exit import ExitSource
from workbench.engine.drafts.head import HeadSource
from workbench.engine.drafts.model import ModelSource
from workbench.engine.drafts.ngram import NgramSource
from workbench.engine.drafts.registry import parse_draft
from workbench.engine.engine import Engine
from workbench.engine.ngram import match_suffix, ngram_candidates
from workbench.engine.sampling import SamplingParams
from workbench.engine.trace import step_trace

NGRAM, EXIT1, EXIT2 = NgramSource(), ExitSource(1), ExitSource(2)
SOURCES = [NGRAM, NgramSource(min_match=2, max_match=3), EXIT1, EXIT2]


def shapes(source):
    out = [SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6, draft=source), SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8, draft=source),
           SpecConfig.linear(4, draft=source)]
    return out if source.model_free else out + [SpecConfig.static(8, draft=source)]


CASES = [spec for source in SOURCES for spec in shapes(source)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A 3-layer tiny target (exit:1 and exit:2 both leave it a layer) and a head."""
    return tiny_pair(tmp_path_factory.mktemp("tiny3"), num_layers=3)


def decode(target, head, spec, prompts, n=24, trace=False):
    eng = Engine(target, head, spec, trace=trace)
    eng.add_requests(prompts, n)
    records = []
    while not eng.done:
        records += eng.step_records()
        eng.check_integrity()
    return eng, records


# ---- the n-gram lookup ---------------------------------------------------------------------------
def test_the_longest_recurring_suffix_wins():
    ctx = [7, 3, 4, 1, 8, 3, 4, 2, 8, 3, 4]  # "8 3 4" recurs once (then 2); "3 4" twice (then 1, 2)
    assert match_suffix(ctx, 1, 12) == [7]
    assert match_suffix(ctx, 1, 2) == [3, 7]  # windows up to 2: both occurrences of "3 4"
    assert match_suffix(ctx, 4, 12) == []  # "1/2 8 3 4" never recurs: shorter than the window
    assert match_suffix([1, 2, 3], 1, 12) == []


def test_ngram_scores_are_shares_of_the_occurrences():
    ctx = [1, 2, 5, 6, 9, 1, 2, 5, 7, 9, 1, 2, 5, 6, 9, 1, 2]
    c = ngram_candidates(ctx, 1, max_match=2, num_steps=2, topk=2)  # "1 2" three times: followed by 5 6, 5 7, 5 6
    assert c.tokens == [5, 6, 7]
    assert c.parents == [-1, 0, 0] and c.depths == [1, 2, 2] and c.ranks == [0, 0, 1]
    assert c.probs == pytest.approx([1.0, 2 / 3, 1 / 3])
    assert c.scores == pytest.approx([1.0, 2 / 3, 1 / 3])
    narrow = ngram_candidates(ctx, 1, max_match=2, num_steps=1, topk=1)
    assert narrow.tokens == [5]


def test_ngram_ties_go_to_the_most_recent_occurrence():
    c = ngram_candidates([4, 1, 3, 4, 1, 8, 4, 1], 1, max_match=2, num_steps=1, topk=2)  # "4 1": then 3, then 8
    assert c.tokens == [8, 3] and c.probs == pytest.approx([0.5, 0.5])


# ---- every draft source through the engine ---------------------------------------------------------
@pytest.mark.parametrize("spec", CASES, ids=lambda s: s.describe())
def test_greedy_is_lossless_for_every_draft_source(pair, spec):
    target, head = pair
    prompts = random_prompts(4, 16, seed=3)
    plain, _ = decode(target, None, SpecConfig("vanilla"), prompts)
    eng, _ = decode(target, head, spec, prompts)
    assert [r.output_ids for r in eng.requests] == [r.output_ids for r in plain.requests]
    assert sum(n - 1 for r in eng.requests for n in r.accept_lengths) > 0, "no draft was ever accepted"
    assert eng.table.allocator.num_free == eng.table.allocator.num_slots  # scratch and verify slots all back


def test_exit_and_ngram_keep_no_draft_pool(pair):
    target, head = pair
    exit_eng, _ = decode(target, None, SpecConfig(draft=EXIT1), random_prompts(2, 16, seed=1), n=4)
    assert exit_eng.draft_kv is exit_eng.target_kv and exit_eng.graphed_draft is None
    ngram_eng, _ = decode(target, None, SpecConfig(draft=NGRAM), random_prompts(2, 16, seed=1), n=4)
    assert ngram_eng.draft_kv is None


@pytest.mark.parametrize("source", [EXIT1, EXIT2], ids=lambda s: s.name)
def test_exit_draft_is_the_cut_short_target_on_each_path(pair, source):
    """Every candidate's probability, and the top-k its parent proposed, equal the target's
    forward(num_layers=N) on the candidate's path (committed tokens, root, ancestors)."""
    target, head = pair
    eng = Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=3, num_draft_tokens=8, draft=source), trace=True)
    eng.add_requests(random_prompts(2, 16, seed=5), 12)
    checked = 0
    while not eng.done:
        context = {r.rid: r.prompt_ids + r.output_ids for r in eng.running}  # committed + the root
        for rec in eng.step_records():
            if rec.kind != "spec":
                continue
            c = rec.candidates
            for parent in [-1] + list(range(len(c.tokens))):
                kids = [i for i, p in enumerate(c.parents) if p == parent]
                if not kids:
                    continue
                path, node = [], parent
                while node != -1:
                    path.insert(0, c.tokens[node])
                    node = c.parents[node]
                tokens = context[rec.request] + path
                kv = target.new_kv_pool(len(tokens))
                batch = extend_batch(tokens=[tokens], prefix_slots=[[]], new_slots=[list(range(len(tokens)))],
                                     device="cpu")
                logp = torch.log_softmax(target.logits(target(batch, kv, num_layers=source.num_layers)[-1:]), -1)[0]
                top = logp.topk(len(kids))
                assert [c.tokens[i] for i in kids] == top.indices.tolist()
                torch.testing.assert_close(torch.tensor([c.probs[i] for i in kids]), top.values.exp(),
                                           atol=1e-5, rtol=1e-4)
                checked += 1
    assert checked > 10


def test_traces_name_the_draft_source(pair):
    target, head = pair
    prompts = random_prompts(2, 16, seed=7)
    for spec, name in [(SpecConfig(draft=NGRAM), "ngram:1-12"), (SpecConfig(draft=EXIT2), "exit:2"),
                       (SpecConfig(), "head")]:
        _, records = decode(target, head, spec, prompts, n=8, trace=True)
        traces = [step_trace(r) for r in records]
        assert {t["draft_source"] for t in traces} == {name}
        for t in (t for t in traces if t["kind"] == "spec"):
            offset = {"head": -1, "exit:2": 0}.get(name)
            if offset is None:  # the n-gram draft hands its tree over: no draft forward
                assert t["draft"]["levels"] == [] and t["kv"]["draft"]["scratch"] == []
            for level in t["draft"]["levels"]:
                assert level["position"] == t["L"] + level["level"] + offset
    _, records = decode(target, None, SpecConfig("vanilla"), prompts, n=2, trace=True)
    assert step_trace(records[0])["draft_source"] == "none"


# ---- sampling: the target's distribution, whatever the draft ----------------------------------------
@pytest.fixture(scope="module")
def pair8(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny8-sources"), vocab_size=8, head_std=0.5)


SAMPLED = [("ngram T1", SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6, draft=NGRAM), SAMPLINGS[0]),
           ("ngram T0.7-top_p0.9", SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6, draft=NGRAM), SAMPLINGS[1]),
           ("exit:1 T1", SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6, draft=EXIT1), SAMPLINGS[0]),
           ("exit:1 linear leviathan T0.7-top_p0.9", SpecConfig.linear(3, "leviathan", EXIT1), SAMPLINGS[1])]


@pytest.mark.parametrize("name, spec, params", SAMPLED, ids=[c[0] for c in SAMPLED])
def test_sampling_matches_the_target_for_every_draft_source(pair8, name, spec, params):
    target, head = pair8
    assert_samples_like_target(target, head, spec, params, name, min_accepted=LOSSLESS_DRAWS // 20)


# ---- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ("exit:0", "N must be >= 1"), ("exit:", "exit:N"), ("exit:two", "exit:N"), ("ngram:0-4", "1 <= MIN"),
    ("ngram:5-2", "1 <= MIN <= MAX"), ("ngram:1-33", "<= 32"), ("ngram:3", "ngram:MIN-MAX")])
def test_bad_draft_sources_get_clear_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_draft(text)


def test_draft_sources_parse_and_name_themselves():
    assert parse_draft("ngram") == NGRAM and parse_draft("ngram:2-6").name == "ngram:2-6"
    assert parse_draft("exit:28") == ExitSource(28) and parse_draft("exit:28").name == "exit:28"
    assert parse_draft("random:3") is None and parse_draft("some/head/dir") is None  # the head's weights, loaded
    assert parse_draft("head") == HeadSource() and parse_spec("linear:3@head") == SpecConfig.linear(3)
    assert SpecConfig.from_knobs("eagle2", draft="exit:2").draft == EXIT2
    assert SpecConfig.from_knobs("vanilla", draft="ngram").draft == HeadSource()


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="static", draft="ngram"), "neither a static tree nor a rule that draws the chain from it"),
    (dict(method="linear", chain_rule="leviathan", draft="ngram"), r"draws the chain from it \(leviathan, block"),
    (dict(method="linear", chain_rule="block", draft="ngram"), r"draws the chain from it \(leviathan, block")])
def test_the_ngram_draft_has_no_distribution(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SpecConfig.from_knobs(**kwargs)


def test_an_exit_must_leave_the_target_a_layer(pair):
    target, _ = pair
    with pytest.raises(ValueError, match=r"the target has 3 layers, so N must be in 1\.\.2"):
        Engine(target, None, SpecConfig(draft=ExitSource(3)))
    with pytest.raises(ValueError, match="needs a draft head"):
        Engine(target, None, SpecConfig())


# ---- the command line ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from workbench.testing.tiny import make_tiny_app_model

    return make_tiny_app_model(tmp_path_factory.mktemp("tiny-cli"))  # 2 layers


def _generate(tiny_dir, capsys, *extra):
    from workbench.cli import main

    try:
        rc = main(["generate", "--target", str(tiny_dir), "--prompt", "the cat sat on the mat and the cat",
                   "--max-new-tokens", "12", "--json", *extra])
    except SystemExit as stop:  # a flag refused while parsing
        rc = stop.code
    out = capsys.readouterr()
    return rc, out


@pytest.mark.parametrize("draft", ["ngram", "exit:1"])
def test_cli_generates_with_each_draft_source(tiny_dir, capsys, draft):
    rc, plain = _generate(tiny_dir, capsys, "--method", "vanilla")
    assert rc == 0
    rc, spec = _generate(tiny_dir, capsys, "--method", "eagle2", "--draft", draft)
    assert rc == 0, spec.err
    assert json.loads(spec.out)["output_ids"] == json.loads(plain.out)["output_ids"]
    assert f"draft={draft if draft != 'ngram' else 'ngram:1-12'}" in spec.err


@pytest.mark.parametrize("draft, message", [
    ("exit:0", "N must be >= 1"), ("exit:2", "the target has 2 layers, so N must be in 1..1"),
    ("ngram:4-2", "1 <= MIN <= MAX"), ("no/such/head", "no such head directory")])
def test_cli_refuses_a_bad_draft_in_one_line(tiny_dir, capsys, draft, message):
    rc, out = _generate(tiny_dir, capsys, "--draft", draft)
    assert rc == 2
    assert out.err.startswith("error: ") and message in out.err and len(out.err.strip().splitlines()) == 1


# ---- the real model --------------------------------------------------------------------------------
@pytest.mark.slow
def test_real_model_greedy_is_lossless_for_ngram_and_exit(smollm2_dir, real_threads):
    from workbench.pipeline import Workbench

    wb = Workbench.load(str(smollm2_dir), dtype="fp32", need_draft=False)
    prompts = [wb.encode("Repeat exactly: the quick brown fox jumps over the lazy dog. The quick brown fox"),
               wb.encode("What is 12 times 7?")]
    plain, _ = wb.generate(prompts, SpecConfig("vanilla"), SamplingParams(), 24)
    for draft in ("ngram", "exit:20"):
        spec = SpecConfig.from_knobs("eagle2", num_steps=4, topk=3, num_draft_tokens=8, draft=draft)
        reqs, _ = wb.generate(prompts, spec, SamplingParams(), 24)
        assert [r.output_ids for r in reqs] == [r.output_ids for r in plain], draft
        assert sum(n - 1 for r in reqs for n in r.accept_lengths) > 0, draft


# ---- the benchmark's method grammar ----------------------------------------------------------------
def test_bench_methods_name_their_draft_source():
    from workbench.measure.methods import parse_methods

    methods = parse_methods("vanilla,eagle2:8/5/4,eagle2:8/5/4@ngram,linear:4@exit:24,static:8@exit:1,"
                            "eagle2:12/5/4@ngram:2-8")
    assert [m.spec.draft.name for m in methods] == ["head", "head", "ngram:1-12", "exit:24", "exit:1", "ngram:2-8"]
    assert methods[3].spec == SpecConfig.linear(4, draft=ExitSource(24))
    for bad, message in [("vanilla@ngram", "only a speculative method"), ("eagle2:8/5/4@exit:0", "N must be >= 1"),
                         ("eagle2:8/5/4@ngarm", "unknown draft source 'ngarm'"), ("static:8@ngram", "static tree"),
                         ("hf-pld@exit:3", "only a speculative method")]:
        with pytest.raises(ValueError, match=message):
            parse_methods(bad)


def test_other_frameworks_get_the_draft_source_or_say_they_have_none():
    from workbench.engine.frameworks import framework_flags

    ngram = framework_flags(SpecConfig.from_knobs("eagle2", num_steps=5, topk=4, num_draft_tokens=8, draft="ngram:2-6"))
    assert ngram["SGLang"].startswith("--speculative-algorithm NGRAM --speculative-num-draft-tokens 8 "
                                      "--speculative-ngram-min-match-window-size 2 "
                                      "--speculative-ngram-max-match-window-size 6")
    vllm = json.loads(ngram["vLLM"].removeprefix("speculative_config=").split(" (")[0])
    assert vllm == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 6}
    assert ngram["EAGLE"] == "no n-gram draft"
    exits = framework_flags(SpecConfig.from_knobs("eagle2", draft="exit:20"))
    assert all(v.startswith("no early-exit draft (exit:20)") for v in exits.values())
    model = framework_flags(SpecConfig.from_knobs("linear", num_steps=4, draft="model:/m/small"))
    assert model["SGLang"].startswith("--speculative-algorithm STANDALONE --speculative-draft-model-path /m/small "
                                      "--speculative-num-steps 4 --speculative-eagle-topk 1")
    assert model["vLLM"] == 'speculative_config={"method": "draft_model", "model": "/m/small", "num_speculative_tokens": 4}'


def test_one_workbench_runs_every_draft_source(tiny_dir):
    from workbench.errors import UserError
    from workbench.pipeline import Workbench

    wb = Workbench.load(str(tiny_dir), "ngram:2-4", dtype="fp32")  # a source that needs no head: none is loaded
    assert wb.draft is None and wb.draft_source == "ngram:2-4"
    prompt = [wb.encode("the cat sat on the mat and the cat")]
    plain, _ = wb.generate(prompt, SpecConfig("vanilla"), SamplingParams(), 8)
    for draft in ("ngram:2-4", "exit:1"):
        spec = SpecConfig.from_knobs("eagle2", num_steps=3, topk=2, num_draft_tokens=5, draft=draft)
        reqs, _ = wb.generate(prompt, spec, SamplingParams(), 8)
        assert reqs[0].output_ids == plain[0].output_ids
    with pytest.raises(UserError, match="drafts with the EAGLE head, but that is not the one loaded"):
        wb.engine(SpecConfig(), SamplingParams())
    with pytest.raises(UserError, match="the target has 2 layers"):
        wb.engine(SpecConfig.from_knobs("eagle2", draft="exit:2"), SamplingParams())


# ---- a separate draft model (model:DIR): no such pair ships, a tiny random one stands in ----------
@pytest.fixture(scope="module")
def draft_model(tmp_path_factory, pair):
    from workbench.models.loading import load_target
    from workbench.testing.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-draft-model"), vocab_size=16, seed=4, num_layers=1)
    return path, load_target(path)


@pytest.mark.parametrize("make", [lambda s: SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6, draft=s),
                                  lambda s: SpecConfig.linear(3, draft=s), lambda s: SpecConfig.static(6, draft=s)],
                         ids=["eagle2", "linear", "static"])
def test_a_draft_model_is_lossless_and_keeps_its_kv_like_a_prefill(pair, draft_model, make):
    target, _ = pair
    path, model = draft_model
    spec = make(ModelSource(str(path)))
    prompts = random_prompts(3, 16, seed=9)
    plain, _ = decode(target, None, SpecConfig("vanilla"), prompts)
    eng, _ = decode(target, model, spec, prompts)
    assert [r.output_ids for r in eng.requests] == [r.output_ids for r in plain.requests]
    assert sum(n - 1 for r in eng.requests for n in r.accept_lengths) > 0, "no draft was ever accepted"
    assert eng.draft_kv is not eng.target_kv
    eng = Engine(target, model, spec)  # mid-run: the draft's own K/V equals a fresh prefill of its committed tokens
    eng.add_requests(prompts, 16)
    for _ in range(4):
        eng.step()
    for r in eng.running:
        ours, L = eng.table.slots(r.rid), r.draft_length
        tokens = (r.prompt_ids + r.output_ids)[:L]
        fresh = model.new_kv_pool(L)
        model(extend_batch(tokens=[tokens], prefix_slots=[[]], new_slots=[list(range(L))], device="cpu"), fresh)
        torch.testing.assert_close(eng.draft_kv.k[0][ours[:L]], fresh.k[0], atol=1e-5, rtol=1e-4)


def test_a_draft_model_needs_the_targets_vocabulary(pair, tmp_path):
    from workbench.models.loading import load_target
    from workbench.testing.tiny import make_tiny_checkpoint

    target, _ = pair
    other = load_target(make_tiny_checkpoint(tmp_path, vocab_size=24, num_layers=1))
    with pytest.raises(ValueError, match=r"vocabulary \(24\) is not the target's \(16\)"):
        Engine(target, other, SpecConfig(draft=ModelSource(str(tmp_path))))
    with pytest.raises(ValueError, match="model:DIR"):
        parse_draft("model:")


def test_cli_drafts_with_a_model_of_the_same_tokenizer(tiny_dir, tmp_path, capsys):
    from workbench.testing.tiny import make_tiny_app_model

    draft_dir = make_tiny_app_model(tmp_path / "draft", seed=1)  # the same words, other weights
    rc, plain = _generate(tiny_dir, capsys, "--method", "vanilla")
    rc, spec = _generate(tiny_dir, capsys, "--method", "eagle2", "--draft", f"model:{draft_dir}")
    assert rc == 0, spec.err
    assert json.loads(spec.out)["output_ids"] == json.loads(plain.out)["output_ids"]
    rc, bad = _generate(tiny_dir, capsys, "--draft", f"model:{tmp_path / 'none'}")
    assert rc == 2 and bad.err.startswith("error: ") and "no model directory" in bad.err


def test_a_draft_level_is_recorded_where_its_draft_ran_it(pair, draft_model):
    """A frontier at depth d runs at len(prefix) + d - 1: the head one behind the target's node
    (L + d - 1: its input at p is paired with the token at p + 1), an early exit and a draft
    model, whose prefix holds the root, at the node's own position L + d. The record and the
    trace say where it ran, whichever the draft."""
    target, head = pair
    path, model = draft_model
    tree = dict(num_steps=3, topk=2, num_draft_tokens=6)
    for draft, source, behind in [(head, HeadSource(), 1), (None, EXIT2, 0),
                                  (model, ModelSource(str(path)), 0)]:
        _, records = decode(target, draft, SpecConfig("eagle2", **tree, draft=source), random_prompts(2, 16, seed=5),
                            n=10, trace=True)
        levels = [(rec, lv) for rec in records if rec.kind == "spec" for lv in rec.levels]
        assert levels, source.name
        for rec, lv in levels:
            assert lv.position == rec.kv.committed_before + lv.level - behind, source.name
        for rec in records:
            if rec.kind == "spec":
                trace = step_trace(rec)
                assert [lv["position"] for lv in trace["draft"]["levels"]] == [lv.position for lv in rec.levels]
