"""Studies of a draft head, beside the product's measurement (``python -m workbench.train
evaluate``): each answers a question of docs/bench/head-training.md.

    python -m experiments.head_studies agreement --mt-bench --held-out DATA --answer-tokens 128
    python -m experiments.head_studies agreement --mt-bench --by-source --pair-counts DATA --by-category
    python -m experiments.head_studies trees --tree-use --methods eagle2:8/5/4 eagle2:60/6/10
    python -m experiments.head_studies trees --temperature 1 --ceiling --methods linear:5 eagle2:8/5/4
    python -m experiments.head_studies trees --ceiling --early-exit 24,26,28 --methods eagle2:8/5/4

``agreement`` breaks the head's top-1 agreement with the target down, on the held-out
conversations of a ``generate`` directory (``--held-out``; ``--answer-tokens N`` cuts each answer
to its first N tokens, as MT-bench's stop at ``--max-new``) and on the target's greedy answers to
MT-bench first turns (``--mt-bench``, the head teacher-forced on them): how often the target's
token is among the head's K most likely at step 1 (``--coverage``: what a depth-1 fan of K
children can catch) and top-1 per bin of the target's own confidence; ``--by-source`` splits
step-1 top-1 by where the target's token comes from (``token_source``): it continues a token
pair of the prompt (a copy), repeats a pair from earlier in the answer, or is new, each also
where the target is at least 90 % sure of its token; ``--pair-counts DATA`` splits each source
further by how often its token pair occurs in the answers of the training data DATA (never,
1-19 times, 20 or more); ``--by-category`` gives MT-bench top-1 at steps 1 and 3 per category.

``trees`` asks what the engine's trees make of the head. ``--tree-use``: where a tree's accepted
paths go (the depth of its top-1 spine, how often the accepted path leaves it, the τ of the
spine alone). ``--ceiling``: τ expected over the sampling coins (exact, from each step's tree
and verify logits: ``workbench.analysis.oracle``) beside the expectation of the tree a perfect head
would draft at the same contexts (the engine's procedure and budget, scored by the target's own
distribution): how much of what the budget allows at this temperature the head wins.
``--early-exit N,N,...`` adds drafts of known quality to that table: the target cut after N
layers drafting with the same procedure and budget.
"""

from __future__ import annotations

from pathlib import Path

from experiments.token_sources import report_sources, response_pair_counts, top1_by_source
from experiments.tree_studies import ceiling_tables, tree_use, tree_use_line
from workbench.measure import specbench
from workbench.engine.config import SpecConfig
from workbench.errors import ArgumentParser, UserError, as_user_error, reports_user_errors
from workbench.train.batches import Sequence
from workbench.train.evaluate import (DEFAULT_METHODS, add_head_args, add_held_out_args, answer_sequences,
                                      check_head_args, check_held_out_args, each_head, load_held_out, load_workbench,
                                      measure_head, mt_bench_first_turns, named, report, run, speculative_methods)


def cut_answers(val: list[Sequence], answer_tokens: int | None) -> list[Sequence]:
    """Each conversation with its answer cut to the first ``answer_tokens`` tokens (None: whole)."""
    if answer_tokens is None:
        return val
    n = answer_tokens
    return [Sequence(s.tokens[: s.prompt_len + n], s.features[: s.prompt_len + n], s.prompt_len,
                     None if s.aux is None else s.aux[: s.prompt_len + n]) for s in val]


def by_category(categories: list[str], prompts: list, outputs: list) -> dict[str, tuple[list, list]]:
    """(prompts, outputs) of each category, in the order the categories first appear."""
    groups: dict[str, tuple[list, list]] = {}
    for c, p, o in zip(categories, prompts, outputs, strict=True):
        ps, os_ = groups.setdefault(c, ([], []))
        ps.append(p)
        os_.append(o)
    return groups


def report_coverage(v: dict) -> None:
    """The step-1 breakdowns of ``measure_head(..., coverage)``: in the head's top K, by confidence."""
    ks = sorted(int(k[len("in_top"):]) for k in v if k.startswith("in_top"))
    if not ks:
        return
    print("  step 1, target's token among the head's k most likely: "
          + ", ".join(f"k={k} {v[f'in_top{k}']:.3f}" for k in ks))
    print("  step 1 top-1 by the target's confidence p(argmax): "
          + ", ".join(f"[{b['lo']:.1f}, {b['hi']:.1f}{']' if b['hi'] == 1 else ')'} {b['share']:.0%} of positions, "
                      + ("-" if b["top1"] is None else f"{b['top1']:.3f}") for b in v["confidence"]), flush=True)


def breakdown(label: str, val: list, target, args, pairs) -> None:
    """Every head's agreement on ``val``, with the breakdowns the flags ask for."""
    coverage = tuple(sorted(set(args.coverage)))
    for head in args.head:
        v = measure_head(head, target, val, coverage)
        report(named(label, head, args.head), v)
        report_coverage(v)
        if args.by_source:
            report_sources("step-1 top-1 where the target's token", top1_by_source(head, target, val, pairs),
                           args.pair_counts)


def report_categories(args, target, categories: list[str], prompts: list, outputs: list, capture) -> None:
    groups = {c: answer_sequences(target, ps, os_, capture)
              for c, (ps, os_) in by_category(categories, prompts, outputs).items()}
    for head in args.head:
        cells = []
        for c, seqs in groups.items():
            v = measure_head(head, target, seqs)
            cells.append(f"{c} ({v['conversations']}, {v['positions']:,} positions) "
                         f"{v['top1']:.3f} / {v['top1_step3']:.3f}")
        print(named("  top-1 at step 1 / step 3 by category", head, args.head) + ": " + "; ".join(cells), flush=True)


def cmd_agreement(args) -> int:
    check_head_args(args)
    check_held_out_args(args)
    if args.held_out is None and not args.mt_bench:
        raise UserError("agreement measures --held-out DATA or --mt-bench: give one of them")
    if any(k < 1 for k in args.coverage):
        raise UserError("--coverage values must be >= 1")
    if args.answer_tokens is not None and (args.answer_tokens < 1 or args.held_out is None):
        raise UserError("--answer-tokens takes a count >= 1 and cuts the --held-out answers")
    if args.by_category and not args.mt_bench:
        raise UserError("--by-category breaks down --mt-bench: add --mt-bench")
    if args.mt_bench and args.temperature != 0:
        raise UserError("--mt-bench measures on greedy answers: leave --temperature at 0")
    if args.pair_counts is not None and not (args.by_source and args.pair_counts.is_dir()):
        raise UserError(f"--pair-counts {args.pair_counts} splits --by-source further: add --by-source, "
                        "and give a generate directory")
    wb, target, capture = load_workbench(args, teacher=True)
    try:
        pairs = None if args.pair_counts is None else response_pair_counts(args.pair_counts)
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
    if args.held_out is not None:
        val = cut_answers(load_held_out(args, target, capture), args.answer_tokens)
        breakdown(f"held out of {args.held_out} (every {args.val_every}th prompt)", val, target, args, pairs)
    if args.mt_bench:
        rows = specbench.mt_bench_first_turns(args.n, args.questions)
        prompts = [wb.encode(q.turns[0]) for q in rows]
        outputs = run(wb, prompts, SpecConfig("vanilla"), args.max_new)["outputs"]
        label = f"teacher-forced on the greedy answers to {len(prompts)} MT-bench first turns ({args.max_new} tokens)"
        breakdown(label, answer_sequences(target, prompts, outputs, capture), target, args, pairs)
        if args.by_category:
            report_categories(args, target, [q.category for q in rows], prompts, outputs, capture)
    return 0


def cmd_trees(args) -> int:
    check_head_args(args)
    if not (args.tree_use or args.ceiling):
        raise UserError("trees measures --tree-use or --ceiling: give one of them")
    with as_user_error("--methods: "):
        methods = speculative_methods(args.methods)
    try:
        exits = tuple(int(x) for x in args.early_exit.split(",") if x.strip())
    except ValueError:
        raise UserError(f"--early-exit {args.early_exit!r}: give whole numbers of layers, as 12,18,24") from None
    if not methods:
        raise UserError("--methods: name at least one")
    if exits and not args.ceiling:
        raise UserError("--early-exit adds drafts to --ceiling's table: add --ceiling")
    wb, _, _ = load_workbench(args, teacher=False)
    layers = wb.target.config.num_layers
    if any(not 1 <= n <= layers for n in exits):
        raise UserError(f"--early-exit {args.early_exit}: the target has {layers} layers, so each must be 1..{layers}")
    prompts = [wb.encode(q) for q in mt_bench_first_turns(args.questions, args.n)]
    mode = "greedy" if args.temperature == 0 else f"temperature {args.temperature:g}, seed {args.seed}"
    for wb in each_head(wb, args):
        print(f"head {wb.draft_source}; {args.dtype}, {len(prompts)} MT-bench first turns, {args.max_new} new tokens, "
              f"{mode}")
        for name, spec in methods.items() if args.tree_use else ():
            if spec.method != "linear":  # a chain is all spine
                traces = []
                run(wb, prompts, spec, args.max_new, temperature=args.temperature, seed=args.seed, traces=traces)
                print(tree_use_line(name, tree_use(traces)), flush=True)
        if args.ceiling:
            ceiling_tables(wb, prompts, methods, args.max_new, args.temperature, args.seed, exits, mode)
    return 0


def build_parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m experiments.head_studies", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("agreement", help="where a head's top-1 agrees with the target, broken down")
    add_head_args(p)
    add_held_out_args(p)
    p.add_argument("--mt-bench", action="store_true",
                   help="also teacher-forced on the target's greedy answers to the MT-bench questions")
    p.add_argument("--answer-tokens", type=int, default=None, metavar="N",
                   help="with --held-out: only the first N tokens of each answer (default: all; "
                        "--mt-bench's answers stop at --max-new)")
    p.add_argument("--coverage", type=int, nargs="*", default=[2, 4, 10], metavar="K",
                   help="how often the target's token is among the head's K most likely at step 1, and top-1 by "
                        "the target's confidence; none: skip both")
    p.add_argument("--by-source", action="store_true",
                   help="step-1 top-1 split by where the target's token comes from (copies a token pair of the "
                        "prompt, repeats one of the answer, or new)")
    p.add_argument("--pair-counts", type=Path, default=None, metavar="DATA",
                   help="with --by-source: also split each source by how often its token pair occurs in the "
                        "answers of this generate directory (unseen, 1-19 times, 20+; default: none)")
    p.add_argument("--by-category", action="store_true",
                   help="with --mt-bench: top-1 per MT-bench category (writing, roleplay, ... 10 questions each in 80)")
    p.set_defaults(func=cmd_agreement)
    p = sub.add_parser("trees", help="where a tree's accepted paths go; what a perfect head would reach")
    add_head_args(p)
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS),
                   help="the methods, in the benchmark's grammar: linear:S, eagle2:D/S/K, static:D")
    p.add_argument("--tree-use", action="store_true",
                   help="for each tree method, where its accepted paths go: the depth of the top-1 spine, how "
                        "often the accepted path leaves it, and the τ of the spine alone")
    p.add_argument("--ceiling", action="store_true",
                   help="for each method, τ expected over the coins (exact, from each step's tree) beside the τ "
                        "the same tree budget gives a perfect head (one that drafts from the target's own "
                        "distribution) at the same contexts")
    p.add_argument("--early-exit", default="", metavar="N,N,...",
                   help="with --ceiling: also draft with the target cut after each of these numbers of layers "
                        "(its final norm and lm_head on the residual there), at the same contexts and budget: "
                        "E[τ] beside how often its top token is the target's on the answers (default: none)")
    p.set_defaults(func=cmd_trees)
    return ap


@reports_user_errors
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
