"""Command line: ``python -m workbench {fetch,generate,bench}``.

Errors a user can cause print one line to stderr and exit 2; no traceback wall.
"""

from __future__ import annotations

import argparse
import json
import sys


class UserError(Exception):
    """A problem with the user's input, reported as one clear line."""


def _positive(name: str, cast=int, allow_zero: bool = False):
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
    p.add_argument("--attention", choices=["torch", "triton"], help="attention backend (default: triton on GPU, torch on CPU)")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="replay decode and verify from CUDA graphs (default: on with CUDA and --attention triton)")
    p.add_argument("--hot-tokens", type=_positive("--hot-tokens", int, allow_zero=True),
                   help="shipped head: draft among the N most frequent tokens (default 4096; 0 = full vocabulary)")


def add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=["vanilla", "linear", "eagle2"], default="eagle2")
    p.add_argument("--num-steps", type=_positive("--num-steps"), help="draft levels (default 5)")
    p.add_argument("--topk", type=_positive("--topk"), help="tree width (default 4; linear: 1)")
    p.add_argument("--num-draft-tokens", type=_positive("--num-draft-tokens"),
                   help="verify block incl. the root (default 8; linear: num_steps + 1)")
    p.add_argument("--chain-rule", choices=["target-only", "leviathan"], default="target-only",
                   help="sampling acceptance for linear: top-1 drafts (target-only) or sampled drafts, min(1, p/q)")
    p.add_argument("--max-new-tokens", type=_positive("--max-new-tokens"), default=128)
    p.add_argument("--temperature", type=_positive("--temperature", float, allow_zero=True), default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=_positive("--top-k", int, allow_zero=True), default=0)
    p.add_argument("--seed", type=int, default=0)


def spec_from_args(args):
    from workbench.engine.config import SpecConfig
    from workbench.engine.sampling import SamplingParams

    try:
        sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
        steps = args.num_steps or 5
        if args.method == "linear":
            if args.topk not in (None, 1):
                raise ValueError("linear is the chain: --topk must be 1 (or left out)")
            if args.num_draft_tokens not in (None, steps + 1):
                raise ValueError(f"linear verifies num_steps + 1 = {steps + 1} tokens: leave --num-draft-tokens out")
            spec = SpecConfig.linear(steps, args.chain_rule)
        else:
            spec = SpecConfig(args.method, steps, args.topk or 4, args.num_draft_tokens or 8, args.chain_rule)
    except ValueError as err:
        raise UserError(str(err)) from None
    return spec, sampling


def read_prompts(args) -> list[dict]:
    """[{"id", "prompt"}] from --prompt or a JSONL --prompts file (``prompt`` or ``turns[0]``)."""
    if args.prompt is not None:
        return [{"id": 0, "prompt": args.prompt}]
    items = []
    try:
        lines = open(args.prompts, encoding="utf-8").read().splitlines()
    except OSError as err:
        raise UserError(f"--prompts {args.prompts}: {err.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text = row["prompt"] if "prompt" in row else row["turns"][0]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
            raise UserError(f"--prompts {args.prompts}:{n}: expected JSON with 'prompt' or 'turns'") from None
        items.append({"id": row.get("id", row.get("question_id", len(items))), "prompt": text})
    if not items:
        raise UserError(f"--prompts {args.prompts}: no prompts")
    return items


def cmd_generate(args) -> int:
    spec, sampling = spec_from_args(args)
    items = read_prompts(args)
    for it in items:
        if not isinstance(it["prompt"], str) or not it["prompt"].strip():
            raise UserError(f"prompt {it['id']!r}: the prompt is empty")
    from workbench.pipeline import Workbench

    try:
        wb = Workbench.load(args.target, args.draft, args.dtype, args.device, args.attention, spec.speculative,
                            args.hot_tokens)
        encoded = [wb.encode(it["prompt"], args.raw) for it in items]
    except ValueError as err:
        raise UserError(str(err)) from None
    limit = wb.target.config.max_position_embeddings
    for it, ids in zip(items, encoded):
        if len(ids) + args.max_new_tokens + spec.num_draft_tokens > limit:
            raise UserError(f"prompt {it['id']!r} has {len(ids)} tokens: with --max-new-tokens "
                            f"{args.max_new_tokens} it exceeds the model's context of {limit}")
    print(f"target {wb.target_dir} ({args.dtype}), draft {wb.draft_source}, {spec.describe()}", file=sys.stderr)
    if args.cuda_graphs and (wb.target.lm_head.weight.device.type != "cuda" or wb.target.attention_backend != "triton"):
        raise UserError("--cuda-graphs needs a CUDA device and the triton attention backend")
    wb.cuda_graphs = args.cuda_graphs
    if wb.attention is not None and wb.attention.ok:  # a fallback already said so, on one line
        print(wb.attention.message, file=sys.stderr)
    trace_file = open(args.trace, "w", encoding="utf-8") if args.trace else None
    sink = (lambda t: trace_file.write(json.dumps(t) + "\n")) if trace_file else None
    bs = args.batch_size
    for start in range(0, len(items), bs):  # each batch decodes together, ragged lengths and all
        reqs, seconds = wb.generate(encoded[start : start + bs], spec, sampling, args.max_new_tokens, sink)
        for it, req in zip(items[start : start + bs], reqs):
            out = result_record(wb, it, req, seconds, spec)
            if args.json:
                print(json.dumps(out), flush=True)
            else:
                print(out["text"], flush=True)
                print(f"[{out['new_tokens']} tokens, {out['tokens_per_s']} tok/s" +
                      (f", tau {out['tau']}]" if "tau" in out else "]"), file=sys.stderr)
    if trace_file:
        trace_file.close()
    return 0


def result_record(wb, item: dict, req, seconds: float, spec) -> dict:
    out = {
        "id": item["id"], "prompt": item["prompt"], "output_ids": req.output_ids,
        "text": wb.tokenizer.decode(req.output_ids, skip_special_tokens=True),
        "new_tokens": len(req.output_ids), "target_forwards": req.target_forwards,
        "seconds": round(seconds, 4), "tokens_per_s": round(len(req.output_ids) / max(seconds, 1e-9), 2),
    }
    if spec.speculative:
        out["tau"] = round(sum(req.accept_lengths) / max(len(req.accept_lengths), 1), 3)
        out["accept_lengths"] = req.accept_lengths
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    from workbench import store

    store.add_fetch_parser(sub)
    gen = sub.add_parser("generate", help="decode prompts with vanilla, linear or eagle2")
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one user message")
    src.add_argument("--prompts", help="JSONL file: 'prompt' or 'turns' (first turn), optional 'id'/'question_id'")
    add_spec_args(gen)
    add_model_args(gen)
    gen.add_argument("--raw", action="store_true", help="skip the chat template")
    gen.add_argument("--batch-size", type=_positive("--batch-size"), default=1,
                     help="prompts decoded together (seconds and tok/s are then per batch)")
    gen.add_argument("--json", action="store_true", help="one JSON object per prompt on stdout")
    gen.add_argument("--trace", help="write every step trace (JSONL) to this file")
    gen.set_defaults(func=cmd_generate)
    __import__("workbench.bench.suite", fromlist=["add_bench_parser"]).add_bench_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
