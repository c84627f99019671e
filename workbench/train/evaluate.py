"""Accept length τ of a draft head on MT-bench first turns (Spec-Bench questions 81-160).

    python -m workbench.train.evaluate                     # shipped head, bf16, 20 questions
    python -m workbench.train.evaluate --dtype fp32 --hot 8192
    python -m workbench.train.evaluate --head DIR --held-out ~/.cache/workbench/train-data-v2 --methods
    python -m workbench.train.evaluate --head A B C --agreement --methods   # several heads, one set of answers

``--held-out DATA`` first prints the head's top-1 agreement with the target on the conversations
``python -m workbench.train`` holds out of a ``workbench.train.generate`` directory (every
``--val-every``-th prompt's greedy first answer, among the shards that hold the first
``--held-out-tokens`` training response tokens): at draft step 1 and, fed the head's own
outputs, at steps 2 and 3; ``--held-out-answer-tokens N`` keeps only the first N tokens of each
answer, as long as ``--agreement``'s. ``--methods`` with no names skips τ.

``--agreement`` prints the same measures on the MT-bench questions themselves: the target's
plain greedy answers, its features recomputed in fp32, the head teacher-forced on them. Step-1
top-1 there is what the engine's depth-1 acceptance measures, without a tree. Both report, at
step 1, how often the target's token is among the head's ``--coverage`` K most likely (what a
depth-1 fan of K children can catch) and top-1 per bin of the target's own confidence.
``--by-category`` adds, with ``--agreement``, top-1 at steps 1 and 3 per MT-bench category.
``--by-source`` splits step-1 top-1 by where the target's token comes from (``token_source``):
it continues a token pair of the prompt (a copy), repeats a pair from earlier in the answer, or
is new; each also where the target is at least 90 % sure of its token. ``--pair-counts DATA``
splits each source further by how often its token pair occurs in the answers of the training
data ``DATA`` (never, 1-19 times, 20 or more).

``--ceiling`` adds, for each method, τ expected over the sampling coins (exact, from each step's
tree and verify logits: ``workbench.engine.oracle``) beside the expectation of the tree a perfect
head would draft at the same contexts (the engine's procedure and budget, scored by the target's
own distribution): how much of what the budget allows at this temperature the head wins.

With several ``--head`` directories, each measure is printed for every head in turn, on the same
held-out conversations and the same greedy answers (computed once).

For τ, a head that ships a ``hot_tokens.json`` drafts among the 4096 most frequent tokens of
that list, as the engine does by default (``--hot N``: the first N of them; ``--hot 0``: the full
vocabulary). Verification always uses the full vocabulary, and so do the agreement and held-out
measures.

Greedy, batched (all questions decode together), ``--max-new`` tokens. For each method it prints
τ = mean over every verify step of every question of the tokens emitted by that step, the
per-question mean τ, how many outputs equal plain greedy decoding, and the wall time.
Evaluation only: these questions are never used for training.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from statistics import mean

import torch

from workbench.bench import specbench
from workbench.bench.specbench import DATA_FILE as QUESTIONS
from workbench.engine.config import SpecConfig
from workbench.engine.sampling import SamplingParams
from workbench.errors import ArgumentParser
from workbench.metrics import tau

# in the benchmark's grammar (bench/methods.py); linear:1 accepts exactly when the head's top-1 is
# the target's token
DEFAULT_METHODS = ("linear:1", "linear:5", "eagle2:8/5/4", "eagle2:60/6/10")


def speculative_methods(names: list[str]) -> dict[str, SpecConfig]:
    """{name: config} of ``names`` in the benchmark's grammar; ValueError for a name that is
    unknown or not speculative (τ needs a verify step)."""
    from workbench.bench.methods import parse_methods

    methods = parse_methods(",".join(names)) if names else []
    plain = [m.name for m in methods if not m.speculative]
    if plain:
        raise ValueError(f"τ needs a speculative method (linear:S, eagle2:D/S/K, static:D), got {', '.join(plain)}")
    return {m.name: m.spec for m in methods}


def mt_bench_first_turns(path: Path, n: int) -> list[str]:
    """``n`` MT-bench first turns spread evenly over its eight categories (``specbench``)."""
    return [q.turns[0] for q in specbench.mt_bench_first_turns(n, path)]


def by_category(categories: list[str], prompts: list, outputs: list) -> dict[str, tuple[list, list]]:
    """(prompts, outputs) of each category, in the order the categories first appear."""
    groups: dict[str, tuple[list, list]] = {}
    for c, p, o in zip(categories, prompts, outputs, strict=True):
        ps, os_ = groups.setdefault(c, ([], []))
        ps.append(p)
        os_.append(o)
    return groups


def run(wb, prompts: list[list[int]], spec: SpecConfig, max_new: int, temperature: float = 0.0,
        seed: int = 0, traces: list | None = None) -> dict:
    """τ of ``spec`` on ``prompts``; ``traces``: a list that gets every step's trace."""
    sink = traces.append if traces is not None else None
    reqs, secs = wb.generate(prompts, spec, SamplingParams(temperature=temperature, seed=seed), max_new, sink)
    steps = [a for r in reqs for a in r.accept_lengths]
    per_q = [tau(r.accept_lengths) for r in reqs if r.accept_lengths]
    return {"outputs": [r.output_ids for r in reqs], "tau": tau(steps) or 0.0,
            "tau_per_question": mean(per_q) if per_q else 0.0, "seconds": secs,
            "tokens": sum(len(r.output_ids) for r in reqs)}


def ceiling(wb, prompts: list[list[int]], spec: SpecConfig, max_new: int, temperature: float = 0.0,
            seed: int = 0, exits: tuple[int, ...] = ()) -> dict:
    """τ of ``spec`` on ``prompts`` beside its expectation over the coins (exact, from each step's
    tree and verify logits) and the expectation of the tree a perfect head would draft at the same
    contexts (``workbench.engine.oracle``). Means over every verify step; ``reach``: P(the walk
    accepts a node at depth d), d = 1..num_steps. ``exits``: also the target's early exit after
    each of these numbers of layers as the draft, at the same contexts and budget, with its
    agreement on the answers (``oracle.early_exit_trees``)."""
    from workbench.analysis.expectation import step_expectation
    from workbench.analysis.oracle import early_exit_trees, perfect_head_trees

    sampling = SamplingParams(temperature=temperature, seed=seed)
    eng = wb.engine(spec, sampling, trace=True)
    eng.add_requests(prompts, max_new)
    head, points = [], []
    while not eng.done:
        for rec in eng.step_records():  # a record holds its [N, V] logits: keep only what is needed
            if rec.kind == "spec":
                head.append(step_expectation(rec, spec.num_steps))
                points.append((rec.request, rec.kv.committed_before))
    seqs = [r.prompt_ids + r.output_ids for r in eng.requests]
    perfect = perfect_head_trees(wb.target, seqs, points, spec.num_steps, spec.topk, spec.num_draft_tokens, sampling)
    steps = [a for r in eng.requests for a in r.accept_lengths]

    def summary(exp):
        return {"tau": mean(e.accept_length for e in exp),
                "reach": [mean(e.reach[d] for e in exp) for d in range(spec.num_steps)]}

    early = []
    for n in exits:
        e = early_exit_trees(wb.target, seqs, [len(r.prompt_ids) for r in eng.requests], points, n, spec.num_steps,
                             spec.topk, spec.num_draft_tokens, sampling)
        early.append({"layers": n, "agreement": e.agreement, "positions": e.positions, **summary(e.expectations)})
    return {"steps": len(steps), "tau": tau(steps) or 0.0, "head": summary(head), "perfect": summary(perfect),
            "early_exits": early}


def report_ceiling(name: str, c: dict) -> None:
    h, p = c["head"], c["perfect"]
    share = (h["tau"] - 1) / (p["tau"] - 1) if p["tau"] > 1 else float("nan")
    head_reach, perfect_reach = (" / ".join(f"{x:.2f}" for x in r["reach"]) for r in (h, p))
    print(f"| {name} | {c['steps']} | {c['tau']:.2f} | {h['tau']:.2f} | {p['tau']:.2f} | {share:.0%} "
          f"| {head_reach} | {perfect_reach} |", flush=True)


def report_early_exits(name: str, c: dict) -> None:
    """One row per early-exit draft of ``ceiling(..., exits)``, then the head's and the perfect
    head's rows for the same contexts."""
    for e in c["early_exits"]:
        reach = " / ".join(f"{x:.2f}" for x in e["reach"])
        print(f"| {name} | target cut after {e['layers']} layers | {e['agreement']:.3f} | {e['tau']:.2f} | {reach} |")
    for label, r, agree in (("the head", c["head"], "`--agreement`"), ("perfect head", c["perfect"], "1.000")):
        print(f"| {name} | {label} | {agree} | {r['tau']:.2f} | {' / '.join(f'{x:.2f}' for x in r['reach'])} |",
              flush=True)


def tree_use(traces: list[dict]) -> dict:
    """Where a tree's accepted paths go, from its verify steps' traces.

    The top-1 spine of a tree is its path of most likely children (rank 0 at every level): what
    a chain of the same head and that depth drafts. Per verify step: ``spine_depth`` (mean),
    ``off_spine`` (share of steps whose accepted path takes a child that is not its parent's most
    likely: a chain could not have accepted it), ``spine_end`` (share that accept the whole spine:
    a deeper chain might have gone on), ``tau`` and ``tau_spine`` (the τ of the spine alone on the
    same steps: the accepted path up to its first side branch, + the bonus)."""
    spines, off, end, got, spine_got = [], 0, 0, [], []
    for t in traces:
        if t["kind"] != "spec":
            continue
        nodes = t["tree"]["nodes"]
        spine = max(n["depth"] for n in nodes if not any(n["rank_path"]))
        ranks = nodes[t["accept"]["path"][-1]]["rank_path"]
        on = next((i for i, r in enumerate(ranks) if r), len(ranks))  # accepted levels before a side branch
        spines.append(spine)
        off += on < len(ranks)
        end += on == len(ranks) == spine
        got.append(t["accept_length"])
        spine_got.append(on + 1)
    n = len(spines)
    if not n:
        return {"steps": 0}
    return {"steps": n, "spine_depth": mean(spines), "off_spine": off / n, "spine_end": end / n,
            "tau": mean(got), "tau_spine": mean(spine_got)}


def held_out_sequences(data: Path, target, max_response_tokens: int | None, val_every: int,
                       answer_tokens: int | None = None, capture: tuple[int, ...] = ()) -> list:
    """The held-out conversations; ``answer_tokens``: each answer cut to its first N tokens (as
    ``--agreement`` cuts MT-bench answers at ``--max-new``); ``capture``: ``fused_capture``'s."""
    from workbench.train.batches import Sequence
    from workbench.train.features import load_sequences

    _, val = load_sequences(data, target, max_response_tokens, val_every, capture=capture)
    if not val:
        raise ValueError(f"{data}: no held-out conversations")
    if answer_tokens is not None:
        n = answer_tokens
        val = [Sequence(s.tokens[: s.prompt_len + n], s.features[: s.prompt_len + n], s.prompt_len,
                        None if s.aux is None else s.aux[: s.prompt_len + n]) for s in val]
    return val


def head_fuse_layers(head_dir: Path) -> tuple[int, ...]:
    """The target layers an exported head fuses (its config's ``fuse_layers``; () for EAGLE's kind)."""
    import json

    from workbench.models.draft import fuse_layers_in

    cfg = Path(head_dir) / "config.json"
    return fuse_layers_in(json.loads(cfg.read_text())) if cfg.exists() else ()


def fused_capture(head_dirs: list[Path]) -> tuple[int, ...]:
    """The target layers to capture for teacher-forcing every head of ``head_dirs`` on one set of
    features (plain heads ignore the captured layers); fused heads must agree on them."""
    fused = {head_fuse_layers(d) for d in head_dirs} - {()}
    if len(fused) > 1:
        raise ValueError(f"these heads fuse different target layers ({sorted(fused)}): measure them in separate runs")
    return next(iter(fused), ())


def measure_head(head_dir: Path, target, val: list, coverage: tuple[int, ...] = ()) -> dict:
    """Top-1 (steps 1-3), feature loss and CE of the exported head in ``head_dir`` (no noise, full
    vocabulary) teacher-forced on ``val`` (``held_out_sequences`` or ``answer_sequences``), with
    their count; ``coverage``: ``evaluate_loss``'s."""
    from workbench.train.loop import TrainConfig, evaluate_loss

    return {"conversations": len(val), "positions": sum(s.num_targets for s in val),
            **evaluate_loss(load_head(head_dir, target), target, val, TrainConfig(), coverage=coverage)}


def load_head(head_dir: Path, target):
    """The exported head in ``head_dir``, fp32, in eval mode, as training builds it."""
    from workbench.train.loop import init_head, init_weights, layers_in

    state = init_weights(head_dir)
    head = init_head(target, 0, layers_in(state), head_fuse_layers(head_dir)).to(target.lm_head.weight.device)
    head.load_state_dict(state)
    return head.eval()


SOURCES = ("prompt", "answer", "new")
SURE = 0.9  # --by-source also splits off the positions where the target is at least this sure


def token_source(tokens: list[int], prompt_len: int, i: int) -> str:
    """Where the answer token ``tokens[i]`` comes from, seen from the token before it: ``"prompt"``
    if the pair ``(tokens[i-1], tokens[i])`` occurs in the prompt (a copy), else ``"answer"`` if
    it occurs earlier in the answer (a repeat), else ``"new"``."""
    if not prompt_len < i < len(tokens):
        raise ValueError(f"token {i} is not an answer token after the first (prompt {prompt_len}, {len(tokens)} tokens)")
    pair = (tokens[i - 1], tokens[i])
    if pair in zip(tokens[: prompt_len - 1], tokens[1:prompt_len]):
        return "prompt"
    return "answer" if pair in zip(tokens[prompt_len : i - 1], tokens[prompt_len + 1 : i]) else "new"


FAMILIARITY = ((0, "pair unseen"), (1, "seen 1-19 times"), (20, "seen 20+ times"))  # (from count, name)


def response_pair_counts(data: Path) -> Counter:
    """How often each token pair ``(a, b)`` occurs in the answers of a ``generate`` directory."""
    from safetensors import safe_open

    from workbench.train.features import shard_files

    counts = Counter()
    for path in shard_files(data):
        with safe_open(str(path), "pt") as f:
            tokens, starts, plens = (f.get_tensor(k).tolist() for k in ("tokens", "starts", "prompt_lens"))
        for i, p in enumerate(plens):
            answer = tokens[starts[i] + p : starts[i + 1]]
            counts.update(zip(answer, answer[1:]))
    return counts


def familiarity(count: int) -> str:
    return next(name for lo, name in reversed(FAMILIARITY) if count >= lo)


def _stats(c: list[int], total: int) -> dict:
    return {"positions": c[0], "share": c[0] / total, "top1": c[1] / c[0] if c[0] else None,
            "sure_positions": c[2], "sure_share": c[2] / total, "sure_top1": c[3] / c[2] if c[2] else None}


def top1_by_source(head_dir: Path, target, val: list, pair_counts: Counter | None = None) -> dict[str, dict]:
    """Step-1 top-1 of the head in ``head_dir`` (as ``measure_head``: against the target's argmax)
    split by ``token_source`` of the answer's token there (the same token in a greedy answer): per
    source, its positions, their share and the top-1 there, and the same where the target is
    sure of its token (p(argmax) >= ``SURE``): ``sure_positions``, ``sure_share``, ``sure_top1``.
    With ``pair_counts`` (``response_pair_counts`` of training data), each source also splits by
    how often its token pair occurs there (``by_familiarity``: ``FAMILIARITY``'s names)."""
    from workbench.train.ttt import unrolled_forward

    head = load_head(head_dir, target)
    lm_head = target.lm_head.weight.float()
    count = {s: [0, 0, 0, 0] for s in SOURCES}  # positions, hits, sure positions, sure hits
    by_fam = {s: {name: [0, 0, 0, 0] for _, name in FAMILIARITY} for s in SOURCES}
    for seq in val:
        toks, n = seq.tokens.tolist(), len(seq.tokens) - 1
        feats = seq.features[:n].float()
        aux = None if seq.aux is None else seq.aux[:n].float()[None]
        with torch.no_grad():
            out = unrolled_forward(head, target.model.embed_tokens, feats[None], seq.tokens[1:][None], 1, aux)[0][0]
            # the output at j guesses f_{j+1}, whose argmax token the target emits after token j + 1
            guess = (out[seq.prompt_len - 1 : n - 1] @ lm_head.T).argmax(-1).tolist()
            p = torch.softmax(feats[seq.prompt_len : n] @ lm_head.T, dim=-1).max(-1)
        for j, (g, t, sure) in enumerate(zip(guess, p.indices.tolist(), (p.values >= SURE).tolist())):
            i = seq.prompt_len + 1 + j
            source = token_source(toks, seq.prompt_len, i)
            cells = [count[source]]
            if pair_counts is not None:
                cells.append(by_fam[source][familiarity(pair_counts[(toks[i - 1], toks[i])])])
            for c in cells:
                c[0] += 1
                c[1] += int(g == t)
                c[2] += int(sure)
                c[3] += int(sure and g == t)
    total = max(1, sum(c[0] for c in count.values()))
    out = {s: _stats(c, total) for s, c in count.items()}
    if pair_counts is not None:
        for s in SOURCES:
            out[s]["by_familiarity"] = {name: _stats(c, total) for name, c in by_fam[s].items()}
    return out


SOURCE_WORDS = {"prompt": "copies a token pair of the prompt", "answer": "repeats a pair of the answer", "new": "new"}


def report_sources(label: str, v: dict[str, dict], familiar_in: Path | None = None) -> None:
    def cell(name, c):
        top1 = "-" if c["top1"] is None else f"{c['top1']:.3f}"
        sure = "-" if c["sure_top1"] is None else f"{c['sure_top1']:.3f}"
        return f"{name} {c['share']:.0%} of positions, {top1} (where p(target) >= {SURE}: {c['sure_share']:.0%}, {sure})"

    print(f"  {label}: " + "; ".join(cell(SOURCE_WORDS[s], c) for s, c in v.items()), flush=True)
    for s, c in v.items():
        if "by_familiarity" in c:
            print(f"    {SOURCE_WORDS[s]}, by how often the pair occurs in the answers of {familiar_in}: "
                  + "; ".join(cell(name, f) for name, f in c["by_familiarity"].items()), flush=True)


def answer_sequences(target, prompts: list[list[int]], outputs: list[list[int]], capture: tuple[int, ...] = ()) -> list:
    """Training sequences of ``prompts`` + ``outputs``, with the target's features (one prefill
    each); ``capture``: also the residual streams a fused head reads (``fused_capture``)."""
    from workbench.train.batches import Sequence
    from workbench.train.features import target_features

    seqs = [p + o for p, o in zip(prompts, outputs)]
    h = target.config.hidden_size
    return [Sequence(torch.tensor(s), f[:, -h:].half(), len(p), f[:, :-h].half() if capture else None)
            for s, f, p in zip(seqs, target_features(target, seqs, capture=capture), prompts) if len(s) - 1 - len(p) > 0]


def report(label: str, v: dict) -> None:
    print(f"{label}: {v['conversations']} conversations, {v['positions']:,} positions; top-1 step 1 {v['top1']:.3f}, "
          f"step 2 {v['top1_step2']:.3f}, step 3 {v['top1_step3']:.3f}; feature loss {v['feat']:.3f}, "
          f"CE {v['ce']:.2f}", flush=True)
    ks = sorted(int(k[len("in_top"):]) for k in v if k.startswith("in_top"))
    if ks:
        print("  step 1, target's token among the head's k most likely: "
              + ", ".join(f"k={k} {v[f'in_top{k}']:.3f}" for k in ks))
        print("  step 1 top-1 by the target's confidence p(argmax): "
              + ", ".join(f"[{b['lo']:.1f}, {b['hi']:.1f}{']' if b['hi'] == 1 else ')'} {b['share']:.0%} of positions, "
                          + ("-" if b["top1"] is None else f"{b['top1']:.3f}") for b in v["confidence"]), flush=True)


def build_parser() -> ArgumentParser:
    from workbench.models.heads import default_draft_dir
    from workbench.pipeline import HOT_TOKENS_DEFAULT

    ap = ArgumentParser(prog="python -m workbench.train.evaluate", description=__doc__)
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
    ap.add_argument("--methods", nargs="*", default=list(DEFAULT_METHODS),
                    help="τ of these, in the benchmark's grammar: linear:S, eagle2:D/S/K, static:D, each "
                         "optionally @ngram or @exit:N (with no names: no τ at all)")
    ap.add_argument("--held-out", type=Path, default=None, metavar="DATA",
                    help="also the held-out top-1 on this workbench.train.generate directory (default: none)")
    ap.add_argument("--held-out-tokens", type=int, default=None,
                    help="with --held-out: the shards up to this many training response tokens (default: all)")
    ap.add_argument("--held-out-answer-tokens", type=int, default=None, metavar="N",
                    help="with --held-out: only the first N tokens of each answer (default: all; "
                         "--agreement's MT-bench answers stop at --max-new)")
    ap.add_argument("--val-every", type=int, default=20, help="with --held-out: every N-th prompt is held out")
    ap.add_argument("--coverage", type=int, nargs="*", default=[2, 4, 10], metavar="K",
                    help="with --held-out or --agreement: also how often the target's token is among the head's K most likely "
                         "at step 1 (what a depth-1 fan of K children can catch); none: skip both breakdowns")
    ap.add_argument("--agreement", action="store_true",
                    help="also the head's agreement teacher-forced on the target's greedy answers to the questions")
    ap.add_argument("--by-category", action="store_true",
                    help="with --agreement: also top-1 per MT-bench category (writing, roleplay, ... 10 questions each in 80)")
    ap.add_argument("--by-source", action="store_true",
                    help="with --held-out or --agreement: also step-1 top-1 split by where the target's token "
                         "comes from (copies a token pair of the prompt, repeats one of the answer, or new)")
    ap.add_argument("--pair-counts", type=Path, default=None, metavar="DATA",
                    help="with --by-source: also split each source by how often its token pair occurs in the "
                         "answers of this workbench.train.generate directory (unseen, 1-19 times, 20+; default: none)")
    ap.add_argument("--tree-use", action="store_true",
                    help="also, for each tree method, where its accepted paths go: the depth of the top-1 "
                         "spine, how often the accepted path leaves it, and the τ of the spine alone")
    ap.add_argument("--ceiling", action="store_true",
                    help="also, for each method, τ expected over the coins (exact, from each step's tree) beside "
                         "the τ the same tree budget gives a perfect head (one that drafts from the target's own "
                         "distribution) at the same contexts: how much a better head can still win")
    ap.add_argument("--early-exit", default="", metavar="N,N,...",
                    help="with --ceiling: also draft with the target cut after each of these numbers of layers "
                         "(its final norm and lm_head on the residual there), at the same contexts and budget: "
                         "E[τ] beside how often its top token is the target's on the answers, drafts of known "
                         "quality between the head and a perfect one (default: none)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    return ap


def main(argv=None) -> None:
    from workbench.pipeline import Workbench

    ap = build_parser()
    args = ap.parse_args(argv)
    if args.temperature < 0 or args.n < 1 or args.max_new < 1:
        ap.error("--temperature must be >= 0, -n and --max-new >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.val_every < 1:
        ap.error("--val-every must be >= 1")
    if any(k < 1 for k in args.coverage):
        ap.error("--coverage values must be >= 1")
    if args.held_out_answer_tokens is not None and args.held_out_answer_tokens < 1:
        ap.error("--held-out-answer-tokens must be >= 1")
    if args.held_out_answer_tokens is not None and args.held_out is None:
        ap.error("--held-out-answer-tokens cuts the --held-out answers: add --held-out DATA")
    if args.by_source and not (args.agreement or args.held_out is not None):
        ap.error("--by-source breaks down --held-out or --agreement: add one of them")
    if args.pair_counts is not None and not args.by_source:
        ap.error("--pair-counts splits --by-source further: add --by-source")
    if args.pair_counts is not None and not args.pair_counts.is_dir():
        ap.error(f"--pair-counts {args.pair_counts}: no such directory")
    if args.by_category and not args.agreement:
        ap.error("--by-category breaks down --agreement: add --agreement")
    if args.agreement and args.temperature != 0:
        ap.error("--agreement measures on greedy answers: leave --temperature at 0")
    try:
        methods = speculative_methods(args.methods)
    except ValueError as err:
        ap.error(f"--methods: {err}")
    if args.ceiling and not args.methods:
        ap.error("--ceiling measures the --methods: name at least one")
    try:
        exits = tuple(int(x) for x in args.early_exit.split(",") if x.strip())
    except ValueError:
        ap.error(f"--early-exit {args.early_exit!r}: give whole numbers of layers, as 12,18,24")
    if exits and not args.ceiling:
        ap.error("--early-exit adds drafts to --ceiling's table: add --ceiling")
    if args.held_out is not None and not args.held_out.is_dir():
        ap.error(f"--held-out {args.held_out}: no such directory")
    if not args.questions.is_file():
        ap.error(f"--questions {args.questions}: no such file")
    if args.hot is not None and args.hot < 0:
        ap.error("--hot must be >= 0")
    for head in args.head:
        if not (head / "config.json").exists():
            ap.error(f"--head {head}: no head there (no config.json)")
    coverage = tuple(sorted(set(args.coverage)))
    heads = args.head
    try:
        capture = fused_capture(heads)  # one set of teacher-forcing features serves every head
    except ValueError as err:
        ap.error(str(err))
    named = (lambda label, head: f"{label} [{head}]") if len(heads) > 1 else (lambda label, head: label)
    try:
        wb = Workbench.load(draft=str(heads[0]), dtype=args.dtype, hot_tokens=args.hot)
    except ValueError as err:
        ap.error(str(err))
    layers = wb.target.config.num_layers
    if any(not 1 <= n <= layers for n in exits):  # before any run, not after the first one
        ap.error(f"--early-exit {args.early_exit}: the target has {layers} layers, so each must be 1..{layers}")
    try:
        pairs = None if args.pair_counts is None else response_pair_counts(args.pair_counts)
    except FileNotFoundError as err:
        ap.error(str(err))
    target = None
    if args.held_out is not None or args.agreement:
        from workbench.models.loading import load_target

        target = wb.target if args.dtype == "fp32" else load_target(wb.target_dir, torch.float32)
        target.requires_grad_(False)
    if args.held_out is not None:
        try:
            val = held_out_sequences(args.held_out, target, args.held_out_tokens, args.val_every,
                                     args.held_out_answer_tokens, capture)
        except (ValueError, FileNotFoundError) as err:
            ap.error(str(err))
        for head in heads:
            report(named(f"held out of {args.held_out} (every {args.val_every}th prompt)", head),
                   measure_head(head, target, val, coverage))
            if args.by_source:
                report_sources("step-1 top-1 where the target's token", top1_by_source(head, target, val, pairs),
                               args.pair_counts)
    if not args.methods and not args.agreement:
        return
    rows = specbench.mt_bench_first_turns(args.n, args.questions)
    prompts = [wb.encode(q.turns[0]) for q in rows]
    greedy = args.temperature == 0
    base = run(wb, prompts, SpecConfig("vanilla"), args.max_new, args.temperature, args.seed)
    if args.agreement:
        val = answer_sequences(target, prompts, base["outputs"], capture)
        for head in heads:
            report(named(f"teacher-forced on the greedy answers to {len(prompts)} MT-bench first turns "
                         f"({args.max_new} tokens)", head), measure_head(head, target, val, coverage))
            if args.by_source:
                report_sources("step-1 top-1 where the target's token", top1_by_source(head, target, val, pairs),
                               args.pair_counts)
        if args.by_category:
            groups = {c: answer_sequences(target, ps, os_, capture) for c, (ps, os_) in
                      by_category([q.category for q in rows], prompts, base["outputs"]).items()}
            for head in heads:
                cells = []
                for c, seqs in groups.items():
                    v = measure_head(head, target, seqs, ())
                    cells.append(f"{c} ({v['conversations']}, {v['positions']:,} positions) "
                                 f"{v['top1']:.3f} / {v['top1_step3']:.3f}")
                print(named("  top-1 at step 1 / step 3 by category", head) + ": " + "; ".join(cells), flush=True)
    if not args.methods:
        return
    mode = "greedy" if greedy else f"temperature {args.temperature:g}, seed {args.seed}"
    for k, head in enumerate(heads):
        if k:  # the same target, another head (with its own hot tokens)
            wb = wb.with_draft(str(head), args.hot)
        print(f"head {wb.draft_source}; {args.dtype}, {len(prompts)} MT-bench first turns, {args.max_new} new tokens, "
              f"{mode}; verified against the full vocabulary")
        print("| method | τ (all steps) | τ (mean per question) | outputs = greedy | tokens | seconds |")
        print("|---|---|---|---|---|---|")
        print(f"| vanilla | 1.00 | 1.00 | - | {base['tokens']} | {base['seconds']:.1f} |")
        uses = []
        for name in args.methods:
            traces = [] if args.tree_use and methods[name].method != "linear" else None
            r = run(wb, prompts, methods[name], args.max_new, args.temperature, args.seed, traces)
            same = f"{sum(a == b for a, b in zip(r['outputs'], base['outputs']))}/{len(prompts)}" if greedy else "sampled"
            print(f"| {name} | {r['tau']:.2f} | {r['tau_per_question']:.2f} | {same} | {r['tokens']} "
                  f"| {r['seconds']:.1f} |", flush=True)
            if traces is not None:
                uses.append((name, tree_use(traces)))
        if args.ceiling:
            print(f"\nτ over the coins (exact expectation from each step's tree and verify logits) and with a perfect "
                  f"head (the same procedure and budget, drafting from the target's own distribution), {mode}:")
            print("| method | verify steps | τ measured | E[τ] head | E[τ] perfect head | head's share of the "
                  "perfect gain | P(reach depth 1..S), head | perfect head |")
            print("|---|---|---|---|---|---|---|---|")
            results = [(name, ceiling(wb, prompts, methods[name], args.max_new, args.temperature, args.seed, exits))
                       for name in args.methods]
            for name, c in results:
                report_ceiling(name, c)
            if exits:
                print(f"\nDrafts of known quality at the same contexts, {mode}: the target cut after N of its "
                      f"{wb.target.config.num_layers} layers drafts the tree with the same procedure and budget; "
                      f"agreement: how often its most likely token is the target's over the answers' positions:")
                print("| method | draft | agreement | E[τ] | P(reach depth 1..S) |")
                print("|---|---|---|---|---|")
                for name, c in results:
                    report_early_exits(name, c)
        for name, u in uses:
            if u["steps"]:
                print(f"{name}: {u['steps']} verify steps; top-1 spine {u['spine_depth']:.2f} deep on average; the "
                      f"accepted path left the spine in {u['off_spine']:.1%} of the steps and took all of it in "
                      f"{u['spine_end']:.1%}; τ {u['tau']:.2f}, the spine alone {u['tau_spine']:.2f}", flush=True)


if __name__ == "__main__":
    main()
