"""Render a benchmark result (the dict ``suite.py`` builds) as JSON, Markdown and plotly HTML.

Nothing is computed here that ``suite.py`` / ``metrics.py`` did not already record; this file
only lays the numbers out:

- ``results.json``  everything, per-question records included
- ``report.md``     headline table, per-task speedups, per-depth acceptance, verify cost, tuner,
                    static against dynamic trees, calibration
- ``figures.html``  tokens/s per method, speedup per task, tau per method, per-depth acceptance,
                    verify cost curve (plotly.js embedded once, so the page works offline)
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from workbench.bench import static_vs_dynamic, step_report
from workbench.measure.floor import compute_ms, ridge_tokens, roofline_ms
from workbench.timing import Spread, prediction_check, spread, verdict
from workbench.viz.tokens import or_dash


def write_all(out_dir: Path, result: dict) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "report.md", out_dir / "figures.html"]
    paths[0].write_text(json.dumps(result, indent=1), encoding="utf-8")
    paths[1].write_text(markdown(result), encoding="utf-8")
    paths[2].write_text(html(result), encoding="utf-8")
    return paths


def headline_table(result: dict) -> str:
    """One row per method: tau (T=0, T=1), tokens/s, speedups, equality with vanilla; with
    several rounds, each timed figure's range beside its median, and the verdict under the table."""
    rows = ["| method | config | τ (T=0) | τ (T=1) | tokens/s | × vanilla | × HF greedy | = vanilla |",
            "|---|---|---|---|---|---|---|---|"]
    for name, s in result["summary"].items():
        rows.append(f"| `{name}` | {s['label']} | {or_dash(s.get('tau'))} | {or_dash(s.get('tau_t1'))} | "
                    f"{with_range(s, 'tokens_per_s', '.1f')} | {with_range(s, 'speedup_vs_vanilla', '.2f', 'x')} | "
                    f"{with_range(s, 'speedup_vs_hf_greedy', '.2f', 'x')} | "
                    f"{or_dash(s.get('equal_to_vanilla'), '.0%')} |")
    verdict = rounds_verdict(result["summary"])
    return "\n".join(rows + (["", verdict] if verdict else []))


def round_spread(summary: dict, key: str) -> Spread | None:
    """A method's figure over the rounds (``suite.summarize``'s ``rounds``), or None for a run of
    one round or a figure it lacks."""
    values = (summary.get("rounds") or {}).get(key)
    return spread(values) if values else None


def with_range(summary: dict, key: str, fmt: str, unit: str = "") -> str:
    """``1.18x (1.10–1.25x)``: the figure, and its range over the rounds where there are several
    and they differ (a baseline over itself is 1.00x every round)."""
    shown = or_dash(summary.get(key), fmt, unit)
    s = round_spread(summary, key)
    return shown if s is None or s.low == s.high else f"{shown} ({s.low:{fmt}}–{s.high:{fmt}}{unit})"


def rounds_verdict(summary: dict) -> str:
    """What the rounds settle, in words, or "" for one round: each speculative method against
    plain decoding by its speedups paired within each round (clear above where every round's
    is above 1, clear below where every round's is below), then the fastest by median and which
    methods of our engine are level with it within noise (``timing.verdict`` on the rounds'
    tokens/s)."""
    runs = next((s["rounds"]["runs"] for s in summary.values() if s.get("rounds")), 0)
    if runs < 2 or "vanilla" not in summary:
        return ""
    sides = {"above": [], "level": [], "below": []}
    for name, s in summary.items():
        r = round_spread(s, "speedup_vs_vanilla")
        if name == "vanilla" or s.get("tau") is None or r is None:
            continue
        side = "above" if r.low > 1 else "below" if r.high < 1 else "level"
        sides[side].append(f"`{name}` ({r.low:.2f}–{r.high:.2f}x)")
    words = {"above": "clear above it in every round", "level": "level with it (its rounds on both sides of 1)",
             "below": "clear below it in every round"}
    said = "; ".join(f"{words[k]}: {', '.join(v)}" for k, v in sides.items() if v)
    engine = {name: round_spread(s, "tokens_per_s") for name, s in summary.items() if not name.startswith("hf-")}
    engine = {k: x for k, x in engine.items() if x is not None}
    v, fastest = verdict(engine), max(engine, key=lambda n: engine[n].median)
    level = f"fastest by median `{fastest}`" + (
        ", clear of every other range" if v.winner else
        ", level within noise with " + ", ".join(f"`{n}`" for n in v.level if n != fastest))
    ups = {n: s["speedup_vs_vanilla"] for n, s in summary.items() if n in engine and n != "vanilla"}
    order = ""
    if ups and max(ups, key=ups.get) != fastest:
        top = max(ups, key=ups.get)
        order = (f" The × column's highest median, `{top}`, is not the fastest by median: × is each round's own "
                 "ratio to that round's plain decoding, then the median of those ratios, not the ratio of the "
                 "tokens/s medians, so the two orders can differ where the medians are close.")
    return (f"Over {runs} rounds (the methods interleaved within each; figures are the rounds' medians, the range "
            f"the lowest and highest round). Against plain decoding, each round's speedup paired within its round: "
            f"{said}. In tokens/s, {level}.{order}")


def task_table(result: dict) -> str:
    tasks = sorted({t for s in result["summary"].values() for t in s["per_task"]})
    rows = ["| method | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for name, s in result["summary"].items():
        cells = []
        for t in tasks:
            pt = s["per_task"].get(t, {})
            cells.append(or_dash(pt.get("speedup_vs_vanilla"), ".2f", "x") +
                         (f" (τ {pt['tau']:.2f})" if pt.get("tau") is not None else ""))
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _depth_table(result: dict) -> str:
    spec = {n: s for n, s in result["summary"].items() if s.get("per_depth")}
    if not spec:
        return "(no speculative method was run)"
    depth = max(len(s["per_depth"]) for s in spec.values())
    rows = ["| method | T | " + " | ".join(f"d{k}" for k in range(1, depth + 1)) + " |", "|---|---|" + "---|" * depth]
    for name, s in spec.items():
        for t, key in (("0", "per_depth"), ("1", "per_depth_t1")):
            if s.get(key):
                cells = [or_dash(x, ".2f") for x in s[key]] + [""] * (depth - len(s[key]))
                rows.append(f"| `{name}` | {t} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def serving_table(result: dict) -> str:
    """Per speculative setting, vLLM's metrics beside τ (``workbench/metrics.py``)."""
    spec = {n: s for n, s in result["summary"].items() if s.get("vllm")}
    if not spec:
        return "(no run recorded vLLM's counts)"
    rows = ["| method | τ | mean acceptance length | draft acceptance rate | per-position acceptance | "
            "acceptance histogram (0, 1, ... accepted) |", "|---|---|---|---|---|---|"]
    for name, s in spec.items():
        v = s["vllm"]
        per_pos = ", ".join(or_dash(x) for x in v["per_position_acceptance"])
        rows.append(f"| `{name}` | {or_dash(s.get('tau'))} | {or_dash(v['mean_acceptance_length'])} | "
                    f"{or_dash(v['draft_acceptance_rate'])} | {per_pos} | {v['acceptance_histogram']} |")
    return "\n".join(rows)


def stop_table(result: dict) -> str:
    """Per speculative setting, its verify steps by why the walk stopped (``engine/stops.py``); a
    row's counts add up to its steps."""
    spec = {n: s["stop_causes"] for n, s in result["summary"].items() if s.get("stop_causes")}
    if not spec:
        return "(no run recorded stop causes)"
    causes = list(dict.fromkeys(c for counts in spec.values() for c in counts))
    rows = ["| method | steps | " + " | ".join(causes) + " |", "|---|---|" + "---|" * len(causes)]
    for name, counts in spec.items():
        cells = [str(sum(counts.values()))] + [str(counts.get(c, 0)) for c in causes]
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def floor_line(costs: dict, summary: dict | None = None) -> str:
    """The memory floor of one decode step beside the measured ones (the cost curve's N = 1 and,
    when given, plain decoding's tokens/s), or "" when the run measured no floor."""
    f = costs.get("floor")
    if not f:
        return ""
    bw = f["read_gbs"]
    text = (f"Memory floor: the target's {f['weights_mb']:.0f} MiB of weights at {bw['gbs']:.1f} GB/s "
            f"(read here, {bw['lo']:.1f}–{bw['hi']:.1f} over {bw['repeats']} reads, {bw['threads']} threads) "
            f"give {f['floor_ms']:.1f} ms per decode step at best; the cost curve's decode step took "
            f"{costs['decode_ms']:.1f} ms ({costs['decode_ms'] / f['floor_ms']:.2f}x the floor)")
    plain = (summary or {}).get("vanilla", {}).get("tokens_per_s")
    if plain:
        text += f", plain decoding {1e3 / plain:.1f} ms per token ({1e3 / plain / f['floor_ms']:.2f}x)"
    text += "."
    c = costs.get("compute")
    if c:
        peak = c["peak"]
        attention = c["attention_gflop_per_key"] * (c["prefix"] + 1)
        text += (f" Compute floor: a forward does {c['gflop_per_token']:.2f} GFLOP per token in its products and "
                 f"{attention:.3f} in attention over the {c['prefix']}-token prefix; at {peak['gflops']:.0f} GFLOP/s (a "
                 f"{peak['size']}² {peak['dtype']} matrix product here, {peak['lo']:.0f}–{peak['hi']:.0f} over "
                 f"{peak['repeats']}) that is {compute_ms(c, 1):.1f} ms per token. The two floors meet at "
                 f"{ridge_tokens(f, c)} tokens (the ridge): a verify of fewer can cost about one decode step's floor, "
                 "a verify of more cannot, however good the code; the roofline row of the cost table is the larger "
                 "floor at each size.")
    return text


def _cost_table(costs: dict) -> str:
    verify = costs["verify"]
    rows = ["| verify tokens | " + " | ".join(str(c["tokens"]) for c in verify) + " |",
            "|---|" + "---|" * len(verify),
            "| ms | " + " | ".join(f"{c['ms']:.1f}" for c in verify) + " |",
            "| × decode | " + " | ".join(f"{c['ms'] / costs['decode_ms']:.2f}" for c in verify) + " |"]
    if all("lo" in c for c in verify):  # each repeat over the median decode step
        rows.append("| × decode, range | " + " | ".join(f"{c['lo'] / costs['decode_ms']:.2f}–"
                                                       f"{c['hi'] / costs['decode_ms']:.2f}" for c in verify) + " |")
    if costs.get("floor"):
        rows.append("| × floor | " + " | ".join(f"{c['ms'] / costs['floor']['floor_ms']:.2f}" for c in verify) + " |")
        if costs.get("compute"):
            roof = [roofline_ms(costs["floor"], costs["compute"], c["tokens"]) for c in verify]
            rows += ["| roofline ms | " + " | ".join(f"{r:.1f}" for r in roof) + " |",
                     "| × roofline | " + " | ".join(f"{c['ms'] / r:.2f}" for c, r in zip(verify, roof)) + " |"]
    if costs.get("draft"):
        rows += ["", "| draft rows | " + " | ".join(str(c["rows"]) for c in costs["draft"]) + " |",
                 "|---|" + "---|" * len(costs["draft"]),
                 "| ms | " + " | ".join(f"{c['ms']:.1f}" for c in costs["draft"]) + " |"]
    return "\n".join(rows)


def predicted_rows(result: dict) -> list[dict]:
    """Per speculative method with a τ: what the cost model (``workbench/cost_model.py``) predicts
    at its measured τ, beside what was measured, and the model's step part by part. Each method is
    priced by the step cost of its own draft source (``result["step_costs"]``, from
    ``step_cost.step_costs``): ``draft`` names the source, ``measurement`` which measurement.

    Where the run probed its target part (``result["probes"]``, ``measure/probe.py``), the step
    cost's verify, prefill and head forwards are the probes', its overhead its own; and where its
    records keep each turn's prompt length, the prediction is of whole turns as the measurement
    times them (``StepCost.closed_loop`` at one request: each turn's prefill, the draft's catch-up
    over its prompt, then its decode steps), in tokens/s (``predicted_tok_s``, beside the
    measured with its rounds' range) and over plain decoding's whole turns (``predicted``).
    Otherwise ``predicted`` is the decode step's speedup alone (``step_predicted`` either way)."""
    priced = (result.get("step_costs") or {}).get("methods") or {}
    if not priced:
        return []
    from workbench.bench.tune import tree_from_name
    from workbench.engine.config import SpecConfig
    from workbench.measure.methods import parse_methods

    best = tree_from_name(result["best_tree"]) if result.get("best_tree") else None
    plain_turns = _turns(result, "vanilla")
    plain_context = turns_context(plain_turns)
    rows = []
    for name, s in result["summary"].items():
        if s.get("tau") is None or s.get("speedup_vs_vanilla") is None or name not in priced:
            continue
        try:
            parsed = parse_methods(name, best)
        except ValueError:  # a twin ("NAME [F.linear]") has no model of its own here
            continue
        if not parsed:
            continue
        spec = parsed[0].spec
        model = pricing_model(result, name, spec)
        nodes = verified_mix((result.get("records") or {}).get(name) or ()) or verified_nodes(s)
        turns = _turns(result, name)
        context = turns_context(turns)
        p = model.predict(spec, s["tau"], nodes=nodes, context=context)
        row = {"method": name, "tau": s["tau"], "nodes": spec.num_draft_tokens if nodes is None else mean_nodes(nodes),
               "step_predicted": round(p.speedup, 3),
               "plain_step_ms": round(model.plain_ms(1, plain_context) if plain_context else p.plain_ms, 2),
               **p.parts.as_dict(), "draft": spec.draft.name,
               "measurement": measurement(result, result["step_costs"]["priced_by"][spec.draft.name])}
        if context is not None:
            row["context"] = round(context, 1)
        predicted = p.speedup
        if turns is not None and plain_turns is not None:
            speed, extra = whole_turns(model, spec, turns)
            plain_speed, _ = whole_turns(model, SpecConfig("vanilla"), plain_turns)
            predicted = speed / plain_speed
            row.update(_against(s, "tokens_per_s", speed, "tok_s"), turn_extra_ms=round(extra, 1),
                       plain_tok_s=round(plain_speed, 2))
        row.update(predicted=round(predicted, 3), measured=s["speedup_vs_vanilla"],
                   gap=round(s["speedup_vs_vanilla"] - predicted, 3),
                   **_against(s, "speedup_vs_vanilla", predicted, None))
        rows.append(row)
    return rows


def pricing_model(result: dict, name: str, spec):
    """The step cost that prices method ``name`` (``predicted_rows``): its draft source's, with
    the parts the run's probes timed in place where it has probes."""
    from workbench.cost_model import StepCost
    from workbench.measure.probe import probed

    model = StepCost.from_dict(result["step_costs"]["methods"][name])
    probes = result.get("probes") or []
    return probed(model, probes, head=spec.draft.needs.head) if probes else model


def measurement(result: dict, priced_by: str) -> str:
    """Which measurement priced a row: the step cost's (``priced_by``), and the probes where the run
    has them (``probe.label``)."""
    from workbench.measure.probe import label

    probes = result.get("probes") or []
    return label(priced_by, len(probes)) if probes else priced_by


def _turns(result: dict, name: str) -> list[dict] | None:
    """Method ``name``'s first-round records (greedy: every round's tokens are the first's), or None
    where they kept no prompt lengths (records from before they did)."""
    recs = (result.get("records") or {}).get(name)
    if not recs or any("prompt_tokens" not in r for r in recs):
        return None
    return recs


def turns_context(recs: list[dict] | None) -> float | None:
    """The mean context a method's decode steps read over its turns ``recs`` (``_turns``; None
    without them): ``cost_model.decode_context`` of every turn's prompt and output lengths. The
    report's step columns are priced there, as the engine's steps they stand beside ran: at the
    probes' own context alone, a run of long prompts reads its verify several ms under the steps."""
    from workbench.cost_model import decode_context

    if not recs:
        return None
    return decode_context([p for r in recs for p in r["prompt_tokens"]],
                          [len(o) for r in recs for o in r["output_ids"]])


def whole_turns(model, spec, recs: list[dict]) -> tuple[float, float]:
    """What ``model`` predicts of a method's questions as the benchmark measures them
    (``metrics.speed``: the mean over questions of each one's tokens/s): each question's turns
    priced by ``StepCost.closed_loop`` at one request, at that question's own τ and verified
    tokens (its records' per-step counts); returns (that mean, the mean ms a turn spends on its
    prefill and the draft's catch-up)."""
    from workbench.measure import metrics

    speeds, extra, turns = [], 0.0, 0
    for r in recs:
        tau = nodes = None
        if spec.speculative:
            tau = metrics.tau(metrics.accept_lengths([r])) or 1.0
            nodes = verified_mix([r]) or verified_nodes(metrics.serving_summary([r], spec.num_steps))
        loop = model.closed_loop(spec, tau, 1, prompt_lens=r["prompt_tokens"],
                                 output_lens=[len(o) for o in r["output_ids"]], nodes=nodes)
        speeds.append(loop.tokens_per_s)
        extra += loop.prefill_ms + loop.catch_up_ms
        turns += len(r["prompt_tokens"])
    return sum(speeds) / len(speeds), extra / max(turns, 1)


def _against(summary: dict, key: str, predicted: float, suffix: str | None) -> dict:
    """The measured figure ``key`` beside a prediction: its rounds' range and whether the
    prediction lies inside it (nothing for a run of one round). ``suffix``: the keys' ending
    (``predicted_tok_s``, ``measured_tok_s``, ...); None: ``measured_range`` / ``inside``."""
    end = f"_{suffix}" if suffix else ""
    out = {f"predicted{end}": round(predicted, 2), f"measured{end}": summary[key]} if suffix else {}
    r = round_spread(summary, key)
    if r is not None:
        out.update({f"measured_range{end}": [r.low, r.high], f"inside{end}": r.low <= round(predicted, 3) <= r.high})
    return out


def plain_row(result: dict, rows: list[dict]) -> dict | None:
    """Plain decoding's own prediction beside its measurement (whole turns, the probed model of
    the first row), or None where the rows predict no whole turns."""
    if not rows or "plain_tok_s" not in rows[0] or "vanilla" not in result["summary"]:
        return None
    s = result["summary"]["vanilla"]
    return {"method": "vanilla", "step_ms": rows[0]["plain_step_ms"],
            **_against(s, "tokens_per_s", rows[0]["plain_tok_s"], "tok_s")}


def verified_mix(recs) -> dict[int, int] | None:
    """{tokens: steps} of a method's verify steps over its records ``recs``, root included, from
    each step's count of drafts verified (a step that drafted nothing verified its root alone):
    the verify priced as its steps ran it (``cost_model.verify_mix``). None where the records
    kept no per-step counts."""
    counts = Counter(1 + n for r in recs for turn in r.get("drafts_verified") or () for n in turn)
    return dict(sorted(counts.items())) or None


def mean_nodes(nodes) -> float:
    """The tokens a verify held on average: ``nodes`` itself, or a mix's mean."""
    from workbench.cost_model import verify_mix

    return round(sum(n * w for n, w in verify_mix(nodes).items()), 3)


def verified_nodes(summary: dict) -> float | None:
    """The tokens a method's steps verified on average, root included, from the run's own counts
    (vLLM's metrics: drafts verified over the steps that drafted): a tree the draft filled only in
    part (the n-gram lookup proposes what matches) is priced at the verify it ran, not at
    ``num_draft_tokens``. The steps that drafted nothing are not in it: ``verified_mix`` counts
    them, from records that keep each step's count; this is for those that do not. None where the
    run kept no counts."""
    v = summary.get("vllm") or {}
    return 1 + v["num_draft_tokens"] / v["num_drafts"] if v.get("num_drafts") else None


def _inside(row: dict, suffix: str | None) -> str:
    end = f"_{suffix}" if suffix else ""
    if f"measured_range{end}" not in row:
        return ""
    lo, hi = row[f"measured_range{end}"]
    fmt, unit = (".1f", "") if suffix else (".2f", "x")
    return f" ({lo:{fmt}}–{hi:{fmt}}{unit}{', inside' if row[f'inside{end}'] else ''})"


def _predicted_table(result: dict) -> str:
    rows = predicted_rows(result)
    if not rows:
        return "(no speculative method beside vanilla, or no step costs in this run)"
    drafts = dict.fromkeys(r["draft"] for r in rows)  # the sources that priced a row, in the rows' order
    mixed = len(drafts) > 1  # a column says which priced each row only where they differ
    turns = "predicted_tok_s" in rows[0]
    head = ("| method | τ | verify ms | draft ms | overhead ms | step ms | "
            + ("prefill + catch-up ms a turn | predicted tok/s | measured tok/s | " if turns else "")
            + "predicted × | measured × | gap |" + (" priced by |" if mixed else ""))
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    plain = plain_row(result, rows)
    if plain is not None:
        out.append(f"| `vanilla` | 1 | {plain['step_ms']:.1f} | – | – | {plain['step_ms']:.1f} | – | "
                   f"{plain['predicted_tok_s']:.1f} | {plain['measured_tok_s']:.1f}{_inside(plain, 'tok_s')} | 1.00x | "
                   "1.00x | – |" + (" – |" if mixed else ""))
    for r in rows:
        draft = r["draft_extend_ms"] + r["draft_levels_ms"]
        whole = (f"{r['turn_extra_ms']:.0f} | {r['predicted_tok_s']:.1f} | {r['measured_tok_s']:.1f}"
                 f"{_inside(r, 'tok_s')} | ") if turns else ""
        out.append(f"| `{r['method']}` | {r['tau']:.2f} | {r['verify_ms']:.1f} | {draft:.1f} | {r['overhead_ms']:.1f} | "
                   f"{r['step_ms']:.1f} | {whole}{r['predicted']:.2f}x | {r['measured']:.2f}x{_inside(r, None)} | "
                   f"{r['gap']:+.2f} |" + (f" `{r['draft']}` |" if mixed else ""))
    runs = next((s['rounds']['runs'] for s in result['summary'].values() if s.get('rounds')), 1)
    sentences = inside_sentences(rows, plain, runs)
    out += ["", *sentences] if sentences else []
    measurements = {d: next(r["measurement"] for r in rows if r["draft"] == d) for d in drafts}
    said = "; ".join(f"`{d}`: {m}" for d, m in measurements.items())
    priced = ("Predicted: the cost model (`workbench/cost_model.py`) at each method's τ, each method priced by the "
              "step cost of its own draft source (`workbench/measure/step_cost.py`: its forwards and the overhead of "
              "steps that draft from it; a source that runs no forward, the n-gram lookup, has no draft ms)")
    if result.get("probes"):
        priced += (", its prefill, verify and head forwards timed again between the timed turns "
                   f"(`workbench/measure/probe.py`: {len(result['probes'])} probes, one after each question's turn "
                   "of the methods), so that the model is read at the run's own pace")
    priced += (f": {said}. The verify is priced at the tokens the method's steps verified, step by step "
               "(`verified_mix`: a tree the n-gram lookup filled only in part, or not at all where nothing matched, "
               "is a smaller verify than its num_draft_tokens; at one request the mean of the forwards at each "
               "step's count, the curve not being a line).")
    if turns:
        priced += (" The prediction is of whole turns, as the measurement times them: each turn's prefill and the "
                   "draft's catch-up over its prompt, then (tokens − 1) / τ decode steps, each question at its own τ "
                   "and verified tokens, and tokens/s the mean over questions of each one's, as Spec-Bench's speed "
                   "is (the step columns show the step at the method's τ over all questions and at the mean context its "
                   "decode steps read, each turn's prompt and half its output); × is over plain "
                   "decoding's, predicted the same way (the first row).")
    else:
        priced += (" Measured: tokens/s over vanilla's, whole turns; predicted: a decode step's speedup, so each "
                   "turn's prefill and the draft's catch-up over the prompt are in the measured figure only.")
    return "\n".join(out + ["", priced + " The next section splits the gap: the model's step against the step the "
                                        "engine measured in these turns, and that step against whole turns."])


def inside_sentences(rows: list[dict], plain: dict | None, runs: int) -> list[str]:
    """How many predictions lie inside the rounds' range of the measured figure, on which side of
    the measured median the others fall and how many a prediction without error would expect
    inside (``timing.prediction_check``), computed (nothing for a run of one round)."""
    said = []
    ranged = [r for r in rows + ([plain] if plain else []) if "inside_tok_s" in r]
    if ranged and runs > 1:
        check = prediction_check([r["predicted_tok_s"] for r in ranged], [r["measured_tok_s"] for r in ranged],
                                 [r["inside_tok_s"] for r in ranged], runs)
        said.append(f"The predicted tokens/s lies inside the rounds' range of the measured for "
                    f"{sum(r['inside_tok_s'] for r in ranged)} of {len(ranged)} settings (plain decoding included): "
                    f"{check}.")
    ranged = [r for r in rows if "inside" in r]
    if ranged and runs > 1:
        check = prediction_check([r["predicted"] for r in ranged], [r["measured"] for r in ranged],
                                 [r["inside"] for r in ranged], runs)
        said.append(f"The predicted speedup lies inside the rounds' range of the measured one for "
                    f"{sum(r['inside'] for r in ranged)} of {len(ranged)} methods: {check}.")
    return [" ".join(said)] if said else []


def _tune_table(tuned: dict | None) -> str:
    if not tuned:
        return "(not tuned in this run: eagle2:best was given or not asked for)"
    rows = [f"On {len(tuned['prompts'])} tuning prompts (not from Spec-Bench), {tuned['max_new_tokens']} new tokens; "
            f"vanilla {tuned['vanilla_tokens_per_s']} tok/s. Best: **{tuned['best']}** (D/S/K).", "",
            "| tree D/S/K | step ms predicted | step ms measured | bound | τ | tokens/s | × vanilla | predicted × |",
            "|---|---|---|---|---|---|---|---|"]
    for t in tuned["trees"]:
        rows.append(f"| {t['tree']} | {t['step_ms']:.0f} | {t['measured_step_ms']:.0f} | {t['bound']:.2f} | "
                    f"{t['tau']:.2f} | {t['tokens_per_s']:.1f} | {t['measured_speedup']:.2f}x | "
                    f"{t['predicted_speedup']:.2f}x |")
    priced = "; ".join(f"`{d}`: {m}" for d, m in (tuned.get("priced_by") or {}).items())
    rows += ["", "Predicted step = the cost model (workbench/cost_model.py) with the step cost of the trees' draft "
             f"source{f' ({priced})' if priced else ''}: the draft extend and later levels, the verify of "
             "num_draft_tokens and the step's measured overhead; measured = seconds per target forward, prefill "
             "included. bound = speedup if every draft were accepted."]
    if tuned.get("skipped"):
        rows.append(f"\nSkipped (cannot beat decoding even if every draft were accepted, or over the "
                    f"limit of trees): {', '.join(tuned['skipped'])}")
    return "\n".join(rows)


def markdown(result: dict) -> str:
    m = result["meta"]
    mach = m["machine"]
    return "\n".join([
        "# Spec-Bench benchmark", "",
        f"`{m['command']}` — {m['date']}, commit {m.get('commit') or 'not recorded'}, {mach['cpu']} "
        f"({mach['cores']} cores, {mach['torch_threads']} torch "
        f"threads, {mach['cuda'] or 'no GPU'}), {m['dtype']}, {m['questions']} questions ({m['subset']}), "
        f"{m['max_new_tokens']} new tokens, draft {m['draft']}, {mach.get('linear_order', 'few-row linear: not recorded')}. Wall time {m['wall_s']:.0f} s. Load average "
        f"{mach['load_average_start']} at start, {mach.get('load_average_end')} at the end.", "",
        *_resumed_md(m.get("resumed")), *_rendered_md(m.get("rendered")),
        "Speedup = mean over questions of tokens/s, over the baseline's (Spec-Bench). "
        + (f"Temperature 0 everywhere except τ (T=1), on {m['tau_questions']} questions × "
           f"{m.get('tau_max_new_tokens')} new tokens. " if m["tau_questions"] else
           "Temperature 0 everywhere (τ at T=1 not measured in this run: `--no-temperature-tau`). ")
        + "`= vanilla`: share of questions whose output ids equal vanilla's.", "",
        headline_table(result), "", floor_line(result["costs"], result["summary"]), "",
        "## Speedup over vanilla per Spec-Bench task", "", task_table(result), "",
        "## Per-depth acceptance", "",
        "P(accept at depth k | depth k-1 accepted), pooled over verify steps.", "", _depth_table(result), "",
        "## vLLM's metrics", "",
        "As vLLM defines them (`vllm/v1/spec_decode/metrics.py`): over the steps that drafted, mean acceptance "
        "length = 1 + accepted / steps, draft acceptance rate = accepted / verified drafts (a tree's siblings count "
        "as drafted, so it reads low for wide trees), per-position acceptance = share of steps that accepted at "
        "least k drafts (position = depth).", "", serving_table(result), "",
        "## Why the steps stopped", "",
        "Verify steps at T=0 by the cause of their walk's stop (docs/design.md, \"Why a step stopped\").", "",
        stop_table(result), "",
        "## Verify cost", "",
        f"One target forward of N tokens after a {result['costs']['prefix_len']}-token prefix (logits included), "
        + ("ms: one token's median over the rounds, each larger size's that plus the median of each round's own "
           "difference from one token (`timing.paired_points`)" if result["costs"].get("read") == "paired" else
           "median ms (each size's own, as this record was measured; later records read a round's sizes by their "
           "paired differences)")
        + "; the range is the fastest and slowest repeat; the sizes take turns, one forward of each a round, so a "
          "round's sizes share the machine's pace.", "", _cost_table(result["costs"]), "",
        floor_line(result["costs"], result["summary"]), "",
        "## Predicted beside measured", "", _predicted_table(result), "",
        "## Where a decode step's time goes", "", step_report.profile_table(result), "",
        "### The gap between predicted and measured, in two measured steps", "",
        step_report.gap_table(result, predicted_rows(result)), "",
        "## Best tree for this machine", "", _tune_table(result.get("tune")), "",
        "## Static against dynamic trees at the same num_draft_tokens", "",
        "`static:D` drafts EAGLE-1's fixed tree cut to D tokens, `eagle2` the dynamic tree of the same D, "
        "from the same head; ratios are dynamic / static (τ at temperature 0; tokens/s as above).", "",
        static_vs_dynamic.markdown(result.get("static_vs_dynamic") or []), "",
        "## Calibration: draft confidence against acceptance", "", _calibration_md(result.get("calibration")), "",
    ])


def _rendered_md(rendered: dict | None) -> list[str]:
    """The line that says a report was written again from its run's records (``--report-only``)."""
    if not rendered:
        return []
    return [f"**Report written again** {rendered['date']}, commit {rendered.get('commit') or 'not recorded'}, from "
            "this run's own records (`--report-only`: nothing timed again; every figure is the run's).", ""]


def _resumed_md(resumed: dict | None) -> list[str]:
    """The lines that say a run was stopped and resumed, and which results came from which start."""
    if not resumed:
        return []
    starts = "; ".join(f"{s['started']}, load average {s['load_average_start']}: {s['measured']} measured"
                       + (f", the last {s['last_result_s']:.0f} s after that start" if s["last_result_s"] else "")
                       for s in resumed["sessions"])
    return [f"**Resumed run**: {resumed['reused']} of {resumed['results']} results were measured before the last "
            f"start and reused as they were, timings included (starts: {starts}). The methods were interleaved "
            "within each start only, so a change of machine load between starts can favour some methods; "
            "compare within one start where it matters (per-record `seconds` in results.json, "
            f"each record's start in {resumed['journal']}).", ""]


def _calibration_md(cal: dict | None) -> str:
    if not cal:
        return "(no calibration pass: --calibration none, or no tree method was run)"
    t, s = cal["table"], cal["table"]["summary"]
    f = lambda x: or_dash(x, ".3f")  # noqa: E731
    rows = [f"`{cal['method']}` ({cal['label']}), greedy, first turns of {cal['questions']} questions × "
            f"{cal['max_new_tokens']} new tokens, traced: {s['steps']} steps, {s['nodes']} verified nodes, "
            f"{s['tried']} tried (parent accepted), {s['accepted']} accepted. P(accept | tried) "
            f"{f(s['p_accept_given_tried'])}, P(accept) {f(s['p_accept'])}; ECE draft probability {f(s['ece_prob'])}, "
            f"path score {f(s['ece_score'])}.", "",
            "| bin | tried | accepted | P(accept \\| tried) vs draft prob | verified | accepted | P(accept) vs path score |",
            "|---|---|---|---|---|---|---|"]
    for pb, sb in zip(t["prob_bins"], t["score_bins"]):
        rows.append(f"| {pb['lo']:.1f}–{pb['hi']:.1f} | {pb['count']} | {pb['accepted']} | {f(pb['rate'])} | "
                    f"{sb['count']} | {sb['accepted']} | {f(sb['rate'])} |")
    rows += ["", "| depth | verified | tried | accepted | P(accept \\| tried) | P(accept) | per-depth rate |",
             "|---|---|---|---|---|---|---|"]
    for d in t["depths"]:
        rows.append(f"| {d['depth']} | {d['nodes']} | {d['tried']} | {d['accepted']} | "
                    f"{f(d['p_accept_given_tried'])} | {f(d['p_accept'])} | {f(d['reach'])} |")
    return "\n".join(rows)


def figures(result: dict) -> list:
    import plotly.graph_objects as go

    summ = result["summary"]
    names = list(summ)
    figs = [go.Figure(go.Bar(x=names, y=[summ[n]["tokens_per_s"] for n in names]),
                      layout=dict(title="Tokens/s per method (temperature 0)", yaxis_title="tokens/s"))]
    tasks = sorted({t for s in summ.values() for t in s["per_task"]})
    fig = go.Figure(layout=dict(title="Speedup over vanilla per Spec-Bench task", barmode="group",
                                yaxis_title="× vanilla"))
    for n in names:
        fig.add_bar(name=n, x=tasks, y=[summ[n]["per_task"].get(t, {}).get("speedup_vs_vanilla") for t in tasks])
    figs.append(fig)
    spec = [n for n in names if summ[n].get("tau") is not None]
    fig = go.Figure(layout=dict(title="Accept length τ per method", barmode="group", yaxis_title="τ"))
    fig.add_bar(name="T=0", x=spec, y=[summ[n]["tau"] for n in spec])
    fig.add_bar(name="T=1", x=spec, y=[summ[n].get("tau_t1") for n in spec])
    figs.append(fig)
    fig = go.Figure(layout=dict(title="Per-depth acceptance: P(accept at depth k | depth k-1 accepted)",
                                xaxis_title="depth k", yaxis_title="rate", yaxis_range=[0, 1.05]))
    for n in spec:
        fig.add_scatter(name=f"{n} T=0", x=list(range(1, len(summ[n]["per_depth"]) + 1)), y=summ[n]["per_depth"])
    figs.append(fig)
    costs = result["costs"]
    fig = go.Figure(layout=dict(title=f"Verify cost (target forward of N tokens, {result['meta']['dtype']})",
                                xaxis_title="verify tokens N", yaxis_title="ms"))
    fig.add_scatter(name="verify", x=[c["tokens"] for c in costs["verify"]], y=[c["ms"] for c in costs["verify"]])
    if costs.get("draft"):
        fig.add_scatter(name="draft forward (rows)", x=[c["rows"] for c in costs["draft"]],
                        y=[c["ms"] for c in costs["draft"]])
    figs.append(fig)
    rows = [r for r in result.get("static_vs_dynamic") or [] if r["task"] == "all"]
    if rows:
        fig = go.Figure(layout=dict(title="Static vs dynamic tree at the same num_draft_tokens", barmode="group",
                                    xaxis_title="num_draft_tokens D", yaxis_title="τ (temperature 0)"))
        fig.add_bar(name="static (EAGLE-1 tree)", x=[str(r["D"]) for r in rows], y=[r["tau_static"] for r in rows])
        fig.add_bar(name="dynamic (EAGLE-2)", x=[str(r["D"]) for r in rows], y=[r["tau_dynamic"] for r in rows])
        figs.append(fig)
    if result.get("calibration"):
        from workbench.viz.calibration import depth_figure, reliability_figure

        figs += [reliability_figure(result["calibration"]["table"], f"Reliability ({result['calibration']['method']})"),
                 depth_figure(result["calibration"]["table"])]
    return figs


def html(result: dict) -> str:
    parts = [fig.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate(figures(result))]
    m = result["meta"]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Spec-Bench benchmark</title></head><body>"
            f"<h1>Spec-Bench benchmark</h1><p>{m['date']}, {m['machine']['cpu']}, {m['dtype']}, "
            f"{m['questions']} questions ({m['subset']}), draft {m['draft']}</p>" + "".join(parts) + "</body></html>")
