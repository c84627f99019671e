"""Compare decoding methods on one prompt, from their step traces: τ per step, tokens per target
forward, what a verify forward costs here, and predicted beside measured speedup.

``runs`` maps a name ("vanilla", "linear", "linear (same verify budget)", "eagle2") to
``{"config": str, "traces": [...], "spec": SpecConfig, "model": StepCost}`` (``model``: the cost
model of this machine for the run's draft source, where it was measured). Measured times come from the traces'
``timing_ms`` (real timings of these very steps). The prefill is left out of every time and rate:
it is the same forward for every method.

    predicted speedup = the project's one cost model (``workbench/cost_model.py``) at the run's τ
    measured speedup  = (tokens / step time) / (vanilla tokens / vanilla step time)

Where both are shown, ``gap_html`` puts the model's step beside the run's own, part by part
(verify, draft, the rest of the step), so the difference between them is accounted for.
"""

from __future__ import annotations

import html
from statistics import median

import plotly.graph_objects as go

from workbench.metrics import speedup, tau, traces_serving, traces_stop_causes
from workbench.viz.html import note, table
from workbench.viz.labels import Axes, name_points
from workbench.engine.drafts.registry import source_named
from workbench.engine.stops import CAUSES
from workbench.engine.timings import target_ms
from workbench.viz.style import METHOD, OKABE_ITO, base_layout, empty_figure
from workbench.viz.tokens import or_dash


def _steps(traces: list[dict]) -> list[dict]:
    return [t for t in traces if t["kind"] != "prefill"]


def run_summary(traces: list[dict]) -> dict:
    """Verify steps, tokens, mean τ, verify block size D, median ms of draft / verify / whole
    step, and tokens per second over the steps (prefill excluded)."""
    steps = _steps(traces)
    if not steps:
        return {"steps": 0, "tokens": sum(len(t["emitted"]) for t in traces), "tau": None}
    spec = steps[0]["kind"] == "spec"
    totals = [sum(t["timing_ms"].values()) for t in steps]
    tokens = sum(len(t["emitted"]) for t in steps)
    return {
        "steps": len(steps), "target_forwards": len(traces), "tokens": sum(len(t["emitted"]) for t in traces),
        "tau": tau([t["accept_length"] for t in steps]),
        "D": len(steps[0]["tree"]["nodes"]) if spec else 1,
        "draft_ms": median(t["timing_ms"]["draft_extend_ms"] + t["timing_ms"]["draft_tree_ms"] for t in steps)
        if spec else 0.0,
        "verify_ms": median(target_ms(t["timing_ms"]) for t in steps),
        "step_ms": median(totals), "tokens_per_s": 1e3 * tokens / sum(totals) if sum(totals) else 0.0,
    }


def speedups(runs: dict) -> dict[str, dict]:
    """Per run: the speedup its cost model (``model``, a ``StepCost``) predicts at the run's τ and
    the one measured against "vanilla" (None without a model, a ``spec`` or a vanilla run)."""
    base = run_summary(runs["vanilla"]["traces"]) if "vanilla" in runs else None
    out = {}
    for name, run in runs.items():
        s = run_summary(run["traces"])
        if not s["steps"]:
            out[name] = {"predicted": None, "measured": None}
            continue
        spec, model = run.get("spec"), run.get("model")
        predicted = model.predict(spec, s["tau"]).speedup if model is not None and spec is not None else None
        measured = speedup(s["tokens_per_s"], base["tokens_per_s"]) if base and base["steps"] else None
        out[name] = {"predicted": predicted, "measured": measured}
    return out


def gap_rows(runs: dict) -> list[dict]:
    """Per run with steps and a model: the model's step (``StepCost.parts`` at the run's τ) beside the run's
    own medians, part by part: verify, draft, and the rest of the step (the model's overhead; in
    the traces, every phase that is neither). ``gap_ms`` = measured − predicted, per part and whole."""
    rows = []
    for name, run in runs.items():
        s, spec, model = run_summary(run["traces"]), run.get("spec"), run.get("model")
        if not s["steps"] or spec is None or model is None:
            continue
        parts = model.parts(spec, 1, s["tau"] if spec.speculative else None)
        measured = {"verify": s["verify_ms"], "draft": s["draft_ms"],
                    "rest": max(0.0, s["step_ms"] - s["verify_ms"] - s["draft_ms"])}
        predicted = {"verify": parts.verify_ms, "draft": parts.draft_ms, "rest": parts.overhead_ms}
        rows.append({"method": name, "predicted": predicted, "measured": measured,
                     "gap_ms": {k: measured[k] - predicted[k] for k in measured},
                     "step_predicted": parts.total_ms, "step_measured": s["step_ms"],
                     "measurement": model.measured or model.source})
    return rows


def gap_html(runs: dict) -> str:
    """``gap_rows`` as a table, with the measurement each run's model came from (which runs, where
    they differ) and the largest part of each run's gap named."""
    rows, attrs = [], []
    found = gap_rows(runs)
    if not found:
        return ""
    for r in found:
        p, m, g = r["predicted"], r["measured"], r["gap_ms"]
        widest = max(g, key=lambda k: abs(g[k]))
        rows.append([f"<b>{html.escape(r['method'])}</b>"]
                    + [f"{p[k]:.1f} / {m[k]:.1f}" for k in ("verify", "draft", "rest")]
                    + [f"{r['step_predicted']:.1f} / {r['step_measured']:.1f}",
                       f"{r['step_measured'] - r['step_predicted']:+.1f} ms, most in {widest} ({g[widest]:+.1f})"])
        attrs.append({"method": r["method"]})
    out = table(["method", "verify ms (model / here)", "draft ms", "rest of the step ms", "step ms", "gap"],
                rows, attrs, name="gap")
    by_measurement: dict[str, list[str]] = {}  # each run's model is its own draft source's
    for r in found:
        by_measurement.setdefault(r["measurement"], []).append(r["method"])
    sources = html.escape("; ".join(by_measurement) if len(by_measurement) == 1 else
                          "; ".join(f"{', '.join(names)}: {m}" for m, names in by_measurement.items()))
    return out + note(f"The model is the measured cost model of this machine, each run's for its own draft "
                      f"source ({sources}); 'here' is the median of this prompt's own steps. The rest of the step "
                      "is the model's measured overhead beside the traces' build, accept and commit phases; a gap "
                      "in verify or draft is this prompt's forwards against the curves (another prefix length, a "
                      "busy moment).")


def run_colours(runs: dict) -> dict[str, str]:
    """One colour per run, the same on every chart of one comparison: a method's (``METHOD``),
    else its draft source's (``DraftSource.colour``, by the name: ``ngram:1-12`` -> ngram), else the
    palette's next unused colour in the runs' order."""
    known = {name: METHOD.get(name) or getattr(source_named(name), "colour", None) for name in runs}
    spare = [c for c in OKABE_ITO.values() if c not in known.values() and c != OKABE_ITO["grey"]]
    out = {}
    for name, colour in known.items():
        out[name] = colour or (spare.pop(0) if spare else OKABE_ITO["grey"])
    return out


def tau_figure(runs: dict, height: int = 300) -> go.Figure:
    """τ per verify step, one line per method."""
    fig, colours = go.Figure(), run_colours(runs)
    for name, run in runs.items():
        steps = _steps(run["traces"])
        fig.add_trace(go.Scatter(x=[t["step"] for t in steps], y=[t["accept_length"] for t in steps],
                                 mode="lines+markers", name=name, line=dict(color=colours[name])))
    fig.update_layout(**base_layout("τ per step (tokens per target forward)", height))
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="τ", rangemode="tozero", dtick=1)
    return fig


def speed_words(runs: dict) -> dict[str, str]:
    """Per run, its measured speed in a few words: tokens/s over its steps and, beside vanilla,
    the measured speedup ("41 tokens/s, 1.23× plain"); "" for a run without steps."""
    sp = speedups(runs)
    out = {}
    for name, run in runs.items():
        s = run_summary(run["traces"])
        ratio = f", {sp[name]['measured']:.2f}× plain" if sp[name]["measured"] is not None else ""
        out[name] = f"{s['tokens_per_s']:.0f} tokens/s{ratio}" if s["steps"] else ""
    return out


def tokens_figure(runs: dict, height: int = 300) -> go.Figure:
    """Tokens emitted so far against target forwards: the steeper, the fewer forwards per token.
    A forward's cost differs between runs (a bigger tree, a deeper draft), so each run's legend
    entry carries its measured speed (``speed_words``): the steepest line need not be the fastest.
    Each line's ``meta`` is its run's name."""
    fig, colours, speed = go.Figure(), run_colours(runs), speed_words(runs)
    for name, run in runs.items():
        total, xs, ys = 0, [], []
        for i, t in enumerate(run["traces"], start=1):
            total += len(t["emitted"])
            xs.append(i), ys.append(total)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"{name}: {speed[name]}" if speed[name] else
                                 name, meta=name, line=dict(color=colours[name])))
    fig.update_layout(**base_layout("Tokens against target forwards; under it, each run's measured speed", height,
                                    width=560))  # a half-width plot: the title wraps to it
    rows = len(runs)
    fig.update_layout(height=height + 40 + 20 * rows, margin=dict(b=60 + 20 * rows),  # the legend under the x title
                      legend=dict(orientation="v", yanchor="top", y=-0.32, xanchor="left", x=0))
    fig.update_xaxes(title="target forwards (prefill = 1)")
    fig.update_yaxes(title="tokens emitted", rangemode="tozero")
    return fig


def cost_figure(runs: dict, measured: list[dict] | None = None, height: int = 300) -> go.Figure:
    """Verify forward time against verify block size: the median of each run's steps, and the
    measured curve (``measure_verify_cost``) when given, with the machine's roofline where its
    points carry one (``roofline_ms``: no forward of that size can cost less here) and the same
    forward with every product by ``F.linear`` where they carry that (``plain_ms``: what this
    CPU's measured linear order saves)."""
    fig, colours = go.Figure(), run_colours(runs)
    grey = OKABE_ITO["grey"]
    spare = [c for c in OKABE_ITO.values() if c not in colours.values() and c != grey] + [grey, grey]
    measured_c, roofline_c, plain_c = grey, spare[0], spare[1]  # no run's colour serves a curve too
    if measured:
        fig.add_trace(go.Scatter(x=[m["tokens"] for m in measured], y=[m["ms"] for m in measured],
                                 mode="lines+markers", name="measured: one target forward of N tokens",
                                 line=dict(color=measured_c, dash="dot")))
        if all("roofline_ms" in m for m in measured):
            fig.add_trace(go.Scatter(x=[m["tokens"] for m in measured], y=[m["roofline_ms"] for m in measured],
                                     mode="lines", name="roofline here: the larger of the memory and compute floors",
                                     line=dict(color=roofline_c, width=3)))
        if all("plain_ms" in m for m in measured):
            fig.add_trace(go.Scatter(x=[m["tokens"] for m in measured], y=[m["plain_ms"] for m in measured],
                                     mode="lines+markers", name="the same forward, every product by F.linear",
                                     line=dict(color=plain_c, dash="dash")))
    for name, run in runs.items():
        s = run_summary(run["traces"])
        if s["steps"]:
            fig.add_trace(go.Scatter(x=[s["D"]], y=[s["verify_ms"]], mode="markers", name=f"{name} (its steps)",
                                     marker=dict(size=12, color=colours[name], symbol="diamond")))
    fig.update_layout(**base_layout("Verify cost on this machine", height))
    fig.update_xaxes(title="tokens in the verify forward (D)", type="log", tickvals=[1, 2, 4, 8, 16, 32, 64, 128])
    fig.update_yaxes(title="ms", rangemode="tozero")
    return fig


# One colour per stop cause (``engine/stops.py``), in its order: Paul Tol's light palette, pale
# beside the saturated Okabe-Ito hues the runs wear, so that no cause looks like a run.
CAUSE_COLOURS = dict(zip(CAUSES, ["#EE8866", "#EEDD88", "#FFAABB", "#77AADD", "#99DDFF", "#44BB99", "#BBCC33",
                                  "#AAAA00", "#DDDDDD", "#C8B8E8"]))


def stops_figure(runs: dict, height: int = 260) -> go.Figure:
    """Each speculative run's steps by why the walk stopped (the traces' ``stop``), one stacked
    bar per run: its segments add up to the run's speculative steps. One colour per cause
    (``CAUSE_COLOURS``), the count written in each segment; ``meta`` = the cause."""
    counts = {name: traces_stop_causes(run["traces"]) for name, run in runs.items()}
    counts = {name: c for name, c in counts.items() if c}
    if not counts:
        return empty_figure("No run speculated: no stop causes to count.", 200)
    fig, names = go.Figure(), list(counts)[::-1]  # the first run on top
    for cause in [c for c in CAUSES if any(c in n for n in counts.values())]:
        xs = [counts[n].get(cause, 0) for n in names]
        fig.add_trace(go.Bar(y=names, x=xs, orientation="h", name=cause, meta=cause,
                             marker=dict(color=CAUSE_COLOURS[cause]), text=[x or "" for x in xs],
                             textposition="inside", insidetextanchor="middle",
                             hovertemplate=f"%{{y}}: %{{x}} step(s) stopped by {cause}<extra></extra>"))
    fig.update_layout(**base_layout("Why each speculative step stopped: steps per cause, per run", height))
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title="speculative steps")
    return fig


def summary_html(runs: dict) -> str:
    """One row per method: config, forwards, tokens, τ, D, median ms, tokens/s, speedups (the
    predicted one from the run's cost model, where it was measured); and whether the outputs agree
    (greedy speculation must reproduce vanilla exactly)."""
    sp = speedups(runs)
    modelled = any(run.get("model") is not None for run in runs.values())
    rows, attrs = [], []
    for name, run in runs.items():
        s = run_summary(run["traces"])
        rows.append([f"<b>{html.escape(name)}</b>", html.escape(run["config"]), str(s.get("target_forwards", "–")),
                     str(s["tokens"]), or_dash(s["tau"]), str(s.get("D", "–")), or_dash(s.get("draft_ms"), ".0f"),
                     or_dash(s.get("verify_ms"), ".0f"), or_dash(s.get("step_ms"), ".0f"),
                     or_dash(s.get("tokens_per_s"), ".1f"), or_dash(sp[name]["predicted"], ".2f", "×"),
                     or_dash(sp[name]["measured"], ".2f", "×")])
        attrs.append({"method": name, "tau": or_dash(s["tau"]), "forwards": s.get("target_forwards", 0)})
    out = table(["method", "config", "target forwards", "tokens", "mean τ", "D", "draft ms", "verify ms",
                 "step ms", "tokens/s", "predicted speedup", "measured speedup"], rows, attrs, name="summary")
    said = (" Predicted speedup: the cost model of this machine at each run's τ; the table below puts its step "
            "beside the measured one." if modelled else
            " Predicted speedup: measure this machine's costs (the measurement box) to see it.")
    return out + note(_agreement(runs) + " Times are medians over steps; the prefill is excluded." + said)


def stops_html(runs: dict) -> str:
    """One row per speculative run: its speculative steps by why the walk stopped (the traces'
    ``stop``, ``engine/stops.py``), counts that add up to its steps, beside vLLM's mean acceptance
    length and draft acceptance rate (``workbench/metrics.py``); "" when no run speculated."""
    counts = {name: traces_stop_causes(run["traces"]) for name, run in runs.items()}
    counts = {name: c for name, c in counts.items() if c}
    if not counts:
        return ""
    causes = list(dict.fromkeys(cause for c in counts.values() for cause in c))
    rows, attrs = [], []
    for name, c in counts.items():
        m = traces_serving(runs[name]["traces"])
        rows.append([f"<b>{html.escape(name)}</b>", str(sum(c.values())), *(str(c.get(k, 0)) for k in causes),
                     or_dash(m.mean_acceptance_length if m else None), or_dash(m.draft_acceptance_rate if m else None)])
        attrs.append({"method": name, "steps": sum(c.values())})
    out = table(["method", "speculative steps", *map(html.escape, causes), "mean acceptance length (vLLM)",
                 "draft acceptance rate (vLLM)"], rows, attrs, name="stops")
    return out + note("Why each speculative step stopped, one cause per step (docs/design.md, \"Why a step stopped\"). "
                      "vLLM's draft acceptance rate counts every verified node as drafted, siblings too: a tree reads "
                      "low on it though its τ is high.")


def _agreement(runs: dict) -> str:
    """Do the methods emit the same tokens? Where do they first differ?"""
    outputs = {name: [tok for t in run["traces"] for tok in t["emitted"]] for name, run in runs.items()}
    ref_name, ref = next(iter(outputs.items()))
    for name, toks in outputs.items():
        first = next((i for i, (a, b) in enumerate(zip(ref, toks)) if a != b), None)
        if first is not None:
            return (f"{name} differs from {ref_name} from token {first} on (expected when sampling; at "
                    "temperature 0, a near-tie rounded differently by a bigger forward in bf16).")
    return "All methods emitted the same tokens."


DODGE = 0.03  # of the τ axis's span: how far apart two settings of the same τ are drawn


def dodge_x(xs: list[float], gap: float) -> list[float]:
    """``xs`` moved apart where they are closer than ``gap``: each run of values within ``gap`` of
    the next is spread ``gap`` apart, centred on its mean; the others stay where they are."""
    if not xs:
        return []
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out, run = list(xs), [order[0]]
    for i in order[1:] + [None]:
        if i is not None and xs[i] - xs[run[-1]] < gap:
            run.append(i)
            continue
        centre = sum(xs[j] for j in run) / len(run)
        for k, j in enumerate(run):
            out[j] = centre + (k - (len(run) - 1) / 2) * gap
        run = [i] if i is not None else []
    return out


def speedup_scatter(points: list[dict], title: str, width: int = 900, height: int = 460) -> go.Figure:
    """τ (x) against measured speedup over plain decoding (y), one point per setting, each named
    in the picture (``labels.name_points``: no two names overlap). ``points``: dicts with
    ``method`` (a ``METHOD`` key: the colour), ``label`` (the name drawn), ``tau``, ``speedup``
    and its range over the runs, ``low`` <= speedup <= ``high``. The dotted line is plain
    decoding (1x); ``title`` wraps to the width. Settings of (nearly) the same τ would print their
    markers and error bars on top of each other: they are drawn side by side, ``dodge_x`` apart
    (the hover gives each one's τ)."""
    fig = go.Figure()
    taus, lows, highs = [p["tau"] for p in points], [p["low"] for p in points], [p["high"] for p in points]
    span_x, span_y = max(max(taus) - min(taus), 0.2), max(max(highs + [1.0]) - min(lows + [1.0]), 0.1)
    drawn = dodge_x(taus, DODGE * span_x)
    for method in dict.fromkeys(p["method"] for p in points):
        group = [i for i, p in enumerate(points) if p["method"] == method]
        fig.add_scatter(x=[drawn[i] for i in group], y=[points[i]["speedup"] for i in group], mode="markers",
                        name=method, meta=method, marker=dict(size=9, color=METHOD.get(method, OKABE_ITO["black"])),
                        error_y=dict(type="data", array=[points[i]["high"] - points[i]["speedup"] for i in group],
                                     arrayminus=[points[i]["speedup"] - points[i]["low"] for i in group], width=4),
                        customdata=[[points[i]["label"], points[i]["tau"]] for i in group],
                        hovertemplate="%{customdata[0]}: τ %{customdata[1]:.2f}, speedup %{y:.2f}×<extra></extra>")
    x_range = (min(taus) - 0.08 * span_x, max(taus) + 0.3 * span_x)  # room for names right of the points
    y_range = (min(lows + [1.0]) - 0.08 * span_y, max(highs + [1.0]) + 0.12 * span_y)
    fig.add_scatter(x=list(x_range), y=[1, 1], mode="lines", name="plain decoding (1×)", meta="vanilla",
                    line=dict(color=OKABE_ITO["black"], dash="dot", width=1), hoverinfo="skip")
    fig.update_layout(**base_layout(title, height, width=width))
    fig.update_layout(width=width, margin=dict(l=70, r=20, b=50, autoexpand=False))
    m = fig.layout.margin
    name_points(fig, [(x, p["speedup"], p["label"]) for x, p in zip(drawn, points)],
                Axes(x_range, y_range, width - m.l - m.r, height - m.t - m.b))
    fig.update_xaxes(title="τ (tokens per verify step)", range=list(x_range), automargin=False)
    fig.update_yaxes(title="speedup over plain decoding (×)", range=list(y_range), automargin=False)
    return fig
