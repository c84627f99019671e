"""The load benchmark's result (the dict ``load_run.py`` builds) as ``load.json`` and ``load.md``.

Nothing is computed here that ``load_run.py`` did not record; this file lays it out: the
machine and the command, one table per loop (closed, open) with a row per (load, policy), the
verdict at each load, the cost model's predictions beside the closed loop's rows with the gap
split into measured parts (``load_prediction.py``), and what ``auto`` settled on per batch size,
in our schedule grammar and in vLLM's and SGLang's terms beside today's fixed flags.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.cost_model import StepCost
from workbench.timing import prediction_check
from workbench.viz.tokens import or_dash

LOOPS = {"closed": ("Closed loop: a fixed number of requests in flight", "concurrency"),
         "open": ("Open loop: Poisson arrivals", "rate (req/s)")}
GPU_CAVEAT = ("Measured on this machine: where a verify of many tokens costs several decode steps (a CPU), "
              "speculation stops paying at a small batch; on a GPU, where a verify of a few hundred tokens costs "
              "about one decode step, the crossover sits at a much larger batch. Measure there before copying "
              "a schedule.")


def write_all(out_dir: Path, result: dict) -> tuple[list[Path], str]:
    """Write ``load.json`` and ``load.md``; (their paths, the tables for the terminal)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "load.json", out_dir / "load.md"]
    paths[0].write_text(json.dumps(result, indent=1), encoding="utf-8")
    paths[1].write_text(markdown(result), encoding="utf-8")
    return paths, "\n\n".join(table(result["rows"], mode) for mode in LOOPS if _rows(result["rows"], mode))


def _with_range(row: dict, key: str, spec: str = ".1f") -> str:
    """``31.2 (29.8–33.0)``: the median and, over several rounds, the range."""
    s = row["spreads"].get(key)
    if s is None:
        return "–"
    return f"{s['median']:{spec}}" + (f" ({s['low']:{spec}}–{s['high']:{spec}})" if s["runs"] > 1 else "")


def _rows(rows: list[dict], mode: str) -> list[dict]:
    return [r for r in rows if r["mode"] == mode]


def _equal(value) -> str:
    return "–" if value is None else "yes" if value else "**no**"


def table(rows: list[dict], mode: str) -> str:
    """One loop's rows: throughput and TPOT p50 with their ranges, the other figures as medians."""
    head = (f"| {LOOPS[mode][1]} | policy | tokens/s | TPOT p50 ms | TPOT p90 | TTFT p50 ms | TTFT p90 | e2e p50 ms | "
            "e2e p90 | mean batch | spec steps | τ | = off |")
    out = [head, "|" + "---|" * 13]
    for r in _rows(rows, mode):
        unfinished = r["requests"] - r["finished"]
        note = f" ({unfinished} unfinished)" if unfinished else ""
        out.append(f"| {r['load']:g} | `{r['policy']}`{note} | {_with_range(r, 'throughput_tok_s')} | "
                   f"{_with_range(r, 'tpot_ms_p50', '.0f')} | {or_dash(r['tpot_ms_p90'], '.0f')} | "
                   f"{or_dash(r['ttft_ms_p50'], '.0f')} | {or_dash(r['ttft_ms_p90'], '.0f')} | "
                   f"{or_dash(r['e2e_ms_p50'], '.0f')} | {or_dash(r['e2e_ms_p90'], '.0f')} | "
                   f"{or_dash(r['mean_batch'], '.2f')} | {or_dash(r['spec_step_share'], '.0%')} | "
                   f"{or_dash(r['tau'], '.2f')} | {_equal(r['equal_to_off'])} |")
    return "\n".join(out)


def _verdict_lines(result: dict, mode: str) -> list[str]:
    name = "concurrency" if mode == "closed" else "rate"
    unit = "" if mode == "closed" else "/s"
    return [f"- {name} {v['load']:g}{unit}: tokens/s: {v['throughput_tok_s']}; TPOT p50: {v['tpot_ms_p50']}"
            for v in result["verdicts"] if v["mode"] == mode]


def predicted_md(predicted: dict, runs: int = 1) -> list[str]:
    """The one cost model's tokens/s beside the measured, per closed-loop row of a one-setting
    policy (``load_prediction.py``), each priced by its own draft source's step cost (a column
    names it where they differ): the decode steps alone, with every request's prefill, and the gap
    split into the measured prefill and what remains. ``runs``: the rounds behind each measured
    range (over one, the count inside is weighed against what chance allows:
    ``timing.prediction_check``)."""
    if not predicted["rows"]:
        return ["(no closed-loop row of a one-setting policy)"]
    drafts = dict.fromkeys(r["draft"] for r in predicted["rows"] if r["draft"] != "no draft")
    mixed = len(drafts) > 1
    out = ["| concurrency | policy | mean batch | τ | verified | model step ms | decode steps alone tok/s | "
           "with prefill tok/s | measured tokens/s | with prefill / measured |" + (" priced by |" if mixed else ""),
           "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if mixed else "")]
    for r in predicted["rows"]:
        (lo, hi), loop = r["measured_range"], r["closed_loop_tok_s"]
        inside = " (inside the range)" if lo <= loop <= hi else ""
        out.append(f"| {r['load']:g} | `{r['policy']}` | {r['batch']:.2f} | {or_dash(r['tau'], '.2f')} | "
                   f"{or_dash(r.get('nodes'), '.2f')} | {r['step_ms']:.1f} | {r['predicted_tok_s']:.1f} | {loop:.1f} | "
                   f"{r['measured_tok_s']:.1f} ({lo:.1f}–{hi:.1f}) | "
                   f"{loop / r['measured_tok_s']:.2f}{inside} |" + (f" `{r['draft']}` |" if mixed else ""))
    priced = all(r["prefill_priced"] for r in predicted["rows"])
    said = "; ".join(f"`{d}`: {m}" for d, m in predicted["priced_by"].items() if d != "no draft")
    probes = predicted.get("probes") or {}
    if probes:
        said += (f"; its target part (prefill and verify) and the head's forwards read at the run's own pace instead: "
                 "probes of them (`workbench/measure/probe.py`) took a turn in each round of a closed load ("
                 + ", ".join(f"{found['count']} at {load.split()[-1]} in flight" for load, found in probes.items())
                 + "), and each row is priced by their medians, its step cost's overhead kept")
        if any(found.get("batch") for found in probes.values()):
            said += ("; at a load of more than one request each probe also timed a forward of that many requests "
                     "after the run's prompts for each count of new tokens a request, and the row's forwards are "
                     "scaled by that forward's time over what the curves and the context term say of it, at the "
                     "tokens each of its requests verified (`StepCost.batched_tokens`; the factor at the row's mean "
                     "batch in each line below)")
    ranged = [r for r in predicted["rows"] if r["measured_range"][0] <= r["closed_loop_tok_s"] <= r["measured_range"][1]]
    check = "" if runs < 2 else ": " + prediction_check(
        [r["closed_loop_tok_s"] for r in predicted["rows"]], [r["measured_tok_s"] for r in predicted["rows"]],
        [r in ranged for r in predicted["rows"]], runs)
    out += ["", f"With prefill, the model lies inside the rounds' range of the measured tokens/s in {len(ranged)} of "
            f"{len(predicted['rows'])} rows{check}.",
            "", "Predicted: the one cost model (`workbench/cost_model.py`), each setting priced by the step cost of its "
            f"own draft source (plain decoding by one of them: each holds its verify and overhead): {said}; at the "
            "row's τ and mean running batch B, each request's verify priced at the tokens it held (verified: per "
            "speculative step, root included, as the run counted them; `num_draft_tokens` where a record has no "
            "count). Decode steps alone: `StepCost.predict`, B·τ tokens per step. With prefill: "
            "`StepCost.closed_loop` over the run's requests: each one's share of the decode steps ((n − 1) / τ "
            "steps of step(B) / B each, n its output tokens: the prefill emits the first) plus its prefill "
            "and, under a speculative setting whose draft runs a forward, the draft's catch-up over its prompt, "
            "which hold the whole batch up; the prefills in as many steps as the run admitted the requests in "
            "(the engine's profile counts them), each prompt beyond the first of a step saving what the probes "
            "measured of one forward over several prompts (`StepCost.prefill_joined`; none where no probe timed "
            "it); its decode steps at the mean context they read (each request's "
            "prompt and half its output, where the step cost timed the context term: `StepCost.context_ms`). "
            "Measured: the run's tokens/s, median and range over the rounds."
            + ("" if priced else " The step cost holds no prefill measurement (given, or cached before the prefill "
               "was measured), so its prefill and catch-up are priced 0 here."), "",
            "The gap, part by part (s over a run, medians of the rounds; measured prefill: the engine's own profile "
            "of its prefill steps, `StepProfile` setting `prefill`; measured decode: the rest of the run):", ""]
    return (out + [_gap_line(r) for r in predicted["rows"]] + step_cost_md(predicted.get("step_costs") or {})
            + probes_md(probes))


def probes_md(probes: dict) -> list[str]:
    """The probes' medians by load, which priced the rows in place of the step costs' own (nothing
    for a record without probes)."""
    from workbench.measure.probe import summary_md

    if not probes:
        return []
    return ["", "The probes' medians, which priced each load's rows (`predicted.probes`):", "",
            *(f"- {load.split()[-1]} in flight: {summary_md(found)}" for load, found in probes.items())]


def step_cost_md(costs: dict) -> list[str]:
    """The figures of the step costs that priced the rows (``StepCost.as_dict`` by policy, as
    the record keeps them), one line per distinct measurement: a verify of N tokens, a draft
    forward of R rows, and the overhead lines outside the forwards (ms per step + ms per request,
    the per-level term with it); nothing for a record kept before they were stored."""
    seen, out = {}, []
    for name, c in costs.items():
        key = (c.get("measured"), tuple(map(tuple, c["draft"])), json.dumps(c["overhead"], sort_keys=True))
        seen.setdefault(key, []).append(name)
    for names in seen.values():
        c, o = costs[names[0]], costs[names[0]]["overhead"]
        verify = ", ".join(f"{n}: {ms:.1f}" for n, ms in c["verify"])
        draft = ", ".join(f"{n}: {ms:.1f}" for n, ms in c["draft"]) or "no draft forward"
        line = (f"- {', '.join(f'`{n}`' for n in names)}: {c.get('measured') or 'undated'} ({c['source']}). "
                f"Verify of N tokens, ms: {verify}. Draft forward of R rows, ms: {draft}. Overhead, ms: plain "
                + _per_batch(o["plain_per_step"], o["plain_per_request"]) + _points(o, "plain"))
        if o.get("spec_per_step") or o.get("spec_per_request"):
            line += (f", speculative ({o.get('spec_levels', 0)} levels) "
                     + _per_batch(o["spec_per_step"], o["spec_per_request"]) + _points(o, "tree"))
            if o.get("spec_levels"):
                line += (", each level more or fewer " + _per_batch(o["level_per_step"], o["level_per_request"])
                         + " (never below 0)")
        kv = StepCost.from_dict(c).kv
        if kv:
            each = ", ".join(f"{n}: {ms * 1e3:.1f}" for n, ms in kv)
            line += (f". Each committed token a running request reads, µs a step by the new tokens it brings: {each}; "
                     f"priced beyond the {c.get('prefix', 128):g}-token prefix the curves were timed at")
        if c.get("batched_tokens"):
            by_batch: dict[int, list[str]] = {}
            for n, t, f in c["batched_tokens"]:
                by_batch.setdefault(int(n), []).append(f"{f:.2f}x of {t:g}")
            line += (". A forward of B requests over one sequence of as many tokens (each request's attention apart), "
                     "measured with the overhead, by the new tokens each request brings: "
                     + "; ".join(f"at B = {n}, {', '.join(said)}" for n, said in sorted(by_batch.items())))
        elif c.get("batched"):
            line += (". A forward of B requests over one sequence of as many tokens (each request's attention apart), "
                     "measured with the overhead: " + ", ".join(f"{f:.2f}x at B = {n}" for n, f in c["batched"]))
        out.append(line + ".")
    if not out:
        return []
    return ["", "The step costs behind these predictions, as the record keeps them (`predicted.step_costs`):", "", *out]


def _points(overhead: dict, kind: str) -> str:
    """`` (through 3.1, 5.4, 7.0 at B = 1, 4, 8)``: the batches' medians a line was fitted through,
    where the record keeps them (else "")."""
    pts = (overhead.get("points") or {}).get(kind)
    if not pts:
        return ""
    return (f" (through {', '.join(f'{ms:.1f}' for _, ms in pts)} at B = {', '.join(str(b) for b, _ in pts)},"
            " each the median of every round's timed steps)")


def _per_batch(per_step: float, per_request: float) -> str:
    """``3.6 + 8.6·B`` / ``7.9 − 1.2·B``: an overhead line of a batch of B requests."""
    return f"{per_step:.1f} {'−' if per_request < 0 else '+'} {abs(per_request):.1f}·B"


def _gap_line(r: dict) -> str:
    """One row's gap: the prefill, model against measured, the decode steps likewise, then what
    the model gives with the measured prefill in its place, and whether that lies inside the
    measured range."""
    model, got = r["model_ms"], r["measured_ms"]
    decode = model["decode"] + model["catch_up"]
    catch_up = (f" (the draft's catch-up over the prompts {model['catch_up'] / 1e3:.2f} s of it)"
                if model["catch_up"] else "")
    head = f"- `{r['policy']}` at {r['load']:g} in flight: prefill {model['prefill'] / 1e3:.2f} s by the model"
    if r.get("prefill_steps") is not None:
        saved, steps = r.get("prefill_saved_ms") or 0.0, r["prefill_steps"]
        shared = f", {saved / 1e3:.2f} s saved by prompts sharing a step" if saved else ""
        head += (f" ({_count(r.get('requests_prefilled'))}in {steps:g} prefill step{'' if steps == 1 else 's'}, "
                 f"as the run admitted them{shared})")
    if got["prefill"] is None:
        return head + (f", decode {decode / 1e3:.2f} s{catch_up}; the run's records kept no engine profile to set "
                       "them beside.")
    lo, hi = r["measured_range"]
    swapped = r["with_measured_prefill_tok_s"]
    where = "inside the range" if lo <= swapped <= hi else f"outside the range {lo:.1f}–{hi:.1f}"
    pace = r.get("batch_pace", 1.0)
    if pace != 1.0:
        catch_up += f" (its forwards at {pace:.2f}x the curves' word, the batched probes' pace)"
    return head + (f", {got['prefill'] / 1e3:.2f} s measured; decode {decode / 1e3:.2f} s by the model{catch_up}, "
                   f"{got['decode'] / 1e3:.2f} s measured ({decode / got['decode']:.2f}x). With the measured prefill "
                   f"in its place the model gives {swapped:.1f} tok/s, {swapped / r['measured_tok_s']:.2f}x the "
                   f"measured {r['measured_tok_s']:.1f} ({where}): what remains is the decode steps' error."
                   + _parts_said(r.get("step_parts")))


def _parts_said(parts: dict | None) -> str:
    """`` A step, model against the engine's clock: forward 77.2 against 92.2 ms, ...``: a row's
    decode step part by part (``load_prediction.step_parts``; "" where the records kept none)."""
    if not parts:
        return ""
    m, got = parts["model"], parts["measured"]
    said = [f"{name} {m[key]:.1f} against {got[key]:.1f} ms" for key, name in
            (("forward", "target forward and logits"), ("draft", "draft (its catch-up over the prompts included, a "
                                                              "step's share)"), ("rest", "the rest"))
            if m[key] or got[key]]
    return " A decode step, the model against the engine's own clock (its profile, the rounds' median): " + \
        ", ".join(said) + "."


def _count(requests: int | None) -> str:
    return f"{requests} requests " if requests else ""


def settled_md(name: str, found: dict | None) -> list[str]:
    """What ``name`` ran at each batch size, as a schedule and in the serving engines' terms."""
    from workbench.engine.frameworks import FRAMEWORKS, framework_flags
    from workbench.engine.policy import parse_setting

    if found is None:
        return [f"`{name}` ran no decode step."]
    sizes = " · ".join(f"{b}: `{s}` ({found['steps'][b]} steps)" for b, s in found["batch"].items())
    out = [f"`{name}` ran, at each running batch size (the setting it chose most, over every load and round): "
           f"{sizes}. As a schedule policy (`--policies \"{found['schedule']}\"` runs it as a fixed rule; sizes "
           "between measured ones take the smaller's setting):", "", f"    {found['schedule']}", "",
           "In the serving engines' own terms:", ""]
    out += [f"- **{k}**: `{v}`" for k, v in found["frameworks"].items()]
    settings = sorted({s for s in found["batch"].values() if s != "off"})
    if settings:
        out += ["", "Today's flags for one fixed setting each (`engine/frameworks.py`):", "",
                "| setting | " + " | ".join(FRAMEWORKS) + " |", "|---|" + "---|" * len(FRAMEWORKS)]
        for s in settings:
            flags = framework_flags(parse_setting(s))
            out.append(f"| `{s}` | " + " | ".join(f"`{flags[f]}`" for f in FRAMEWORKS) + " |")
    return out + ["", GPU_CAVEAT]


def cost_md(cost: dict | None) -> list[str]:
    """The step cost a policy such as ``auto`` weighed its candidates by (``measure/step_cost.py``:
    its own draft source's), one line."""
    if not cost:
        return []
    verify = ", ".join(f"{n}: {ms:.1f}" for n, ms in cost["verify_ms"])
    draft = ", ".join(f"{n}: {ms:.1f}" for n, ms in cost["draft_ms"]) or "no draft forward"
    when = f"{cost['measured']}, " if cost.get("measured") else ""
    return [f"It weighed each setting by this step cost ({when}{cost['source']}): a verify of N tokens, ms "
            f"({verify}); a draft forward of R rows, ms ({draft}).", ""]


def _fixed(name: str) -> bool:
    """Whether a policy's name is one fixed setting (a method name), not off or a rule."""
    return name != "off" and not name.startswith(("adaptive", "auto", "schedule"))


def _span(row: dict, key: str = "throughput_tok_s") -> tuple[float, float, float]:
    s = row["spreads"][key]
    return s["median"], s["low"], s["high"]


def _side(a: dict, b: dict, key: str = "throughput_tok_s") -> str:
    """"above" / "below" where ``a``'s range is clear of ``b``'s, else "level"."""
    _, alo, ahi = _span(a, key)
    _, blo, bhi = _span(b, key)
    return "above" if alo > bhi else "below" if ahi < blo else "level"


def crossover_md(rows: list[dict]) -> list[str]:
    """Where the best fixed tree (the fastest fixed setting by median at each concurrency) stops
    paying against ``off`` in the closed loop, read from the rounds' ranges."""
    closed = _rows(rows, "closed")
    loads = sorted({r["load"] for r in closed})
    out, below, above = [], None, []
    for load in loads:
        here = {r["policy"]: r for r in closed if r["load"] == load}
        fixed = [r for name, r in here.items() if _fixed(name)]
        if "off" not in here or not fixed:
            continue
        best = max(fixed, key=lambda r: _span(r)[0])
        m, lo, hi = _span(best)
        om, olo, ohi = _span(here["off"])
        side = _side(best, here["off"])
        out.append(f"- concurrency {load:g}: `{best['policy']}` {m:.1f} ({lo:.1f}–{hi:.1f}) tok/s against off "
                   f"{om:.1f} ({olo:.1f}–{ohi:.1f}): {m / om:.2f}x, "
                   + {"above": "clear above off", "below": "clear below off", "level": "level within noise"}[side])
        if side == "above":
            above.append(load)
        if side == "below" and below is None:
            below = load
    if not out:
        return []
    if below is not None:
        last = max((x for x in above if x < below), default=None)
        where = (f"The best fixed tree falls clear below off at concurrency {below:g}"
                 + (f"; it is clear above off at {last:g}" if last is not None else "") + ".")
    else:
        where = ("At no concurrency measured does the best fixed tree fall clear below off"
                 + (f"; it is clear above off at {', '.join(f'{x:g}' for x in above)}" if above else "") + ".")
    return [where, "", *out]


def _standing(side: str, close: bool) -> str:
    """How a policy stands against its rival: ``side`` is where its range lies ("above": ahead,
    "below": behind, "level": overlapping); ``close``: within 5 % of the rival's median."""
    if side == "level":
        return "level within noise"
    if side == "above":
        return "clear ahead"
    return "behind, within 5 %" if close else "clear behind"


def auto_md(rows: list[dict], name: str = "auto") -> list[str]:
    """``name`` against off and against the better of off and the best fixed tree at each load,
    in tokens/s and TPOT p50: the ratio of medians, and whether the ranges separate."""
    out = []
    for mode in LOOPS:
        for load in sorted({r["load"] for r in _rows(rows, mode)}):
            here = {r["policy"]: r for r in _rows(rows, mode) if r["load"] == load}
            if name not in here or "off" not in here:
                continue
            me = here[name]
            rivals = [r for n, r in here.items() if n == "off" or _fixed(n)]
            best = max(rivals, key=lambda r: _span(r)[0])
            fast = min(rivals, key=lambda r: _span(r, "tpot_ms_p50")[0])
            tput = _span(me)[0] / _span(best)[0]
            tpot = _span(me, "tpot_ms_p50")[0] / _span(fast, "tpot_ms_p50")[0]
            unit = "" if mode == "closed" else "/s"
            out.append(
                f"- {LOOPS[mode][1].split(' ')[0]} {load:g}{unit}: {_span(me)[0] / _span(here['off'])[0]:.2f}x off in "
                f"tokens/s; against the best of off and the fixed trees (`{best['policy']}`) {tput:.2f}x, "
                f"{_standing(_side(me, best), tput >= 0.95)}; TPOT p50 {tpot:.2f}x `{fast['policy']}`'s, "
                f"{_standing(_side(fast, me, 'tpot_ms_p50'), tpot <= 1.05)}")
    return out


def markdown(result: dict) -> str:
    m, s = result["machine"], result["settings"]
    lines = ["# Speculation under load", "", f"`{result['command']}`", "",
             f"{result['date']}, commit {result.get('commit') or 'not recorded'}, {m['cpu']} ({m['cores']} cores, "
             f"{result['threads']} torch threads, "
             f"{m['cuda'] or 'no GPU'}), {result['dtype']}, draft {result['draft']}, "
             f"{m.get('linear_order', 'few-row linear: not recorded')}. {s['prompt_count']} prompts ({s['prompts']}), "
             f"{s['max_new_tokens']} new tokens at most per request, greedy; {s['rounds']} timed round{'s' * (s['rounds'] != 1)} per load; KV "
             f"slots {s['kv_slots'] or 'room for every request in flight'}. Wall time {result['wall_s']:.0f} s. Load "
             f"average {m['load_average_start']} at the start, {m.get('load_average_end')} at the end.", ""]
    if result.get("rendered"):
        r = result["rendered"]
        lines += [f"**Report written again** {r['date']}, commit {r.get('commit') or 'not recorded'}, from this run's "
                  "own records (`--report-only`: nothing timed again; every measured figure is the run's, its "
                  "predictions priced again by this version's code).", ""]
    if result.get("resumed"):
        r = result["resumed"]
        lines += [f"**Resumed run**: {r['reused']} of {r['results']} runs were measured before the last start and "
                  "reused as they were; policies were interleaved within each start only.", ""]
    lines += ["Each round runs every policy once at a load, the first policy rotating; a figure is the median over "
              "the rounds, the range in brackets. p50 / p90 are over a run's requests: TTFT from arrival to the "
              "first token, TPOT the mean gap between a request's later tokens, e2e from arrival to the last. "
              "Mean batch: running requests per decode step; spec steps: the share of decode steps that "
              "speculated; τ: tokens per request per speculative step; = off: every request's output equals "
              "the `off` run's, token for token. A policy wins at a load only where its range is clear of "
              "every other's.", ""]
    for mode, (title, _) in LOOPS.items():
        if _rows(result["rows"], mode):
            lines += [f"## {title}", "", table(result["rows"], mode), "", *_verdict_lines(result, mode), ""]
    if result.get("predicted"):
        lines += ["## Predicted beside measured", "", *predicted_md(result["predicted"], result["settings"]["rounds"]), ""]
    cross = crossover_md(result["rows"])
    if cross:
        lines += ["## Where the best fixed tree stops paying", "", *cross, ""]
    for name in dict.fromkeys(r["policy"] for r in result["rows"] if r["policy"].startswith("auto")):
        lines += [f"## `{name}` against off and the best fixed tree", "", *auto_md(result["rows"], name), ""]
    for name, found in (result.get("settled") or {}).items():
        lines += [f"## What `{name}` settled on", "", *cost_md((m.get("step_costs") or {}).get(name)),
                  *settled_md(name, found), ""]
    return "\n".join(lines)
