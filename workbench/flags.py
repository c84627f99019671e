"""Command-line flags shared by ``python -m workbench`` and the benchmark commands.

Every command that loads a model takes the same model flags; every command that decodes takes
the same method / tree / sampling flags and turns them into configs through
``SpecConfig.from_knobs`` (which owns the defaults; the config the bounds), naming the flag of
the field a ``ConfigError`` is about by one table (``SPEC_FLAGS``). The benchmarks import these from
here, never from ``cli.py``: only ``__main__`` imports the command line.

Whatever can be checked before the model loads is checked here, by the flag's argparse ``type``
(a bad value is one ``error: argument --flag: ...`` line) or by ``load_from_args``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from workbench.engine.config import (CHAIN_RULES, DEFAULT_NUM_DRAFT_TOKENS, DEFAULT_NUM_STEPS, DEFAULT_TOPK,
                                     EXACT_THRESHOLD, METHODS, ConfigError, SpecConfig)
from workbench.attention import BACKENDS
from workbench.default_tree import PRESETS
from workbench.device import DTYPE_CHOICES, default_device, resolve_dtype
from workbench.cpu_choices import LINEAR_ORDERS
from workbench.engine.drafts.registry import check_draft, grammar
from workbench.engine.sampling import SamplingParams
from workbench.errors import UserError, as_user_error
from workbench.models.heads import default_draft_dir, load_hot_tokens
from workbench.pipeline import HOT_TOKENS_DEFAULT, Workbench


def _number(text: str, cast):
    """``text`` as a finite number of type ``cast``, or the argparse error that says so."""
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text}")
    return value


def positive(name: str, cast=int, allow_zero: bool = False):
    """An argparse ``type`` that accepts numbers > 0 (or >= 0) and names the flag otherwise."""

    def parse(text: str):
        value = _number(text, cast)
        if value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {text}")
        return value

    return parse


def fraction(text: str) -> float:
    """An argparse ``type`` for a share in (0, 1] (``--top-p``)."""
    value = _number(text, float)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text}")
    return value


def device_name(text: str) -> str:
    """An argparse ``type`` for ``--device``: cpu, cuda or cuda:N, CUDA only where there is one."""
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text}: this machine has no CUDA device (use --device cpu)")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return text


def draft_source(text: str) -> str:
    """An argparse ``type`` for ``--draft``: any registered source or the head's weights
    (``drafts.registry.check_draft``; whether it fits the target is checked when that loads)."""
    try:
        check_draft(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def new_file(text: str) -> str:
    """An argparse ``type`` for a file this run writes: its folder must exist, and it is no folder."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no folder {path.parent} to write it into")
    return text


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Flags shared by every command that loads a model (defaults shown by ``--help``)."""
    p.add_argument("--target", help="local HF Llama/Qwen2/Mistral directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--draft", type=draft_source,
                   help=f"where drafts come from: {grammar()} (docs/design.md, draft sources; default: the "
                        "shipped head)")
    p.add_argument("--dtype", choices=DTYPE_CHOICES, default="fp32",
                   help="fp32 (comparable with transformers), bf16, fp16, or auto: bf16 on a GPU or a CPU "
                        "with native bf16, else fp32")
    p.add_argument("--attention", choices=list(BACKENDS),
                   help="attention backend (default: triton on GPU, torch on CPU; padded: plain decoding batched in one call)")
    p.add_argument("--device", type=device_name, help="cpu, cuda or cuda:N (default: cuda when available)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="replay decode and verify from CUDA graphs (default: on with CUDA and --attention triton "
                        "when the start-up check of replay against eager passes)")
    p.add_argument("--linear-order", choices=LINEAR_ORDERS, default="auto",
                   help="how the few-row fp32 or bf16 CPU linear products run: auto (default: time F.linear, "
                        "(W @ x^T)^T and MKL's and oneDNN's packed GEMMs (bf16: F.linear and oneDNN's) on this CPU "
                        "once per row count, cached per CPU model, torch version and dtype), or force plain "
                        "(F.linear), weight-left, mkl-packed or onednn-packed")
    p.add_argument("--hot-tokens", type=positive("--hot-tokens", int, allow_zero=True),
                   help=f"draft among the N most frequent tokens of the head's hot_tokens.json (default "
                        f"{HOT_TOKENS_DEFAULT} where the head has that file, as the shipped one does; "
                        "0 = full vocabulary)")


def add_spec_args(p: argparse.ArgumentParser) -> None:
    """The method, tree and sampling flags of every command that decodes."""
    p.add_argument("--method", choices=METHODS, default="eagle2",
                   help="plain decoding, a chain, EAGLE-2's dynamic tree, or a static (EAGLE-1) tree")
    p.add_argument("--tree", help='static: the tree as JSON rank paths, e.g. "[[0],[1],[0,0],[0,1],[0,0,0]]" '
                                  "(default: EAGLE-1's tree cut to --num-draft-tokens)")
    p.add_argument("--num-steps", type=positive("--num-steps"),
                   help=f"draft levels (default: see --tree-preset; otherwise {DEFAULT_NUM_STEPS})")
    p.add_argument("--topk", type=positive("--topk"),
                   help=f"tree width (default: see --tree-preset; otherwise {DEFAULT_TOPK}; linear: 1)")
    p.add_argument("--num-draft-tokens", type=positive("--num-draft-tokens"),
                   help=f"verify block incl. the root (default: see --tree-preset; otherwise "
                        f"{DEFAULT_NUM_DRAFT_TOKENS}; linear: num_steps + 1)")
    p.add_argument("--tree-preset", choices=list(PRESETS),
                   help="eagle2's tree as others run it: sglang = 8/5/4 (num_draft_tokens/num_steps/topk), "
                        "eagle2-paper = 60/6/10. Default with the shipped head on a CPU and no tree flag: the "
                        "smallest tree the head benchmark measured level with the fastest on this kind of CPU "
                        "(workbench/default_tree.py), said on one line")
    p.add_argument("--chain-rule", choices=CHAIN_RULES, default=CHAIN_RULES[0],
                   help="sampling acceptance for --method linear: top-1 drafts (target-only) or sampled drafts, "
                        "min(1, p/q)")
    for which, rule in (("single", "accept a draft whose target probability reaches T"),
                        ("acc", "accept when the coin is below the tried drafts' cumulative probability / T")):
        p.add_argument(f"--speculative-accept-threshold-{which}", type=float, default=EXACT_THRESHOLD, metavar="T",
                       help=f"lossy below 1: {rule}, so more drafts are accepted and the output no longer follows "
                            f"the target's distribution (sampling only; 1 = exact)")
    p.add_argument("--max-new-tokens", type=positive("--max-new-tokens"), default=128,
                   help="new tokens per prompt at most")
    p.add_argument("--temperature", type=positive("--temperature", float, allow_zero=True), default=0.0,
                   help="sampling temperature; 0 = greedy")
    p.add_argument("--top-p", type=fraction, default=1.0, help="nucleus sampling: keep this share of the mass; 1 = off")
    p.add_argument("--top-k", type=positive("--top-k", int, allow_zero=True), default=0,
                   help="sample among the k most likely tokens; 0 = off")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (with --temperature > 0)")


# The flag of each SpecConfig field: a ConfigError names its field, and the line printed names the flag.
SPEC_FLAGS = {"method": "--method", "num_steps": "--num-steps", "topk": "--topk",
              "num_draft_tokens": "--num-draft-tokens", "chain_rule": "--chain-rule", "tree": "--tree",
              "accept_threshold_single": "--speculative-accept-threshold-single",
              "accept_threshold_acc": "--speculative-accept-threshold-acc", "draft": "--draft"}


def spec_from_args(args) -> tuple[SpecConfig, SamplingParams]:
    """The method, tree knobs and sampling flags as validated configs (UserError naming the flag otherwise)."""
    with as_user_error("--temperature: "):  # the flags' types refuse a bad --top-k or --top-p: this is the bound
        sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
    knobs = tree_knobs(args)
    try:
        spec = SpecConfig.from_knobs(args.method, **knobs, chain_rule=args.chain_rule,
                                     tree=getattr(args, "tree", None),
                                     accept_threshold_single=args.speculative_accept_threshold_single,
                                     accept_threshold_acc=args.speculative_accept_threshold_acc,
                                     draft=getattr(args, "draft", None))
        spec.check_sampling(sampling.greedy)
    except ConfigError as err:
        raise UserError(err.worded(SPEC_FLAGS)) from None
    return spec, sampling


def tree_knobs(args) -> dict[str, int | None]:
    """``num_steps``, ``topk`` and ``num_draft_tokens`` as the flags give them; for ``eagle2`` with
    none of them, the ``--tree-preset``'s, or (the shipped head, on a CPU) the measured pick's
    (``default_tree_pick``); None where the method's own default applies."""
    given = {"num_steps": args.num_steps, "topk": args.topk, "num_draft_tokens": args.num_draft_tokens}
    preset = getattr(args, "tree_preset", None)
    if preset is not None:
        if args.method != "eagle2":
            raise UserError(f"--tree-preset {preset}: a preset is an eagle2 tree; --method is {args.method}")
        if any(v is not None for v in given.values()):
            raise UserError(f"--tree-preset {preset} sets the tree: give it or --num-steps/--topk/--num-draft-tokens, "
                            "not both")
        tree = PRESETS[preset]
    else:
        chosen = default_tree_pick(args)
        if chosen is None:
            return given
        tree = chosen.tree
    return {"num_draft_tokens": tree[0], "num_steps": tree[1], "topk": tree[2]}


def default_tree_pick(args):
    """The measured tree ``eagle2`` runs without tree flags (``default_tree.Pick``), or None where
    the flags, the draft or the device say otherwise: the records measure the shipped head on CPUs."""
    from workbench.cpu_choices import cpu_flags, cpu_kind
    from workbench.default_tree import measured_pick

    no_tree_flag = args.num_steps is None and args.topk is None and args.num_draft_tokens is None
    if args.method != "eagle2" or not no_tree_flag or getattr(args, "tree_preset", None) is not None:
        return None
    device = torch.device(getattr(args, "device", None) or default_device())
    if getattr(args, "draft", None) is not None or device.type != "cpu":
        return None
    return measured_pick(cpu_kind(cpu_flags()), resolve_dtype(getattr(args, "dtype", "fp32"), "cpu"))


def check_hot_tokens(hot_tokens: int | None, draft: str | None) -> None:
    """Refuse ``--hot-tokens`` beyond the length of the head's list, naming the range (the list
    would otherwise be cut short without a word)."""
    if not hot_tokens:
        return
    hot = load_hot_tokens(default_draft_dir() if draft is None else Path(draft).expanduser())
    if hot is not None and hot_tokens > len(hot):
        raise UserError(f"--hot-tokens {hot_tokens}: the head's list has {len(hot)} tokens: give 1 to {len(hot)}, "
                        "or 0 for the full vocabulary")


def load_from_args(args, need_draft: bool = True) -> Workbench:
    """The Workbench that the model flags describe; UserError for any input it refuses."""
    if need_draft:
        check_hot_tokens(args.hot_tokens, args.draft)
    try:
        return Workbench.load(args.target, args.draft, dtype=args.dtype, device=args.device, attention=args.attention,
                              need_draft=need_draft,
                              hot_tokens=args.hot_tokens, linear_order=args.linear_order)
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from None
