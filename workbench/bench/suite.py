"""``python -m workbench bench``: every method on the same Spec-Bench prompts, Spec-Bench style.

Methods (``--methods``, comma list; trees are ``D/S/K`` = num_draft_tokens/num_steps/topk):

==================  ==============================================================
``vanilla``         our engine, one target forward per token: the baseline
``linear:S``        a chain of S drafts (topk 1, S + 1 verify tokens)
``eagle2:D/S/K``    an EAGLE-2 tree; 60/6/10 is the EAGLE-2 paper's, 8/5/4 what SGLang picks for a Llama target
``eagle2:best``     the tree ``tune.py`` finds best for this machine (or ``--best D/S/K``)
``static:D``        EAGLE-1's static tree cut to D tokens (root included), the same head:
                    paired with the eagle2 tree of the same D in the static-vs-dynamic table
``hf-greedy``       transformers ``generate``, greedy
``hf-pld``          transformers prompt lookup decoding (``prompt_lookup_num_tokens=10``)
==================  ==============================================================

Order of work: load, verify/draft cost curves, tune (if ``eagle2:best``), the step cost of each
speculative method's draft source (``step_cost.step_costs``: read from the cache or measured once
per source in the run, the tuner's trees included; the report's predictions read them), one short
warm-up run per method, then for each question every method in turn (interleaved, so a change in
machine load hits all methods alike) and a probe of the target's part (``measure/probe.py``: the
prefill, verify and draft forwards timed again, which the report's predictions read), temperature
0, ``--rounds`` times (each round starts the methods' turn one place later; the figures are the
median of the rounds' and their range, a speedup paired within its round); then temperature 1 on
a few questions for tau.
After the timed runs, one traced pass of ``--calibration`` (greedy, first turns, shorter) gives
the draft's calibration (no timing is read from it). Outputs in ``--out``: ``results.json``,
``report.md``, ``figures.html`` (``report.py``), and ``records.jsonl``, each result kept as it
finishes (``journal.py``), so a stopped run started again with the same settings runs only the
missing ones, and its report says that it was resumed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from workbench.measure import metrics, provenance, specbench
from workbench.bench import static_vs_dynamic
from workbench.measure.floor import ridge_tokens
from workbench.measure.journal import Journal, open_journal
from workbench.measure.methods import Method, parse_methods
from workbench.errors import ArgumentParser, UserError, as_user_error, reports_user_errors
from workbench.models.chat import chat_ids

# torch and the engine are imported inside the functions that use them, so that building this
# command's parser (``cli.py`` does it on every start-up) stays cheap.

DEFAULT_METHODS = ("vanilla,linear:3,linear:5,linear:6,eagle2:60/6/10,eagle2:8/5/4,eagle2:best,static:60,static:8,"
                   "hf-greedy,hf-pld")
BASELINES = {"vanilla": "vanilla", "hf-greedy": "hf_greedy"}  # method -> key suffix; speedups over each present
WARMUP_TOKENS = 16
STEP_COUNTS = ("accept_lengths", "drafts_accepted", "drafts_verified", "stop_causes")  # per verify step, per turn


@dataclass
class Runner:
    """What every run needs: the workbench (target, draft, tokenizer), the HF model if any."""
    wb: object
    hf_model: object | None
    max_new_tokens: int

    def decode(self, method: Method, ids: list[int], sampling, max_new_tokens: int, profile=None):
        """One turn -> (output ids, seconds, ``STEP_COUNTS`` per verify step or None); an engine
        method's phase times are added to ``profile`` (a ``timings.StepProfile``) when given."""
        if method.hf:
            from workbench.measure.hf_baselines import hf_generate

            res = hf_generate(self.hf_model, ids, max_new_tokens=max_new_tokens, stop_ids=self.wb.stop_ids,
                              prompt_lookup=method.prompt_lookup)
            return res.output_ids, res.seconds, None
        # stops: each step's stop cause is kept (a top-k per draft forward and a few list scans per step)
        (req,), seconds = self.wb.generate([ids], method.spec, sampling, max_new_tokens, stops=method.speculative,
                                           profile=profile)
        steps = {k: list(getattr(req, k)) for k in STEP_COUNTS}
        return req.output_ids, seconds, (steps if method.speculative else None)

    def question(self, method: Method, q: specbench.Question, sampling, max_new_tokens: int | None = None) -> dict:
        """Every turn of ``q``; a later turn follows the method's own earlier answer."""
        from workbench.engine.timings import StepProfile

        tok, profile = self.wb.tokenizer, StepProfile()
        messages, outputs, steps, seconds, prompts = [], [], [], 0.0, []
        for turn in q.turns:
            messages.append({"role": "user", "content": turn})
            ids = chat_ids(tok, messages)
            out, s, acc = self.decode(method, ids, sampling, max_new_tokens or self.max_new_tokens, profile=profile)
            prompts.append(len(ids))
            outputs.append(out)
            steps.append(acc)
            seconds += s
            messages.append({"role": "assistant", "content": tok.decode(out, skip_special_tokens=True)})
        rec = {"question_id": q.question_id, "category": q.category, "task": q.task, "output_ids": outputs,
               "prompt_tokens": prompts, "new_tokens": sum(len(o) for o in outputs), "seconds": round(seconds, 4)}
        rec["tokens_per_s"] = round(metrics.tokens_per_s(rec), 2)
        if not method.hf:
            rec["profile"] = profile.to_json()  # the engine's phase times, summed over the turns
        if method.speculative:
            rec.update({k: [turn[k] for turn in steps] for k in STEP_COUNTS})
            rec["tau"] = round(metrics.tau(metrics.accept_lengths([rec])) or 0.0, 3)
        return rec


def greedy_phase(round_index: int) -> str:
    """The journal's phase of a timed greedy round: ``t0`` for the first (as runs before rounds
    kept it), ``t0#2``, ``t0#3``, ... after it."""
    return "t0" if round_index == 0 else f"t0#{round_index + 1}"


def probes_of(journal: Journal, questions: list[specbench.Question], rounds: int) -> list[dict]:
    """The probes a run kept, in the order they ran (rounds, then questions)."""
    found = [journal.get_probe(greedy_phase(r), q.question_id) for r in range(rounds) for q in questions]
    return [p for p in found if p is not None]


def run_all(runner: Runner, methods: list[Method], *, questions: list[specbench.Question],
            tau_questions: list[specbench.Question], tau_max_new_tokens: int, log,
            journal: Journal, rounds: int = 1, probes=None) -> tuple[dict, dict, dict]:
    """Warm-up, then temperature 0 on ``questions`` (interleaved), ``rounds`` times, each round's
    turn of the methods started one place later, and after each question's turn of the methods
    a probe of ``probes`` (a ``probe.ProbePlan``; None: none) on its first prompt
    (``measure/probe.py``: the target's part timed again, kept in the journal's probe lines);
    then temperature 1 on
    ``tau_questions`` for the speculative methods (only tau is read from these, so they may be
    shorter). A result ``journal`` already holds is reused as measured; every new one is added to
    it as soon as it is finished. Returns (the first round's records, records at T=1, every
    round's records by method: a list of rounds)."""
    from workbench.engine.sampling import SamplingParams

    greedy, hot = SamplingParams(), SamplingParams(temperature=1.0, seed=0)
    jobs = [(greedy_phase(r), m, q) for r in range(rounds) for q in questions
            for m in methods[r % len(methods):] + methods[:r % len(methods)]]
    block_ends = {k for k, (job, after) in enumerate(zip(jobs, jobs[1:] + [None]))
                  if after is None or (after[0], after[2]) != (job[0], job[2])}  # the last job of each question
    jobs += [("t1", m, q) for m in methods if m.speculative for q in tau_questions]
    todo = [(phase, m, q) for phase, m, q in jobs if journal.get(phase, m.name, q.question_id) is None]
    if len(todo) < len(jobs):
        log(f"{len(jobs) - len(todo)} of {len(jobs)} results reused from {journal.path}; {len(todo)} to run")
    warm_ids = chat_ids(runner.wb.tokenizer, [{"role": "user", "content": questions[0].turns[0]}])
    to_warm = [m for m in methods if any(m is job[1] for job in todo)]
    for m in to_warm:  # only the methods that still run: a warm-up is for timing
        runner.decode(m, warm_ids, greedy, WARMUP_TOKENS)
    log(f"warm-up done ({len(to_warm)} methods)")
    t_jobs, measured = time.perf_counter(), 0
    for k, (phase, m, q) in enumerate(jobs, 1):
        if journal.get(phase, m.name, q.question_id) is None:
            if phase == "t1":
                rec = runner.question(m, q, hot, tau_max_new_tokens)
            else:
                rec = runner.question(m, q, greedy)
            journal.add_result(phase, m.name, rec)
            measured += 1
            left = (time.perf_counter() - t_jobs) / measured * (len(todo) - measured)
            turn = "T=1 " if phase == "t1" else f"r{phase.partition('#')[2] or 1} " if rounds > 1 else ""
            log(f"[{k:>3}/{len(jobs)}] {turn}q{q.question_id:<4} {q.category:<14} "
                f"{m.name:<16} {rec['new_tokens']:>4} tok {rec['tokens_per_s']:>7.2f} tok/s" +
                (f"  tau {rec['tau']:.2f}" if "tau" in rec else "") + f"  (~{left:.0f}s left)")
        if probes and k - 1 in block_ends and journal.get_probe(phase, q.question_id) is None:
            ids = chat_ids(runner.wb.tokenizer, [{"role": "user", "content": q.turns[0]}])
            journal.add_probe(phase, {"question_id": q.question_id, **probes.take(runner.wb, ids)})
    by_round = {m.name: [[journal.get(greedy_phase(r), m.name, q.question_id) for q in questions]
                         for r in range(rounds)] for m in methods}
    records = {name: runs[0] for name, runs in by_round.items()}
    hot_records = {m.name: [journal.get("t1", m.name, q.question_id) for q in tau_questions]
                   for m in methods if m.speculative and tau_questions}
    for name, recs in hot_records.items():
        log(f"T=1 {name:<16} tau {metrics.tau(metrics.accept_lengths(recs)):.2f} on {len(tau_questions)} questions")
    return records, hot_records, by_round


def _timed(recs: list[dict], records: dict) -> dict:
    """One round's timing figures of a method: its speed and its speedup over each baseline of
    ``records`` (that round's records by method)."""
    out = {"tokens_per_s": metrics.speed(recs)}
    for base, key in BASELINES.items():
        if base in records:
            out[f"speedup_vs_{key}"] = metrics.speedup(recs, records[base])
            out[f"speedup_vs_{key}_mean_of_ratios"] = metrics.speedup_mean_of_ratios(recs, records[base])
    return out


def _over_rounds(figures: list[dict]) -> dict:
    """Each figure's median over the rounds (one round: its own), rounded as the report shows it."""
    return {k: round(median(f[k] for f in figures), 2 if k == "tokens_per_s" else 3) for k in figures[0]}


def summarize(methods: list[Method], records: dict, hot_records: dict, by_round: dict | None = None) -> dict:
    """Per method: speed, speedups over each baseline (overall and per task), tau at T=0 (all,
    MT-bench first turns) and T=1, per-depth acceptance, vLLM's metrics and the steps per stop
    cause (T=0), equality with vanilla. ``by_round`` (``run_all``'s third answer), where it holds
    several rounds: speed and speedups are the rounds' medians, each speedup paired within its
    round, and ``rounds`` keeps every round's (the counts, τ and equality are the first round's:
    greedy decoding emits the same tokens every round; the step profile sums every round's
    steps)."""
    by_round = by_round or {name: [recs] for name, recs in records.items()}
    runs = len(next(iter(by_round.values())))
    rounds = [{name: by_round[name][r] for name in by_round} for r in range(runs)]
    out = {}
    for m in methods:
        recs = records[m.name]
        timed = [_timed(rnd[m.name], rnd) for rnd in rounds]
        s = {"label": m.describe(), **_over_rounds(timed),
             "new_tokens": sum(r["new_tokens"] for r in recs), "questions": len(recs)}
        if runs > 1:
            s["rounds"] = {"runs": runs, **{k: [round(f[k], 3) for f in timed] for k in timed[0]
                                            if not k.endswith("_mean_of_ratios")}}
        if "vanilla" in records:
            s["equal_to_vanilla"] = round(metrics.equal_fraction(recs, records["vanilla"]), 3)
        s["per_task"] = {}
        for task, trecs in metrics.by_task(recs).items():
            per = [metrics.by_task(rnd[m.name])[task] for rnd in rounds]
            t = {"questions": len(trecs), "tokens_per_s": round(median(metrics.speed(x) for x in per), 2)}
            if "vanilla" in records:
                t["speedup_vs_vanilla"] = round(median(metrics.speedup(x, rnd["vanilla"])
                                                       for x, rnd in zip(per, rounds)), 3)
            if m.speculative:
                t["tau"] = _round(metrics.tau(metrics.accept_lengths(trecs)))
            s["per_task"][task] = t
        if not m.hf:  # every round's steps: the speedups beside it are the rounds' medians
            s["step_profile"] = metrics.step_profile([r for rnd in by_round[m.name] for r in rnd])
        if m.speculative:
            lengths, accepted = metrics.accept_lengths(recs), metrics.drafts_accepted(recs)
            mt = metrics.accept_lengths([r for r in recs if r["task"] == "mt_bench"], first_turn_only=True)
            s.update(tau=_round(metrics.tau(lengths)), tau_mtbench_turn1=_round(metrics.tau(mt)),
                     per_depth=[_round(x) for x in metrics.per_depth_acceptance(accepted, m.spec.num_steps)])
            s.update(metrics.serving_summary(recs, m.spec.num_steps))
            if m.name in hot_records:
                hot = hot_records[m.name]
                s.update(tau_t1=_round(metrics.tau(metrics.accept_lengths(hot))),
                         per_depth_t1=[_round(x) for x in metrics.per_depth_acceptance(metrics.drafts_accepted(hot),
                                                                                       m.spec.num_steps)])
        out[m.name] = s
    return out


def calibration_method(methods: list[Method], choice: str) -> Method | None:
    """``--calibration``: auto = eagle2:60/6/10 if run, else the first eagle2 / static method."""
    if choice == "none":
        return None
    if choice != "auto":
        return next(m for m in methods if m.name == choice)
    trees = [m for m in methods if m.speculative and m.spec.method in ("eagle2", "static")]
    return next((m for m in trees if m.name == "eagle2:60/6/10"), trees[0] if trees else None)


def run_calibration(wb, methods: list[Method], *, questions, choice: str, max_new_tokens: int, log) -> dict | None:
    """The traced pass: {"method", "max_new_tokens", "questions", "tau", "table"} or None."""
    from workbench.bench import calibration

    m = calibration_method(methods, choice)
    if m is None or not m.speculative:
        return None
    res = calibration.measure(wb, m.spec, questions=questions, max_new_tokens=max_new_tokens, log=log)
    s = res["table"]["summary"]
    log(f"calibration {m.name}: {s['nodes']} verified nodes, P(accept | tried) {s['p_accept_given_tried']:.3f}")
    return {"method": m.name, "label": m.describe(), "max_new_tokens": max_new_tokens,
            "questions": len(questions), **res}


def _round(x, nd: int = 3):
    return None if x is None else round(x, nd)


# ---- command line -------------------------------------------------------------------------------
def machine_info(threads: int) -> dict:
    import torch

    from workbench.cpu_choices import cpu_flags, cpu_model

    return {"cpu": cpu_model(), "cores": os.cpu_count(), "torch_threads": threads, "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "simd": sorted(f for f in cpu_flags() if f.startswith(("avx", "amx"))), "platform": platform.platform(),
            "load_average_start": [round(x, 2) for x in os.getloadavg()]}


def add_bench_parser(sub) -> None:
    """Register ``bench`` on ``python -m workbench``'s subparsers."""
    p = sub.add_parser("bench", help="Spec-Bench: tau, tokens/s and speedup of every method",
                       description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.set_defaults(func=cmd_bench)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from workbench.flags import add_model_args, positive

    specbench.add_subset_args(p)
    p.add_argument("--methods", default=DEFAULT_METHODS,
                   help="comma list of vanilla, linear:S, eagle2:D/S/K, eagle2:best, static:D, hf-greedy, hf-pld")
    p.add_argument("--best", help="use this D/S/K tree as eagle2:best instead of tuning (default: tune)")
    p.add_argument("--max-new-tokens", type=positive("--max-new-tokens"), default=128,
                   help="new tokens per turn in the timed runs")
    p.add_argument("--rounds", type=positive("--rounds"), default=1,
                   help="timed greedy passes over the questions; with more than one, every figure is the median "
                        "of the rounds', reported with its range")
    p.add_argument("--temperature-tau", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the speculative methods at temperature 1 for tau")
    p.add_argument("--tau-questions", type=positive("--tau-questions"), default=2,
                   help="questions for the temperature-1 runs (MT-bench first)")
    p.add_argument("--tau-max-new-tokens", type=positive("--tau-max-new-tokens"), default=64,
                   help="new tokens per temperature-1 run")
    p.add_argument("--calibration", default="auto",
                   help="method of the traced calibration pass: auto (eagle2:60/6/10 if listed, else the first "
                        "eagle2 or static method), a name from --methods, or none")
    p.add_argument("--calibration-max-new-tokens", type=positive("--calibration-max-new-tokens"), default=64,
                   help="new tokens per question in the calibration pass")
    p.add_argument("--tune-trees", type=positive("--tune-trees"), default=5, help="trees the tuner measures")
    p.add_argument("--threads", type=positive("--threads"), default=2, help="torch CPU threads")
    p.add_argument("--out", default="bench_out",
                   help="output directory; its records.jsonl keeps each result as it finishes, and a stopped "
                        "run started again with the same settings reuses them")
    p.add_argument("--fresh", action="store_true",
                   help="discard an unfinished run's results in --out and measure everything again")
    p.add_argument("--report-only", action="store_true",
                   help="time nothing: write --out's report again from its finished run (results.json and "
                        "records.jsonl) with this version's report code, the run's own figures unchanged")
    add_model_args(p)
    p.set_defaults(dtype="auto")


def cmd_bench(args) -> int:
    import torch

    from workbench.bench import tune

    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[bench {time.perf_counter() - t_start:6.0f}s] {msg}", file=sys.stderr, flush=True)

    if args.report_only:
        return report_again(Path(args.out), log)
    torch.set_num_threads(args.threads)
    with as_user_error("--methods: "):
        parse_methods(args.methods)  # names checked before anything loads
    with as_user_error(f"--best {args.best}: "):
        best = tune.tree_from_name(args.best) if args.best else None
    questions = specbench.select(specbench.load_questions(), args.subset, args.per_category)[: args.limit]
    names = [n.strip() for n in args.methods.split(",")]
    if args.calibration not in ("auto", "none", *names):
        raise UserError(f"--calibration {args.calibration}: not among --methods (or auto / none)")
    info = machine_info(args.threads)
    journal = open_journal(Path(args.out), run_settings(args, questions), fresh=args.fresh, log=log)  # read only
    try:
        with stop_on_sigterm():
            return measure(args, questions, best=best, info=info, journal=journal, log=log, t_start=t_start)
    except KeyboardInterrupt:
        print(f"interrupted: {len(journal.results)} results are kept in {journal.path}; "
              "the same command resumes the run", file=sys.stderr)
        return 130


@contextlib.contextmanager
def stop_on_sigterm():
    """A SIGTERM (``kill PID``, a job scheduler's stop) ends the run as Ctrl-C does, so that it
    says what was kept; outside the main thread, where no handler can be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# Options that name where the output goes or shape the untimed calibration pass: a run resumes
# across a change of these. Every other option is a setting the results depend on.
NOT_SETTINGS = ("command", "func", "out", "fresh", "calibration", "calibration_max_new_tokens", "report_only")


def report_again(out: Path, log) -> int:
    """``--report-only``: a finished run's report written again from what it kept, with this
    version's summary and report code; nothing is timed, and every record, timing and setting
    stays the run's (``meta.rendered`` says when and by which commit it was written again)."""
    from workbench.bench import report
    from workbench.measure.journal import FILE, read_journal

    path = out / "results.json"
    if not path.exists() or not (out / FILE).exists():
        raise UserError(f"--report-only: {out} holds no finished run (results.json and {FILE}): run the benchmark "
                        "there first")
    result = json.loads(path.read_text(encoding="utf-8"))
    journal = read_journal(out / FILE)
    names, rounds = list(result["summary"]), result["meta"].get("rounds") or 1
    best = None
    if result.get("best_tree"):
        from workbench.bench.tune import tree_from_name

        best = tree_from_name(result["best_tree"])
    methods = parse_methods(",".join(names), best)
    qids = [r["question_id"] for r in result["records"][names[0]]]
    by_round = {m.name: [[journal.get(greedy_phase(r), m.name, q) for q in qids] for r in range(rounds)]
                for m in methods}
    if any(rec is None for runs in by_round.values() for rnd in runs for rec in rnd):
        raise UserError(f"--report-only: {out / FILE} lacks some of the run's results (a run stopped before its "
                        "end): run its command again to finish it")
    records = {name: runs[0] for name, runs in by_round.items()}
    result.update(summary=summarize(methods, records, result.get("records_t1") or {}, by_round),
                  static_vs_dynamic=static_vs_dynamic.compare(methods, records, by_round),
                  probes=[p for p in (journal.get_probe(greedy_phase(r), q) for r in range(rounds) for q in qids)
                          if p is not None])
    result["meta"]["rendered"] = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                                  "commit": provenance.commit()}
    paths = report.write_all(out, result)
    log("wrote " + ", ".join(str(p) for p in paths) + " again from the run's records (nothing timed)")
    print(report.headline_table(result))
    return 0


def run_settings(args, questions: list[specbench.Question]) -> dict:
    """What a run's results depend on, compared when it resumes: its options and its questions."""
    settings = {k: v for k, v in sorted(vars(args).items()) if k not in NOT_SETTINGS}
    return {**settings, "question_ids": [q.question_id for q in questions]}


def measure(args, questions: list[specbench.Question], *, best, info: dict, journal: Journal, log,
            t_start: float) -> int:
    """Load, cost curves, step costs and tuning (kept in the journal, so a resumed run keeps its
    tuned tree and its predictions' measurements), the timed runs, calibration; then the report."""
    from workbench.bench import report, tune
    from workbench.flags import load_from_args
    from workbench.measure.probe import ProbePlan

    names = [n.strip() for n in args.methods.split(",")]
    wb = load_from_args(args, any(n.startswith(("linear", "eagle2", "static")) for n in names))
    info["linear_order"] = wb.linear_order.describe()
    log(f"target {wb.target_dir} ({wb.dtype_name}), draft {wb.draft_source}; {len(questions)} questions "
        f"({args.subset}); load average {info['load_average_start']}")
    hf_model = None
    if any(n.startswith("hf-") for n in names):
        from workbench.measure.hf_baselines import load_hf_model
        from workbench.device import parse_dtype

        hf_model = load_hf_model(wb.target_dir, parse_dtype(wb.dtype_name)).to(wb.target.lm_head.weight.device)
    journal.start(info["load_average_start"])  # the models loaded: from here on, results are kept
    if journal.setup is None:
        costs = tune.measure_costs(wb)
        log("verify cost " + ", ".join(f"{c['tokens']}:{c['ms']:.0f}ms" for c in costs["verify"]))
        log(f"memory floor {costs['floor']['floor_ms']:.1f} ms per decode step ({costs['floor']['weights_mb']:.0f} MiB "
            f"at {costs['floor']['read_gbs']['gbs']:.1f} GB/s); compute peak {costs['compute']['peak']['gflops']:.0f} "
            f"GFLOP/s, ridge at {ridge_tokens(costs['floor'], costs['compute'])} tokens")
        tuned, known = None, {}  # the run's step costs by draft source, each read or measured once
        if "eagle2:best" in names and best is None:
            tuned = tune.search(wb, max_trees=args.tune_trees, known=known, log=log)
            best = tune.tree_from_name(tuned["best"])
        priced = price(wb, parse_methods(args.methods, best), known, log)
        journal.add_setup({"costs": costs, "tune": tuned, "best_tree": tune.tree_name(best) if best else None,
                           "step_costs": priced})
    else:
        costs, tuned = journal.setup["costs"], journal.setup["tune"]
        best = tune.tree_from_name(journal.setup["best_tree"]) if journal.setup["best_tree"] else None
        priced = journal.setup.get("step_costs") or price(wb, parse_methods(args.methods, best), {}, log)
        log("cost curves, step costs" + (" and tuned tree" if tuned else "") + " kept from the first session")
    methods = parse_methods(args.methods, best)
    mt = [q for q in questions if q.task == "mt_bench"] + [q for q in questions if q.task != "mt_bench"]
    tau_questions = mt[: args.tau_questions] if args.temperature_tau else []
    records, hot, by_round = run_all(Runner(wb, hf_model, args.max_new_tokens), methods, questions=questions,
                                     tau_questions=tau_questions, tau_max_new_tokens=args.tau_max_new_tokens,
                                     log=log, journal=journal, rounds=args.rounds,
                                     probes=ProbePlan.of([m.spec for m in methods if not m.hf], wb)
                                     if priced["methods"] else None)
    summary = summarize(methods, records, hot, by_round)
    calibration = run_calibration(wb, methods, questions=questions, choice=args.calibration,
                                  max_new_tokens=args.calibration_max_new_tokens, log=log)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    result = {
        "meta": {"command": _command_line(), "options": {k: v for k, v in vars(args).items() if k != "func"},
                 "date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": provenance.commit(),
                 "machine": info, "threads": args.threads, "dtype": wb.dtype_name, "subset": args.subset,
                 "questions": len(questions),
                 "tau_questions": len(tau_questions), "tau_max_new_tokens": args.tau_max_new_tokens,
                 "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
                 "target": provenance.shown(str(wb.target_dir)), "draft": provenance.shown(wb.draft_source),
                 "wall_s": round(time.perf_counter() - t_start, 1),
                 "resumed": journal.summary() if journal.resumed else None},
        "costs": costs, "step_costs": priced, "probes": probes_of(journal, questions, args.rounds),
        "tune": tuned, "best_tree": tune.tree_name(best) if best else None,
        "methods": {m.name: m.describe() for m in methods}, "summary": summary,
        "static_vs_dynamic": static_vs_dynamic.compare(methods, records, by_round), "calibration": calibration,
        "records": records, "records_t1": hot,
        # the later rounds' timings, per method and question (their tokens are the first round's)
        "rounds_seconds": {name: [[{"question_id": r["question_id"], "seconds": r["seconds"]} for r in recs]
                                  for recs in runs[1:]] for name, runs in by_round.items()} if args.rounds > 1 else None,
    }
    paths = report.write_all(Path(args.out), result)
    journal.finish()
    log("wrote " + ", ".join(str(p) for p in paths))
    print(report.headline_table(result))
    return 0


def price(wb, methods: list[Method], known: dict, log) -> dict:
    """Each speculative method's step cost, its own draft source's (``step_cost.step_costs``;
    ``known``: the run's by source, read and filled in), as the report reads them:
    ``{"methods": {name: StepCost.as_dict()}, "priced_by": {source: which measurement}}``."""
    from workbench.measure.step_cost import draft_of, priced_by, step_costs

    drafts = {m.name: draft_of(m.spec) for m in methods if m.speculative}
    costs = step_costs(wb, drafts, known=known, log=log)
    return {"methods": {name: c.as_dict() for name, c in costs.items()}, "priced_by": priced_by(drafts, costs)}


def _command_line() -> str:
    """How this run was started, for the report (argv as the shell saw it)."""
    import shlex

    prefix = {"bench": "python -m workbench", "run": "python -m workbench.bench"}.get(sys.argv[1] if len(sys.argv) > 1
                                                                                      else "")
    return f"{prefix} {shlex.join(sys.argv[1:])}" if prefix else "python -m workbench bench (called from Python)"


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m workbench.bench run", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    """``python -m workbench.bench run [options]``: the same as ``python -m workbench bench``."""
    return cmd_bench(build_parser().parse_args(argv))
