"""Command line: ``python -m workbench {fetch,generate,bench}``.

Errors a user can cause print one line to stderr and exit 2; no traceback wall.
"""

from __future__ import annotations

import json
import sys

import torch

from workbench import store
from workbench.attention import BACKEND, default_backend
from workbench.bench.suite import add_bench_parser
from workbench.device import default_device
from workbench.engine.config import check_context
from workbench.engine.policy import POLICY_GRAMMAR, NamedPolicy, read_policy
from workbench.errors import ArgumentParser, UserError, as_user_error, reports_user_errors
from workbench.jsonl import prompt_rows
from workbench.flags import (add_model_args, add_spec_args, default_tree_pick, load_from_args, new_file, positive,
                             spec_from_args)
from workbench.metrics import requests_serving, stop_counts, tau
from workbench.progress import StatusLine


def read_prompts(args) -> list[dict]:
    """[{"id", "prompt"}] from --prompt or a JSONL --prompts file (``prompt`` or ``turns[0]``)."""
    if args.prompt is not None:
        return [{"id": 0, "prompt": args.prompt}]
    with as_user_error("--prompts "):
        rows = prompt_rows(args.prompts)
    items = [{"id": row.get("id", row.get("question_id", i)), "prompt": text} for i, (row, text) in enumerate(rows)]
    if not items:
        raise UserError(f"--prompts {args.prompts}: no prompts")
    return items


def policy_from_args(args, spec) -> NamedPolicy | None:
    """``--policy`` (None: the method every step, as without it), checked before anything loads."""
    if args.policy is None:
        return None
    with as_user_error("--policy: "):
        return read_policy(args.policy, spec)


def cmd_generate(args) -> int:
    spec, sampling = spec_from_args(args)
    named = policy_from_args(args, spec)
    settings = named.settings() if named is not None else [spec]
    speculative = any(s.speculative for s in settings)
    depth = max((s.num_steps for s in settings if s.speculative), default=0)  # vLLM's positions
    items = read_prompts(args)
    for it in items:
        if not isinstance(it["prompt"], str) or not it["prompt"].strip():
            raise UserError(f"prompt {it['id']!r}: the prompt is empty")
    device = args.device or default_device()
    check_cuda_graphs(args.cuda_graphs, device, args.attention or default_backend(device))  # before the load
    wb = load_from_args(args, speculative)
    with as_user_error():
        encoded = [wb.encode(it["prompt"], args.raw) for it in items]
    for it, ids in zip(items, encoded):
        with as_user_error(f"prompt {it['id']!r}: "):
            check_context(spec, wb.target.config.max_position_embeddings, len(ids), args.max_new_tokens)
    what = spec.describe() if named is None else f"policy {args.policy}"
    chosen = default_tree_pick(args) if named is None else None
    if chosen is not None:  # eagle2 without tree flags: say which tree runs, why, and the others' trees
        print(chosen.line(), file=sys.stderr)
    print(f"target {wb.target_dir} ({wb.dtype_name}), draft {wb.draft_source}, {what}", file=sys.stderr)
    policy = None
    if named is not None:  # built now: auto weighs its settings by this machine's step cost, measured once
        from workbench.measure.step_cost import policy_costs

        costs = policy_costs(wb, [named], log=lambda msg: print(msg, file=sys.stderr))
        policy = named.build(costs.get(named.name))
    print(wb.linear_order.describe(), file=sys.stderr)
    check_cuda_graphs(args.cuda_graphs, wb.target.lm_head.weight.device, wb.target.attention_backend)  # after a fallback
    wb.cuda_graphs = args.cuda_graphs
    if wb.attention is not None and wb.attention.ok:  # a fallback already said so, on one line
        print(wb.attention.message, file=sys.stderr)
    trace_file = open(args.trace, "w", encoding="utf-8") if args.trace else None
    sink = (lambda t: trace_file.write(json.dumps(t) + "\n")) if trace_file else None
    bs, status = args.batch_size, StatusLine(sys.stderr)  # progress only when stderr is a terminal
    for start in range(0, len(items), bs):  # each batch decodes together, ragged lengths and all
        batch = items[start : start + bs]
        label = batch_label(batch, start, len(items))

        def show(requests, seconds: float, label: str = label) -> None:
            status.update(progress_text(label, requests, seconds, speculative))

        with as_user_error():  # a request the KV capacity can never hold: its size and the capacity
            reqs, seconds = wb.generate(encoded[start : start + bs], spec, sampling, args.max_new_tokens,
                                        trace_sink=sink,
                                        on_step=show if status.enabled else None, policy=policy,
                                        kv_slots=args.kv_slots)
        status.finish(progress_text(label, reqs, seconds, speculative))
        for n, (it, req) in enumerate(zip(batch, reqs), start):
            out = result_record(wb, it, req=req, seconds=seconds, depth=depth if speculative else 0)
            if args.json:
                print(json.dumps(out), flush=True)
                continue
            if args.prompts is not None:  # several answers: each under its id, a blank line between
                print(("\n" if n else "") + answer_heading(out["id"]), flush=True)
            print(out["text"], flush=True)
            if not status.enabled:  # else the finished status line said it
                print(f"[{out['new_tokens']} tokens, {out['tokens_per_s']} tok/s" +
                      (f", tau {out['tau']}]" if "tau" in out else "]"), file=sys.stderr)
    if trace_file:
        trace_file.close()
    return 0


def answer_heading(item_id) -> str:
    """The line above each answer of a prompts file, as ``head`` marks each file it prints."""
    return f"==> {item_id} <=="


def batch_label(batch: list[dict], start: int, total: int) -> str:
    """Which prompts a batch holds, for its progress line: ``[2/5] id 81`` or ``[1-4/10]``."""
    if len(batch) == 1:
        return f"[{start + 1}/{total}] id {batch[0]['id']}"
    return f"[{start + 1}-{start + len(batch)}/{total}]"


def progress_text(label: str, requests, seconds: float, speculative: bool) -> str:
    """One progress line for a batch as it stands: tokens so far, τ so far (``speculative``), tokens/s."""
    tokens = sum(len(r.output_ids) for r in requests)
    text = f"{label}: {tokens} token{'s' * (tokens != 1)}"
    if speculative:
        so_far = tau([n for r in requests for n in r.accept_lengths])
        text += ", tau " + ("-" if so_far is None else f"{so_far:.2f}")
    return text + f", {tokens / max(seconds, 1e-9):.1f} tok/s, {seconds:.1f} s"


def check_cuda_graphs(cuda_graphs: bool | None, device, backend: str) -> None:
    """``--cuda-graphs`` replays the triton kernel's launches: refuse it on another device or backend."""
    if cuda_graphs and (torch.device(device).type != "cuda" or not BACKEND[backend].graphable):
        raise UserError("--cuda-graphs needs a CUDA device and the triton attention backend")


def result_record(wb, item: dict, req, seconds: float, depth: int) -> dict:
    """One answer as ``--json`` prints it; a speculative run (``depth``: the deepest setting's
    num_steps, > 0) adds τ, each step's counts, vLLM's metrics (``metrics.ServingMetrics``) and,
    when the engine kept them (``--trace``), the steps per stop cause (``engine/stops.py``)."""
    out = {
        "id": item["id"], "prompt": item["prompt"], "output_ids": req.output_ids,
        "text": wb.tokenizer.decode(req.output_ids, skip_special_tokens=True),
        "new_tokens": len(req.output_ids), "target_forwards": req.target_forwards,
        "seconds": round(seconds, 4), "tokens_per_s": round(len(req.output_ids) / max(seconds, 1e-9), 2),
    }
    if depth and req.accept_lengths:  # under a policy, a request may never have speculated
        out["tau"] = round(tau(req.accept_lengths) or 0.0, 3)
        out["accept_lengths"] = req.accept_lengths  # tokens each verify step emitted: τ's
        out["drafts_accepted"] = req.drafts_accepted  # what each step's walk accepted, cut or not
        serving = requests_serving(req, positions=depth)
        if serving is not None:  # None: no step drafted anything (an n-gram lookup that never matched)
            out["vllm_metrics"] = serving.as_dict()
        if req.stop_causes:
            out["stop_causes"] = stop_counts(req.stop_causes)
    return out


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m workbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    store.add_fetch_parser(sub)
    gen = sub.add_parser("generate", help="decode prompts with vanilla, linear, eagle2 or static")
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one user message")
    src.add_argument("--prompts", help="JSONL file: 'prompt' or 'turns' (first turn), optional 'id'/'question_id'")
    add_spec_args(gen)
    add_model_args(gen)
    gen.add_argument("--raw", action="store_true", help="skip the chat template")
    gen.add_argument("--batch-size", type=positive("--batch-size"), default=1,
                     help="prompts decoded together (seconds and tok/s are then per batch)")
    gen.add_argument("--policy", metavar="POLICY",
                     help=f"choose the setting per step from the running batch: {POLICY_GRAMMAR} (default: the "
                          "method above at every step)")
    gen.add_argument("--kv-slots", type=positive("--kv-slots"), default=None,
                     help="the KV pool's capacity in token slots (default: room for every request of a batch); a "
                          "request that could never fit is refused with its size and the capacity")
    gen.add_argument("--json", action="store_true", help="one JSON object per prompt on stdout")
    gen.add_argument("--trace", type=new_file,
                     help="write every step trace (JSONL) to this file, in a folder that exists (default: no trace)")
    gen.set_defaults(func=cmd_generate)
    add_bench_parser(sub)
    return parser


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
