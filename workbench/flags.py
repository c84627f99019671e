"""Command-line flags shared by ``python -m workbench`` and the benchmark commands.

Every command that loads a model takes the same model flags; every command that decodes takes
the same method / tree / sampling flags and turns them into configs through
``SpecConfig.from_knobs`` (which owns the defaults and bounds). The benchmarks import these from
here, never from ``cli.py``: only ``__main__`` imports the command line.
"""

from __future__ import annotations

import argparse

from workbench.engine.config import (CHAIN_RULES, DEFAULT_NUM_DRAFT_TOKENS, DEFAULT_NUM_STEPS, DEFAULT_TOPK,
                                     METHODS, SpecConfig)
from workbench.attention import BACKENDS
from workbench.cpu_choices import LINEAR_ORDERS
from workbench.engine.sampling import SamplingParams
from workbench.errors import UserError
from workbench.pipeline import HOT_TOKENS_DEFAULT


def positive(name: str, cast=int, allow_zero: bool = False):
    """An argparse ``type`` that accepts numbers > 0 (or >= 0) and names the flag otherwise."""

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {text}")
        return value

    return parse


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Flags shared by every command that loads a model."""
    p.add_argument("--target", help="local HF Llama/Qwen2/Mistral directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--draft", help="EAGLE head directory, or random[:SEED] (default: the shipped head)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16", "auto"], default="fp32",
                   help="fp32 (default, comparable with transformers), bf16, fp16, or auto: the fastest on this machine")
    p.add_argument("--attention", choices=list(BACKENDS),
                   help="attention backend (default: triton on GPU, torch on CPU; padded: plain decoding batched in one call)")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="replay decode and verify from CUDA graphs (default: on with CUDA and --attention triton "
                        "when the start-up check of replay against eager passes)")
    p.add_argument("--linear-order", choices=LINEAR_ORDERS, default="auto",
                   help="order of the few-row fp32 CPU linear products: auto (default: time F.linear against "
                        "(W @ x^T)^T on this CPU once, cached per CPU model and torch version), or force "
                        "weight-left or plain (F.linear)")
    p.add_argument("--hot-tokens", type=positive("--hot-tokens", int, allow_zero=True),
                   help=f"draft among the N most frequent tokens of the head's hot_tokens.json (default "
                        f"{HOT_TOKENS_DEFAULT} where the head has that file, as the shipped one does; "
                        "0 = full vocabulary)")


def add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=METHODS, default="eagle2",
                   help="plain decoding, a chain, EAGLE-2's dynamic tree, or a static (EAGLE-1) tree")
    p.add_argument("--tree", help='static: the tree as JSON rank paths, e.g. "[[0],[1],[0,0],[0,1],[0,0,0]]" '
                                  "(default: EAGLE-1's tree cut to --num-draft-tokens)")
    p.add_argument("--num-steps", type=positive("--num-steps"), help=f"draft levels (default {DEFAULT_NUM_STEPS})")
    p.add_argument("--topk", type=positive("--topk"), help=f"tree width (default {DEFAULT_TOPK}; linear: 1)")
    p.add_argument("--num-draft-tokens", type=positive("--num-draft-tokens"),
                   help=f"verify block incl. the root (default {DEFAULT_NUM_DRAFT_TOKENS}; linear: num_steps + 1)")
    p.add_argument("--chain-rule", choices=CHAIN_RULES, default="target-only",
                   help="sampling acceptance for linear: top-1 drafts (target-only) or sampled drafts, min(1, p/q)")
    p.add_argument("--max-new-tokens", type=positive("--max-new-tokens"), default=128)
    p.add_argument("--temperature", type=positive("--temperature", float, allow_zero=True), default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=positive("--top-k", int, allow_zero=True), default=0)
    p.add_argument("--seed", type=int, default=0)


def spec_from_args(args) -> tuple[SpecConfig, SamplingParams]:
    """The method, tree knobs and sampling flags as validated configs (UserError otherwise)."""
    try:
        spec = SpecConfig.from_knobs(args.method, args.num_steps, args.topk, args.num_draft_tokens, args.chain_rule,
                                     getattr(args, "tree", None))
        sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
    except ValueError as err:
        raise UserError(str(err)) from None
    return spec, sampling
