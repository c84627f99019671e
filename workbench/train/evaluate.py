"""Measure draft heads: top-1 agreement with the target, and the accept length τ and speed of
speculative methods on MT-bench first turns (Spec-Bench questions 81-160).

    python -m workbench.train evaluate                     # shipped head, bf16, 20 questions
    python -m workbench.train evaluate --dtype fp32 --hot 8192
    python -m workbench.train evaluate --head DIR --held-out ~/.cache/workbench/train-data-v2 --methods
    python -m workbench.train evaluate --head A B C --agreement --methods   # several heads, one set of answers

``--held-out DATA`` first prints the head's top-1 agreement with the target on the conversations
``python -m workbench.train train`` holds out of a ``generate`` directory (every
``--val-every``-th prompt's greedy first answer, among the shards that hold the first
``--held-out-tokens`` training response tokens): at draft step 1 and, fed the head's own
outputs, at steps 2 and 3. ``--agreement`` prints the same measures on the MT-bench questions
themselves: the target's plain greedy answers, its features recomputed in fp32, the head
teacher-forced on them. Step-1 top-1 there is what the engine's depth-1 acceptance measures,
without a tree. ``--methods`` with no names skips τ.

With several ``--head`` directories, each measure is printed for every head in turn, on the same
held-out conversations and the same greedy answers (computed once).

For τ, a head that ships a ``hot_tokens.json`` drafts among the 4096 most frequent tokens of
that list, as the engine does by default (``--hot N``: the first N of them; ``--hot 0``: the full
vocabulary). Verification always uses the full vocabulary, and so do the agreement measures.

Greedy, batched (all questions decode together), ``--max-new`` tokens. For each method it prints
τ = mean over every verify step of every question of the tokens emitted by that step, the
per-question mean τ, how many outputs equal plain greedy decoding, and the wall time.
Evaluation only: these questions are never used for training. The studies that break these
measures down (by token source, category, target confidence; where a tree's accepted paths go;
what a perfect head would reach) are ``python -m experiments.head_studies``.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean

import torch

from workbench.measure import specbench
from workbench.measure.specbench import DATA_FILE as QUESTIONS
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.errors import UserError, as_user_error
from workbench.metrics import tau

# in the benchmark's grammar (measure/methods.py); linear:1 accepts exactly when the head's top-1 is
# the target's token
DEFAULT_METHODS = ("linear:1", "linear:5", "eagle2:8/5/4", "eagle2:60/6/10")


def speculative_methods(names: list[str]) -> dict[str, SpecConfig]:
    """{name: config} of ``names`` in the benchmark's grammar; ValueError for a name that is
    unknown or not speculative (τ needs a verify step)."""
    from workbench.measure.methods import parse_methods

    methods = parse_methods(",".join(names)) if names else []
    plain = [m.name for m in methods if not m.speculative]
    if plain:
        raise ValueError(f"τ needs a speculative method (linear:S, eagle2:D/S/K, static:D), got {', '.join(plain)}")
    return {m.name: m.spec for m in methods}


def mt_bench_first_turns(path: Path, n: int) -> list[str]:
    """``n`` MT-bench first turns spread evenly over its eight categories (``specbench``)."""
    return [q.turns[0] for q in specbench.mt_bench_first_turns(n, path)]


def run(wb, prompts: list[list[int]], spec: SpecConfig, max_new: int, *, temperature: float = 0.0,
        seed: int = 0, traces: list | None = None) -> dict:
    """τ of ``spec`` on ``prompts``; ``traces``: a list that gets every step's trace."""
    sink = traces.append if traces is not None else None
    reqs, secs = wb.generate(prompts, spec, SamplingParams(temperature=temperature, seed=seed), max_new,
                             trace_sink=sink)
    steps = [a for r in reqs for a in r.accept_lengths]
    per_q = [tau(r.accept_lengths) for r in reqs if r.accept_lengths]
    return {"outputs": [r.output_ids for r in reqs], "tau": tau(steps) or 0.0,
            "tau_per_question": mean(per_q) if per_q else 0.0, "seconds": secs,
            "tokens": sum(len(r.output_ids) for r in reqs)}


def held_out_sequences(data: Path, target, *, max_response_tokens: int | None, val_every: int,
                       taps: tuple[int, ...] = ()) -> list:
    """The conversations training holds out of ``data``; ``taps``: ``fused_taps``'s."""
    from workbench.train.features import load_sequences

    _, val = load_sequences(data, target, max_response_tokens, val_every, taps=taps)
    if not val:
        raise ValueError(f"{data}: no held-out conversations")
    return val


def answer_sequences(target, prompts: list[list[int]], outputs: list[list[int]], taps: tuple[int, ...] = ()) -> list:
    """Training sequences of ``prompts`` + ``outputs``, with the target's features (one prefill
    each); ``taps``: also the residual streams a fused head reads (``fused_taps``)."""
    from workbench.train.batches import Sequence
    from workbench.train.features import target_features

    seqs = [p + o for p, o in zip(prompts, outputs)]
    h = target.config.hidden_size
    return [Sequence(torch.tensor(s), f[:, -h:].half(), len(p), f[:, :-h].half() if taps else None)
            for s, f, p in zip(seqs, target_features(target, seqs, taps=taps), prompts) if len(s) - 1 - len(p) > 0]


def head_fuse_layers(head_dir: Path) -> tuple[int, ...]:
    """The target layers an exported head fuses (its config's ``fuse_layers``; () for EAGLE's kind)."""
    from workbench.models.draft import fuse_layers_in

    cfg = Path(head_dir) / "config.json"
    return fuse_layers_in(json.loads(cfg.read_text())) if cfg.exists() else ()


def fused_taps(head_dirs: list[Path]) -> tuple[int, ...]:
    """The target layers to taps for teacher-forcing every head of ``head_dirs`` on one set of
    features (plain heads ignore the tapped layers); fused heads must agree on them."""
    fused = {head_fuse_layers(d) for d in head_dirs} - {()}
    if len(fused) > 1:
        raise ValueError(f"these heads fuse different target layers ({sorted(fused)}): measure them in separate runs")
    return next(iter(fused), ())


def load_head(head_dir: Path, target):
    """The exported head in ``head_dir``, fp32, in eval mode, as training builds it."""
    from workbench.train.loop import init_head, init_weights, layers_in

    state = init_weights(head_dir)
    head = init_head(target, 0, layers_in(state), head_fuse_layers(head_dir)).to(target.lm_head.weight.device)
    head.load_state_dict(state)
    return head.eval()


def measure_head(head_dir: Path, target, val: list, coverage: tuple[int, ...] = ()) -> dict:
    """Top-1 (steps 1-3), feature loss and CE of the exported head in ``head_dir`` (no noise, full
    vocabulary) teacher-forced on ``val`` (``held_out_sequences`` or ``answer_sequences``), with
    their count; ``coverage``: ``evaluate_loss``'s."""
    from workbench.train.loop import TrainConfig, evaluate_loss

    return {"conversations": len(val), "positions": sum(s.num_targets for s in val),
            **evaluate_loss(load_head(head_dir, target), target, val, TrainConfig(), coverage=coverage)}


def report(label: str, v: dict) -> None:
    print(f"{label}: {v['conversations']} conversations, {v['positions']:,} positions; top-1 step 1 {v['top1']:.3f}, "
          f"step 2 {v['top1_step2']:.3f}, step 3 {v['top1_step3']:.3f}; feature loss {v['feat']:.3f}, "
          f"CE {v['ce']:.2f}", flush=True)


# ---- the command ------------------------------------------------------------------------------


def add_head_args(ap) -> None:
    """The heads, the target's dtype and the MT-bench questions: what every measurement of a head
    takes (``evaluate`` and ``experiments.head_studies``)."""
    from workbench.models.heads import default_draft_dir
    from workbench.pipeline import HOT_TOKENS_DEFAULT

    ap.add_argument("--head", type=Path, nargs="+", default=[default_draft_dir()],
                    help="one or more head directories (default: the shipped head)")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16", help="dtype of the target and the heads")
    ap.add_argument("--questions", type=Path, default=QUESTIONS, help="MT-bench questions (JSONL)")
    ap.add_argument("-n", type=int, default=20, help="number of questions")
    ap.add_argument("--max-new", type=int, default=128, help="new tokens per answer at most")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="0 = greedy (outputs are checked against plain decoding); > 0 samples (seeded, "
                         "lossless in distribution, so outputs are not compared)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (with --temperature > 0)")
    ap.add_argument("--hot", type=int, default=None,
                    help="τ: draft only among the N most frequent tokens of each head's hot_tokens.json "
                         f"(default: {HOT_TOKENS_DEFAULT} where the head has one, as the engine; 0: the full "
                         "vocabulary)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")


def add_held_out_args(ap) -> None:
    ap.add_argument("--held-out", type=Path, default=None, metavar="DATA",
                    help="also the held-out top-1 on this generate directory (default: none)")
    ap.add_argument("--held-out-tokens", type=int, default=None,
                    help="with --held-out: the shards up to this many training response tokens (default: all)")
    ap.add_argument("--val-every", type=int, default=20, help="with --held-out: every N-th prompt is held out")


def add_parser(sub) -> None:
    """Register ``evaluate`` on ``python -m workbench.train``'s subparsers."""
    ap = sub.add_parser("evaluate", help="held-out and MT-bench agreement of heads, τ and speed of methods",
                        description=__doc__)
    add_head_args(ap)
    add_held_out_args(ap)
    ap.add_argument("--agreement", action="store_true",
                    help="also the head's agreement teacher-forced on the target's greedy answers to the questions")
    ap.add_argument("--methods", nargs="*", default=list(DEFAULT_METHODS),
                    help="τ of these, in the benchmark's grammar: linear:S, eagle2:D/S/K, static:D, each "
                         "optionally @ngram or @exit:N (with no names: no τ at all)")
    ap.set_defaults(func=cmd_evaluate)


def check_head_args(args) -> None:
    """The mistakes in the flags of ``add_head_args``, before anything loads."""
    if args.temperature < 0 or args.n < 1 or args.max_new < 1:
        raise UserError("--temperature must be >= 0, -n and --max-new >= 1")
    if args.hot is not None and args.hot < 0:
        raise UserError("--hot must be >= 0")
    if not args.questions.is_file():
        raise UserError(f"--questions {args.questions}: no such file")
    for head in args.head:
        if not (head / "config.json").exists():
            raise UserError(f"--head {head}: no head there (no config.json)")
    if args.threads:
        torch.set_num_threads(args.threads)


def check_held_out_args(args) -> None:
    """The mistakes in the flags of ``add_held_out_args``."""
    if args.val_every < 1:
        raise UserError("--val-every must be >= 1")
    if args.held_out is not None and not args.held_out.is_dir():
        raise UserError(f"--held-out {args.held_out}: no such directory")


def load_workbench(args, teacher: bool):
    """(the Workbench with the first head, the fp32 target that teacher-forces heads or None,
    the target layers every head's features taps)."""
    from workbench.models.loading import load_target
    from workbench.pipeline import Workbench

    with as_user_error():
        taps = fused_taps(args.head)  # one set of teacher-forcing features serves every head
        wb = Workbench.load(draft=str(args.head[0]), dtype=args.dtype, hot_tokens=args.hot)
    if not teacher:
        return wb, None, taps
    target = wb.target if args.dtype == "fp32" else load_target(wb.target_dir, torch.float32)
    return wb, target.requires_grad_(False), taps


def each_head(wb, args):
    """``wb`` with each head of ``--head`` in turn: the same target, each head with its own hot tokens."""
    yield wb
    for head in args.head[1:]:
        with as_user_error():
            wb = wb.with_draft(str(head), args.hot)
        yield wb


def named(label: str, head: Path, heads: list[Path]) -> str:
    """``label``, with the head's directory when several heads share one run."""
    return f"{label} [{head}]" if len(heads) > 1 else label


def load_held_out(args, target, taps: tuple[int, ...]) -> list:
    """``held_out_sequences`` of ``--held-out``, a missing or empty directory as one ``error:`` line."""
    try:
        return held_out_sequences(args.held_out, target, max_response_tokens=args.held_out_tokens,
                                  val_every=args.val_every, taps=taps)
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from None


def tau_table(wb, prompts: list[list[int]], *, base: dict, methods: dict[str, SpecConfig], args) -> None:
    """One row per method: τ, τ per question, outputs equal to greedy, tokens and seconds."""
    greedy = args.temperature == 0
    mode = "greedy" if greedy else f"temperature {args.temperature:g}, seed {args.seed}"
    print(f"head {wb.draft_source}; {args.dtype}, {len(prompts)} MT-bench first turns, {args.max_new} new tokens, "
          f"{mode}; verified against the full vocabulary")
    print("| method | τ (all steps) | τ (mean per question) | outputs = greedy | tokens | seconds |")
    print("|---|---|---|---|---|---|")
    print(f"| vanilla | 1.00 | 1.00 | - | {base['tokens']} | {base['seconds']:.1f} |")
    for name, spec in methods.items():
        r = run(wb, prompts, spec, args.max_new, temperature=args.temperature, seed=args.seed)
        same = f"{sum(a == b for a, b in zip(r['outputs'], base['outputs']))}/{len(prompts)}" if greedy else "sampled"
        print(f"| {name} | {r['tau']:.2f} | {r['tau_per_question']:.2f} | {same} | {r['tokens']} "
              f"| {r['seconds']:.1f} |", flush=True)


def cmd_evaluate(args) -> int:
    """``python -m workbench.train evaluate``: held-out agreement, MT-bench agreement, τ."""
    check_head_args(args)
    check_held_out_args(args)
    if args.agreement and args.temperature != 0:
        raise UserError("--agreement measures on greedy answers: leave --temperature at 0")
    with as_user_error("--methods: "):
        methods = speculative_methods(args.methods)
    wb, target, taps = load_workbench(args, teacher=args.held_out is not None or args.agreement)
    if args.held_out is not None:
        val = load_held_out(args, target, taps)
        for head in args.head:
            label = f"held out of {args.held_out} (every {args.val_every}th prompt)"
            report(named(label, head, args.head), measure_head(head, target, val))
    if not methods and not args.agreement:
        return 0
    prompts = [wb.encode(q) for q in mt_bench_first_turns(args.questions, args.n)]
    base = run(wb, prompts, SpecConfig("vanilla"), args.max_new, temperature=args.temperature, seed=args.seed)
    if args.agreement:
        val = answer_sequences(target, prompts, base["outputs"], taps)
        for head in args.head:
            label = f"teacher-forced on the greedy answers to {len(prompts)} MT-bench first turns"
            report(named(f"{label} ({args.max_new} tokens)", head, args.head), measure_head(head, target, val))
    if methods:
        for wb in each_head(wb, args):
            tau_table(wb, prompts, base=base, methods=methods, args=args)
    return 0
