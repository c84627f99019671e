"""``python -m workbench.bench load``: speculation under load.

Every policy (``--policies``) at every load: closed loops at each ``--concurrency`` (a fixed
number of requests in flight) and open loops at each ``--rate`` (seeded Poisson arrivals),
each load a fresh engine with room for what is in flight (``load.py``). Per (policy, load):
output tokens/s, TPOT, TTFT and end-to-end latency (p50 and p90 over the requests), the mean
running batch, the share of decode steps that speculated, τ over those steps, and whether
every request's output equals the ``off`` run's, token for token.

Order of work: read the prompts and check the policies and loads (before the model loads), load,
check that every request fits the model's context and the KV pool, one short untimed run per
policy (the warm-up), then for each load ``--rounds`` timed rounds, each running every policy
once, the first policy rotating (``workbench.timing.interleaved``): a change in machine load
hits every policy alike; at a closed load each round also gives one turn to a probe of the
target's part (``measure/probe.py``), which the predictions read. A row's figures are the medians
over the rounds, with the range
beside them; the report names a winner at a load only where its range is clear of every other
(``timing.verdict``), "level within noise" otherwise.

Outputs in ``--out``: ``load.json`` (``{"machine", "command", "rows", "requests", ...}``),
``load.md`` (``load_report.py``) and ``records.jsonl``, where each finished run is kept as it
ends (``journal.py``: phase ``closed 4`` / ``open 2``, method = the policy, ``question_id`` =
the round), so that a stopped run started again with the same settings runs only the rest.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from workbench.bench.load_prediction import predicted
from workbench.measure.probe import summary as probe_summary
from workbench.measure import provenance, specbench
from workbench.measure.journal import Journal, open_journal
from workbench.measure.load import WARMUP, WARMUP_TOKENS, check_load, equal_outputs, round_figures, run_load
from workbench.measure.load_spec import Load
from workbench.measure.metrics import percentile
from workbench.engine.policy import POLICY_GRAMMAR, NamedPolicy, StepCost, parse_policies
from workbench.errors import ArgumentParser, UserError, reports_user_errors
from workbench.jsonl import prompt_rows
from workbench.timing import interleaved, spread, verdict

DEFAULT_POLICIES = "off,eagle2:4/3/2,adaptive,auto"
QUICK = {"concurrency": "1,2", "rate": "2", "policies": "off,eagle2:4/3/2", "requests": 4, "max_new_tokens": 16,
         "rounds": 1}
DEFAULTS = {"concurrency": "1,4,8", "rate": "1", "policies": DEFAULT_POLICIES, "requests": None,
            "max_new_tokens": 64, "rounds": 3}
OPEN_REQUESTS = 8  # requests per open-loop load, by default
# Per (policy, load): each figure a row reports (median over rounds, range beside it).
FIGURES = ("throughput_tok_s", "tpot_ms_p50", "tpot_ms_p90", "ttft_ms_p50", "ttft_ms_p90", "e2e_ms_p50", "e2e_ms_p90",
           "mean_batch", "spec_step_share", "tau", "nodes")


# ---- the command line ------------------------------------------------------------------------------
def _numbers(flag: str, cast, ok, what: str):
    """An argparse ``type``: a comma list of numbers ``ok`` accepts, or ``none`` (no such load)."""

    def parse(text: str) -> list:
        if text.strip() == "none":
            return []
        try:
            values = [cast(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes numbers separated by commas (or none), got {text!r}")
        bad = [v for v in values if not ok(v)]
        if bad:
            raise argparse.ArgumentTypeError(f"{flag} must be {what}, got {bad[0]:g}")
        return values

    return parse


concurrencies = _numbers("--concurrency", int, lambda v: v >= 1, "whole numbers >= 1 (requests in flight)")
rates = _numbers("--rate", float, lambda v: 0 < v < float("inf"), "> 0 requests per second")


def build_parser() -> ArgumentParser:
    from workbench.flags import add_model_args, positive

    p = ArgumentParser(prog="python -m workbench.bench load", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", help="JSONL file, one prompt a line ('prompt', or 'turns': the first turn); "
                                     "default: Spec-Bench questions (--subset, --per-category, --limit)")
    specbench.add_subset_args(p)
    p.add_argument("--concurrency", type=concurrencies,
                   help=f"closed loops: requests in flight, comma list, or none (default {DEFAULTS['concurrency']})")
    p.add_argument("--rate", type=rates,
                   help=f"open loops: Poisson arrivals per second, comma list, or none (default {DEFAULTS['rate']})")
    p.add_argument("--policies", help="speculation policies, separated by commas (by semicolons when one holds "
                                      f"commas), each as generate --policy takes it: {POLICY_GRAMMAR} "
                                      f"(default {DEFAULTS['policies']})")
    p.add_argument("--requests", type=positive("--requests"),
                   help=f"requests per load (default: 2 x the concurrency, at least 4, in a closed loop; "
                        f"{OPEN_REQUESTS} in an open loop)")
    p.add_argument("--max-new-tokens", type=positive("--max-new-tokens"),
                   help=f"new tokens per request at most (default {DEFAULTS['max_new_tokens']})")
    p.add_argument("--rounds", type=positive("--rounds"),
                   help=f"timed rounds per load, each running every policy once (default {DEFAULTS['rounds']})")
    p.add_argument("--seed", type=int, default=0, help="seed of the open loops' arrival times")
    p.add_argument("--kv-slots", type=positive("--kv-slots"),
                   help="KV capacity in slots (default: room for every request that can be in flight)")
    p.add_argument("--quick", action="store_true",
                   help="a first look: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items())
                        + " (flags given win)")
    p.add_argument("--threads", type=positive("--threads"), default=2, help="torch CPU threads")
    p.add_argument("--out", default="bench_out/load", help="output directory; its records.jsonl keeps each run "
                                                           "as it finishes, so a stopped run resumes")
    p.add_argument("--fresh", action="store_true", help="discard an unfinished run in --out and measure again")
    p.add_argument("--report-only", action="store_true",
                   help="time nothing: write --out's report again from its finished run (load.json and "
                        "records.jsonl) with this version's prediction and report code, the run's own figures "
                        "unchanged")
    add_model_args(p)
    return p


def resolve(args) -> argparse.Namespace:
    """The flags with ``--quick``'s sizes or the defaults filled in where none was given."""
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, concurrencies(value) if key == "concurrency" else rates(value) if key == "rate"
                    else value)
    if not args.concurrency and not args.rate:
        raise UserError("--concurrency none and --rate none leave no load to run")
    return args


def loads_of(args) -> list[Load]:
    closed = [Load("closed", c, args.requests or max(4, 2 * c)) for c in args.concurrency]
    return closed + [Load("open", r, args.requests or OPEN_REQUESTS, args.seed) for r in args.rate]


def read_prompts(path: str | None, args) -> list[str]:
    """The prompts' texts: ``--prompts`` (a JSONL file, as ``generate --prompts`` reads it), else
    the Spec-Bench questions' first turns, the tasks taken in turn (request k asks prompt k mod
    their number, so every load mixes the tasks)."""
    if path is None:
        questions = specbench.select(specbench.load_questions(), args.subset, args.per_category)
        return specbench.first_turns_by_task(questions)[: args.limit]
    try:
        out = [text for _, text in prompt_rows(path)]
    except ValueError as err:
        raise UserError(f"--prompts {err}") from None
    if not out:
        raise UserError(f"--prompts {path}: no prompts")
    return out


# ---- the timed rounds --------------------------------------------------------------------------------
def phase(load: Load) -> str:
    """The journal's phase for a load: ``closed 4``, ``open 2``."""
    return f"{load.mode} {load.value:g}"


def measure_all(wb, policies: list[NamedPolicy], *, prompts: list[list[int]], loads: list[Load], args,
                journal: Journal, log, costs: dict[str, StepCost] | None = None,
                probes: bool = False) -> dict[tuple[str, str, int], dict]:
    """Warm-up, then every load's timed rounds; each run kept in ``journal`` as it ends, a run it
    already holds reused as measured (``costs``: by policy name, the step cost a policy such as
    ``auto`` weighs by, ``auto_costs``). With ``probes``, each round of a closed load also takes
    its turn with one probe of the target's part (``probe.ProbePlan`` of the one-setting
    policies at the load's concurrency; the round's prompt and, at a batch, that many prompts from
    it on for the batch's own forwards, kept in the journal's probe lines: the predictions read
    them). Returns (phase, policy, round) -> the run's record."""
    from workbench.measure.probe import TURN, ProbePlan

    costs = costs or {}
    total = len(loads) * len(policies) * args.rounds
    todo = sum(journal.get(phase(ld), p.name, k) is None for ld in loads for p in policies for k in range(args.rounds))
    if todo < total:
        log(f"{total - todo} of {total} runs reused from {journal.path}; {todo} to run")
    warm = [p for p in policies if any(journal.get(phase(ld), p.name, k) is None
                                       for ld in loads for k in range(args.rounds))]
    for p in warm:
        run_load(wb, p, prompts=prompts, load=WARMUP, max_new_tokens=WARMUP_TOKENS, kv_slots=args.kv_slots,
                 cost=costs.get(p.name))
    log(f"warm-up done ({len(warm)} policies)")
    t0, done = time.perf_counter(), [0]

    def one(load: Load, policy: NamedPolicy, calls: Counter):
        def measure() -> float:
            k = calls[policy.name]
            calls[policy.name] += 1
            kept = journal.get(phase(load), policy.name, k)
            if kept is not None:
                return kept["throughput_tok_s"]
            rec = {"question_id": k, **run_load(wb, policy, prompts=prompts, load=load,
                                                max_new_tokens=args.max_new_tokens,
                                                kv_slots=args.kv_slots, cost=costs.get(policy.name)).record()}
            journal.add_result(phase(load), policy.name, rec)
            done[0] += 1
            left = (time.perf_counter() - t0) / done[0] * (todo - done[0])
            tpot = percentile([q["tpot_ms"] for q in rec["requests"] if q["tpot_ms"] is not None], 50)
            log(f"[{done[0]:>3}/{todo}] {load.label:<15} {policy.name:<16} round {k + 1}  {rec['tokens']:>5} tok "
                f"{rec['throughput_tok_s']:>7.2f} tok/s  TPOT p50 " + (f"{tpot:.0f} ms" if tpot is not None else "–")
                + f"  batch {rec['mean_batch'] or 0:.1f}  (~{left:.0f}s left)")
            return rec["throughput_tok_s"]

        return measure

    def probed(load: Load, plan, calls: Counter):
        def measure() -> float:
            k = calls[TURN]
            calls[TURN] += 1
            if journal.get_probe(phase(load), k) is None:
                batch = [prompts[(k + i) % len(prompts)] for i in range(plan.batch)] if plan.batch > 1 else ()
                journal.add_probe(phase(load), {"question_id": k, **plan.take(wb, prompts[k % len(prompts)], batch)})
            return 0.0

        return measure

    for load in loads:
        calls: Counter = Counter()
        fixed = [p.settings()[0] for p in policies if len(p.settings()) == 1]
        plan = ProbePlan.of(fixed, wb, batch=int(load.value)) if probes and load.mode == "closed" else None
        turns = {p.name: one(load, p, calls) for p in policies}
        interleaved({**turns, **({TURN: probed(load, plan, calls)} if plan else {})}, args.rounds)
    return {(phase(ld), p.name, k): journal.get(phase(ld), p.name, k)
            for ld in loads for p in policies for k in range(args.rounds)}


def probes_by_phase(journal: Journal, loads: list[Load], rounds: int) -> dict[str, list[dict]]:
    """The probes a run kept, by the phase of their load (``closed 4``), in round order."""
    out = {}
    for ld in loads:
        found = [journal.get_probe(phase(ld), k) for k in range(rounds)]
        if any(p is not None for p in found):
            out[phase(ld)] = [p for p in found if p is not None]
    return out


# ---- rows, verdicts, what auto settled on --------------------------------------------------------------


def make_rows(policies: list[NamedPolicy], loads: list[Load], records: dict, rounds: int) -> list[dict]:
    """One row per (policy, load): each figure's median over the rounds (spreads beside), and
    whether every request of every round equals the ``off`` run's (None without an ``off``)."""
    rows = []
    for load in loads:
        off = records.get((phase(load), "off", 0))
        for p in policies:
            recs = [records[(phase(load), p.name, k)] for k in range(rounds)]
            per_round = [round_figures(r) for r in recs]
            row = {"policy": p.name, "mode": load.mode, "load": load_value(load)}
            spreads = {}
            for key in FIGURES:
                values = [f[key] for f in per_round if f[key] is not None]
                spreads[key] = spread(values) if values else None
                row[key] = round(spreads[key].median, 3) if values else None
            row["nodes_mix"] = pooled_mix(recs)
            row["equal_to_off"] = None if off is None else all(equal_outputs(r, off) for r in recs)
            row["spreads"] = {k: s.as_dict(3) for k, s in spreads.items() if s is not None}
            row.update(rounds=rounds, requests=load.requests,
                       finished=min(sum(q["e2e_ms"] is not None for q in r["requests"]) for r in recs),
                       refused=max(sum(q["refused"] is not None for q in r["requests"]) for r in recs))
            rows.append(row)
    return rows


def pooled_mix(recs: list[dict]) -> dict[int, int] | None:
    """The rounds' ``nodes_mix`` added up, or None where a round has none (a record kept before
    runs counted them, or, at a batch, before they counted them request by request)."""
    mixes = [r.get("nodes_mix") for r in recs]
    if not mixes or any(not m for m in mixes):
        return None
    total = Counter()
    for m in mixes:
        total.update({int(k): v for k, v in m.items()})
    return dict(sorted(total.items()))


def load_value(load: Load) -> int | float:
    return int(load.value) if load.mode == "closed" else float(load.value)


def verdicts(rows: list[dict]) -> list[dict]:
    """Per load: who wins on throughput and on TPOT p50, only where the ranges separate."""
    from workbench.timing import Spread

    out = []
    for mode, value in dict.fromkeys((r["mode"], r["load"]) for r in rows):
        at = [r for r in rows if (r["mode"], r["load"]) == (mode, value)]
        line = {"mode": mode, "load": value}
        for key, higher, unit in (("throughput_tok_s", True, "tok/s"), ("tpot_ms_p50", False, "ms")):
            spreads = {r["policy"]: Spread(**r["spreads"][key]) for r in at if key in r["spreads"]}
            if not spreads:
                line[key] = "not measured"
            elif min(s.runs for s in spreads.values()) < 2 and len(spreads) > 1:
                line[key] = "one round: no range to judge a winner by (--rounds 2 or more)"
            else:
                line[key] = verdict(spreads, higher, unit).text
        out.append(line)
    return out


def settled(policy: str, records: dict) -> dict | None:
    """The setting ``policy`` ran most at each running batch size, over every load and round:
    ``{"batch": {size: setting}, "steps": {size: decode steps}, "schedule": the same as a
    schedule policy, "frameworks": that schedule in vLLM's and SGLang's terms}`` (sizes between
    the measured ones take the setting of the smaller; None: no decode step)."""
    from workbench.engine.frameworks import schedule_flags
    from workbench.engine.policy import BatchRange, Schedule, parse_setting

    counts: dict[int, Counter] = {}
    for (_, name, _), rec in records.items():
        if name == policy:
            for batch, setting, n in rec["choices"]:
                counts.setdefault(batch, Counter())[setting] += n
    if not counts:
        return None
    chosen = {b: c.most_common(1)[0][0] for b, c in sorted(counts.items())}
    sizes, ranges, lo = list(chosen), [], 1
    for i, b in enumerate(sizes):
        nxt = sizes[i + 1] if i + 1 < len(sizes) else None
        if nxt is not None and chosen[nxt] == chosen[b]:
            continue
        ranges.append(BatchRange(lo, None if nxt is None else nxt - 1, parse_setting(chosen[b])))
        lo = nxt
    schedule = Schedule(tuple(ranges))
    return {"batch": chosen, "steps": {b: sum(c.values()) for b, c in sorted(counts.items())}, "schedule": schedule.text,
            "frameworks": schedule_flags(schedule, largest_batch=sizes[-1])}


# ---- the run ---------------------------------------------------------------------------------------------
def report_costs(wb, policies: list[NamedPolicy], known: dict, log) -> tuple[dict[str, StepCost], dict[str, str]]:
    """The step costs the report's predictions use, by policy name, for each policy with one
    setting: its own draft source's (``step_cost.step_costs``; ``known``: the run's by source,
    read and filled in, so ``auto``'s are not measured again), from the cache or measured once
    before any timed run; and which measurement priced each source (``step_cost.priced_by``)."""
    from workbench.measure.step_cost import draft_of, priced_by, step_costs

    drafts = {p.name: draft_of(p.settings()[0]) for p in policies if len(p.settings()) == 1}
    if not any(drafts.values()):  # nothing speculates: no prediction to set beside the runs
        return {}, {}
    costs = step_costs(wb, drafts, known=known, log=log)
    return costs, priced_by(drafts, costs)


def auto_costs(wb, policies: list[NamedPolicy], known: dict, log) -> dict[str, StepCost]:
    """The step cost each policy that weighs by one (``auto``) weighs by, by name: its own draft
    source's, from the cache or measured once before any timed run (``step_cost.policy_costs``)."""
    from workbench.measure.step_cost import policy_costs

    costs = policy_costs(wb, policies, known=known, log=log)
    for name, cost in costs.items():
        log(f"step cost for {name}: {cost.source}; verify " + ", ".join(f"{n}: {ms:.0f} ms" for n, ms in cost.verify))
    return costs


def run_settings(args, prompts: list[str]) -> dict:
    """What the results depend on, compared when a run resumes."""
    skip = ("out", "fresh", "quick", "func", "report_only")
    settings = {k: v for k, v in sorted(vars(args).items()) if k not in skip}
    digest = hashlib.sha256(json.dumps(prompts).encode()).hexdigest()[:16]
    return {**settings, "prompts_sha256": digest}


def command_line() -> str:
    import shlex

    if len(sys.argv) > 1 and sys.argv[1] == "load":
        return "python -m workbench.bench " + shlex.join(sys.argv[1:])
    return "python -m workbench.bench load (called from Python)"


def build_result(wb, args, *, info: dict, policies: list[NamedPolicy], loads: list[Load], prompts: list[list[int]],
                 records: dict, journal: Journal, wall_s: float, models: dict[str, StepCost] | None = None,
                 priced_by: dict[str, str] | None = None) -> dict:
    """What load.json holds (see docs/benchmarks.md, "Speculation under load"); ``models``: by
    policy name, the step costs whose predictions stand beside the measured rows, and
    ``priced_by`` which measurement each draft source's is (``report_costs``); each closed load's
    probes (``probes_by_phase``) price the target's part of its rows."""
    rows = make_rows(policies, loads, records, args.rounds)
    probes = probes_by_phase(journal, loads, args.rounds)
    return {
        "machine": info, "command": command_line(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "commit": provenance.commit(), "dtype": wb.dtype_name, "threads": args.threads,
        "draft": provenance.shown(wb.draft_source), "target": provenance.shown(str(wb.target_dir)),
        "settings": {"max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "kv_slots": args.kv_slots,
                     "prompts": args.prompts or f"Spec-Bench {args.subset}", "prompt_count": len(prompts),
                     "policies": {p.name: p.text for p in policies}, "seed": args.seed},
        "wall_s": round(wall_s, 1),
        "resumed": journal.summary() if journal.resumed else None,
        "rows": rows, "verdicts": verdicts(rows),
        "predicted": None if not models else {
            "priced_by": priced_by, "step_costs": {name: model.as_dict() for name, model in models.items()},
            **priced_rows(rows, policies, models, prompts=prompts, loads=loads, records=records, probes=probes,
                          rounds=args.rounds)},
        "probes": probes,
        "settled": {p.name: settled(p.name, records) for p in policies if p.needs_cost},
        "requests": [{"policy": p.name, "mode": ld.mode, "load": load_value(ld), "prompt_index": q["prompt_index"],
                      "output_ids": q["output_ids"]}
                     for ld in loads for p in policies for q in records[(phase(ld), p.name, 0)]["requests"]],
    }


def priced_rows(rows: list[dict], policies: list[NamedPolicy], models: dict[str, StepCost], *,
                prompts: list[list[int]], loads: list[Load], records: dict, probes: dict[str, list[dict]],
                rounds: int) -> dict:
    """What ``predicted`` keeps beside the step costs: the closed-loop rows priced by ``models``
    (``load_prediction.predicted``) with each load's probes, and the probes' medians by load."""
    return {"rows": predicted(rows, policies, models, prompts=prompts,
                              runs={(ld.mode, load_value(ld), p.name): [records[(phase(ld), p.name, k)]
                                                                        for k in range(rounds)]
                                    for ld in loads for p in policies},
                              probes={(ld.mode, load_value(ld)): probes[phase(ld)] for ld in loads
                                      if phase(ld) in probes}),
            "probes": {ph: probe_summary(found) for ph, found in probes.items()}}


def report_again(out: Path, log) -> int:
    """``--report-only``: a finished run's predictions and report written again from what it kept
    (its rows, its settings, its runs' records and probes in the journal, the step costs it priced
    by, its prompts tokenized again), with this version's prediction and report code; nothing is timed,
    and every measured figure stays the run's (``rendered`` says when and by which commit)."""
    from workbench.bench.load_report import write_all
    from workbench.measure.journal import FILE, read_journal
    from workbench.pipeline import Workbench

    path = out / "load.json"
    if not path.is_file() or not (out / FILE).is_file():
        raise UserError(f"--report-only: {out} holds no finished load run (load.json and {FILE}): run the "
                        "benchmark there first")
    result = json.loads(path.read_text(encoding="utf-8"))
    if not result.get("predicted"):
        raise UserError(f"--report-only: {path} holds no predictions to write again (a run without step costs)")
    journal = read_journal(out / FILE)
    args = build_parser().parse_args([])
    vars(args).update({k: v for k, v in journal.settings.items() if k != "prompts_sha256"})  # the run's, resolved
    policies = parse_policies(args.policies)
    loads = loads_of(args)
    records = {(phase(ld), p.name, k): journal.get(phase(ld), p.name, k)
               for ld in loads for p in policies for k in range(args.rounds)}
    if None in records.values():
        raise UserError(f"--report-only: {out / FILE} lacks some of the run's results (a run stopped before its end): "
                        "run its command again to finish it")
    log("tokenizing the run's prompts (nothing is timed)")
    wb = Workbench.load(args.target, dtype=result["dtype"], need_draft=False)
    texts = read_prompts(args.prompts, args)
    if run_settings(args, texts)["prompts_sha256"] != journal.settings.get("prompts_sha256"):
        raise UserError(f"--report-only: the run's prompts ({args.prompts or 'Spec-Bench ' + args.subset}) are not "
                        "the ones it ran: their file changed since")
    prompts = [wb.encode(t) for t in texts]
    models = {name: StepCost.from_dict(d) for name, d in result["predicted"]["step_costs"].items()}
    result["predicted"].update(priced_rows(result["rows"], policies, models, prompts=prompts, loads=loads,
                                           records=records, probes=probes_by_phase(journal, loads, args.rounds),
                                           rounds=args.rounds))
    result["rendered"] = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": provenance.commit()}
    paths, _ = write_all(out, result)
    log("wrote " + ", ".join(str(p) for p in paths) + " again from the run's records (nothing timed)")
    return 0


def cmd_load(args) -> int:
    import torch

    from workbench.bench.load_report import write_all
    from workbench.bench.suite import machine_info, stop_on_sigterm
    from workbench.flags import load_from_args

    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[load {time.perf_counter() - t_start:6.0f}s] {msg}", file=sys.stderr, flush=True)

    if args.report_only:
        return report_again(Path(args.out), log)
    args = resolve(args)
    try:
        policies = parse_policies(args.policies)
    except ValueError as err:
        raise UserError(f"--policies: {err}") from None
    loads, texts = loads_of(args), read_prompts(args.prompts, args)
    torch.set_num_threads(args.threads)
    info = machine_info(args.threads)
    journal = open_journal(Path(args.out), run_settings(args, texts), fresh=args.fresh, log=log)
    speculates = any(s.speculative for p in policies for s in p.settings())
    wb = load_from_args(args, speculates)
    info["linear_order"] = wb.linear_order.describe()
    prompts = [wb.encode(t) for t in texts]
    for p in policies:
        for load in loads:
            check_load(wb, p, prompts=prompts, load=load, max_new_tokens=args.max_new_tokens, kv_slots=args.kv_slots)
    known = {}  # the step costs by draft source: each read or measured once in this run
    costs = auto_costs(wb, policies, known, log)
    models, priced = report_costs(wb, policies, known, log)
    info["step_costs"] = {name: {"source": c.source, "measured": c.measured, "verify_ms": [list(p) for p in c.verify],
                                 "draft_ms": [list(p) for p in c.draft]} for name, c in costs.items()}
    log(f"target {wb.target_dir} ({wb.dtype_name}), draft {wb.draft_source}; {len(prompts)} prompts, "
        f"{len(loads)} loads x {len(policies)} policies x {args.rounds} rounds; load average {info['load_average_start']}")
    journal.start(info["load_average_start"])
    try:
        with stop_on_sigterm():
            records = measure_all(wb, policies, prompts=prompts, loads=loads, args=args, journal=journal, log=log,
                                  costs=costs, probes=bool(models))
    except KeyboardInterrupt:
        print(f"interrupted: {len(journal.results)} runs are kept in {journal.path}; the same command resumes "
              "the run", file=sys.stderr)
        return 130
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    result = build_result(wb, args, info=info, policies=policies, loads=loads, prompts=prompts, records=records,
                          journal=journal, wall_s=time.perf_counter() - t_start, models=models, priced_by=priced)
    paths, table = write_all(Path(args.out), result)
    journal.finish()
    log("wrote " + ", ".join(str(p) for p in paths))
    print(table)
    return 0


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    return cmd_load(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
