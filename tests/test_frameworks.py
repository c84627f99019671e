"""A setting carries over to SGLang, vLLM and the EAGLE repository with their own words and
their off-by-ones (docs/design.md §8)."""

import ast
import json

from workbench.engine.config import SpecConfig
from workbench.engine.frameworks import FRAMEWORKS, framework_flags
from workbench.engine.static_tree import default_static_tree


def _vllm_config(text: str) -> dict:
    text = text.removeprefix("speculative_config=")
    return json.loads(text[: text.rindex("}") + 1])  # a note in brackets may follow


def test_sglang_takes_the_knobs_one_to_one():
    flags = framework_flags(SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8))["SGLang"]
    assert "--speculative-num-steps 5 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8" in flags


def test_eagle_depth_is_one_less_and_total_token_counts_the_root():
    # the EAGLE paper's default depth=5, top_k=10, total_token=60 is num_steps=6 here
    assert "depth=5, top_k=10, total_token=60" in framework_flags(SpecConfig("eagle2", num_steps=6, topk=10, num_draft_tokens=60))["EAGLE"]


def test_vllm_chain_and_tree():
    chain = _vllm_config(framework_flags(SpecConfig.linear(3))["vLLM"])
    assert chain == {"method": "eagle", "model": "<EAGLE head>", "num_speculative_tokens": 3}
    text = framework_flags(SpecConfig("eagle2", num_steps=5, topk=4, num_draft_tokens=8))["vLLM"]
    tree = _vllm_config(text)
    paths = ast.literal_eval(tree["speculative_token_tree"])
    assert paths == [tuple(p) for p in default_static_tree(8)] and tree["num_speculative_tokens"] == 7
    assert "no dynamic tree" in text  # said, not hidden
    static = SpecConfig.static(tree=[[0], [1], [0, 0]])
    paths = ast.literal_eval(_vllm_config(framework_flags(static)["vLLM"])["speculative_token_tree"])
    assert paths == [(0,), (1,), (0, 0)]


def test_lossy_thresholds_carry_to_sglang_only():
    spec = SpecConfig.from_knobs("eagle2", accept_threshold_single=0.5, accept_threshold_acc=0.8)
    flags = framework_flags(spec)
    assert "--speculative-accept-threshold-single 0.5 --speculative-accept-threshold-acc 0.8 (lossy)" in flags["SGLang"]
    assert "threshold" not in framework_flags(SpecConfig.from_knobs("eagle2"))["SGLang"]


def test_vanilla_has_no_speculative_flags():
    flags = framework_flags(SpecConfig("vanilla"))
    assert list(flags) == list(FRAMEWORKS) and all("no speculative" in v for v in flags.values())
