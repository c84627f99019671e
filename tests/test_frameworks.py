"""A setting carries over to SGLang, vLLM and the EAGLE repository with their own words and
their off-by-ones (docs/design.md §8); every export obeys the engine's own rule for what it can
run: vLLM verifies chains only, SGLang runs num_steps + 1 tokens for a chain; a schedule drafts
with its own draft source."""

import json

import pytest

from workbench.engine.config import SpecConfig, parse_spec
from workbench.engine.frameworks import FRAMEWORKS, check_sglang, check_vllm, framework_flags, schedule_flags
from workbench.engine.policy import parse_policy
from workbench.engine.tree import max_candidates


def _vllm_config(text: str) -> dict:
    text = text.removeprefix("speculative_config=").removeprefix("--speculative-config '")
    return json.loads(text[: text.rindex("}") + 1])  # a note in brackets may follow


def _sglang_numbers(text: str) -> tuple[int, int, int]:
    words = text.split()
    value = lambda flag: int(words[words.index(flag) + 1])  # noqa: E731
    return value("--speculative-num-steps"), value("--speculative-eagle-topk"), value("--speculative-num-draft-tokens")


def test_sglang_takes_the_knobs_one_to_one():
    flags = framework_flags(SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8))["SGLang"]
    assert "--speculative-num-steps 5 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8" in flags


def test_eagle_depth_is_one_less_and_total_token_counts_the_root():
    # the EAGLE paper's default depth=5, top_k=10, total_token=60 is num_steps=6 here
    assert "depth=5, top_k=10, total_token=60" in framework_flags(SpecConfig("eagle2", num_steps=6, topk=10, num_draft_tokens=60))["EAGLE"]


def test_vllm_gets_a_chain_and_the_reason_where_a_tree_was_asked_for():
    chain = framework_flags(SpecConfig.linear(3))["vLLM"]
    assert _vllm_config(chain) == {"method": "eagle", "model": "<EAGLE head>", "num_speculative_tokens": 3}
    assert "(" not in chain  # a chain is a chain: nothing to explain
    for name, depth in (("eagle2:8/5/4", 5), ("eagle2:60/6/10", 6), ("static:8", None)):
        spec = parse_spec(name)
        text = framework_flags(spec)["vLLM"]
        config = _vllm_config(text)
        assert "speculative_token_tree" not in config and "verifies chains only" in text
        assert config["num_speculative_tokens"] == (depth or spec.num_steps) == min(spec.num_steps, spec.num_draft_tokens - 1)
    short = SpecConfig("eagle2", num_steps=5, topk=1, num_draft_tokens=4)  # a chain cut to 3 drafts by its budget
    assert _vllm_config(framework_flags(short)["vLLM"])["num_speculative_tokens"] == 3


def test_sglang_runs_a_chain_as_this_engine_does():
    short = SpecConfig("eagle2", num_steps=5, topk=1, num_draft_tokens=4)
    assert _sglang_numbers(framework_flags(short)["SGLang"]) == (3, 1, 4)  # not 5 steps: SGLang would run 6 tokens


NAMES = ["linear:1", "linear:4", "eagle2:4/3/2", "eagle2:8/5/4", "eagle2:60/6/10", "eagle2:16/4/8", "static:8",
         "static:30", "linear:3@ngram", "eagle2:8/5/4@ngram:2-6", "linear:4@model:/m/small", "eagle2:8/5/4@model:/m/d"]


@pytest.mark.parametrize("name", NAMES)
def test_every_export_obeys_the_engines_rule(name):
    spec = parse_spec(name)
    flags = framework_flags(spec)
    check_vllm(_vllm_config(flags["vLLM"]))
    if "--speculative-eagle-topk" in flags["SGLang"]:
        check_sglang(*_sglang_numbers(flags["SGLang"]))


@pytest.mark.parametrize("config,message", [
    ({"method": "eagle", "num_speculative_tokens": 3, "speculative_token_tree": "[(0,), (1,)]"}, "chains only"),
    ({"method": "eagle", "num_speculative_tokens": 0}, ">= 1"),
    ({"method": "medusa", "num_speculative_tokens": 2}, "method 'medusa'"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5, "prompt_lookup_max": 2}, "1 <= "),
    ({"method": "eagle", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[2, 4, 3]]},
     "must run"),
    ({"method": "eagle", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 1, 4]]},
     "must run"),
])
def test_check_vllm_refuses_what_vllm_cannot_run(config, message):
    with pytest.raises(ValueError, match=message):
        check_vllm(config)


def test_check_sglang_refuses_what_sglang_would_change():
    with pytest.raises(ValueError, match="num_steps \\+ 1 = 6"):
        check_sglang(5, 1, 4)
    with pytest.raises(ValueError, match="at most"):
        check_sglang(2, 2, 2 + max_candidates(2, 2))
    check_sglang(5, 4, 8)


def test_a_schedule_drafts_with_its_own_source():
    ngram = schedule_flags(parse_policy("schedule:1-2=eagle2:8/5/4@ngram:2-6,3+=linear:2@ngram:2-6"), largest_batch=4)
    config = _vllm_config(ngram["vLLM"])
    assert config["method"] == "ngram" and "model" not in config
    assert (config["prompt_lookup_min"], config["prompt_lookup_max"]) == (2, 6)
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 2, 5], [3, 4, 2]]
    assert ngram["SGLang"].startswith("--speculative-algorithm NGRAM") and "--speculative-adaptive" not in ngram["SGLang"]
    head = schedule_flags(parse_policy("schedule:1=eagle2:8/5/4,2+=linear:2"))
    assert _vllm_config(head["vLLM"])["method"] == "eagle" and '"candidate_steps": [2, 5]' in head["SGLang"]
    exits = schedule_flags(parse_policy("schedule:1=linear:2@exit:1,2+=off"))
    assert exits["vLLM"].startswith("no such draft in vLLM: no early-exit draft")


def test_lossy_thresholds_carry_to_sglang_only():
    spec = SpecConfig.from_knobs("eagle2", accept_threshold_single=0.5, accept_threshold_acc=0.8)
    flags = framework_flags(spec)
    assert "--speculative-accept-threshold-single 0.5 --speculative-accept-threshold-acc 0.8 (lossy)" in flags["SGLang"]
    assert "threshold" not in framework_flags(SpecConfig.from_knobs("eagle2"))["SGLang"]


def test_vanilla_has_no_speculative_flags():
    flags = framework_flags(SpecConfig("vanilla"))
    assert list(flags) == list(FRAMEWORKS) and all("no speculative" in v for v in flags.values())
