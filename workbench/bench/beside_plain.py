"""The linear order measured for this CPU against ``F.linear``, from one ``--beside-plain`` run.

``python -m workbench bench --beside-plain`` runs every engine method twice on each question, in
turn: as the measured order runs its products (``workbench.cpu_choices``) and with every product
by ``F.linear`` (its twin ``NAME [F.linear]``, ``methods.py``); the verify cost curve is measured
both ways in one interleaved pass (``cost.measure_verify_cost_beside``). Here, from those records:

- per method, tokens/s each way and their ratio over all questions, the ratio question by question
  (median and range) and whether the outputs are the same tokens;
- per verify size, each way's median ms, its multiple of its own decode step, and F.linear over
  the measured order with a range from the extreme repeats (the slowest of one over the fastest
  of the other, and the other way round).

A difference is called only where it holds everywhere it was measured: on every question (the
range of per-question ratios clear of 1), or across every repeat of the cost curve; otherwise it
is level within noise. Plain Python over the suite's records (``metrics.py``).
"""

from __future__ import annotations

from statistics import median

from workbench.measure import metrics
from workbench.measure.methods import PLAIN_TWIN

FASTER, SLOWER, LEVEL = "measured order faster", "F.linear faster", "level within noise"


def call(low: float, high: float) -> str:
    """A ratio's range (measured order over F.linear, larger = the measured order faster) read:
    clear of 1 on one side, or level."""
    return FASTER if low > 1 else SLOWER if high < 1 else LEVEL


def methods(records: dict) -> list[dict]:
    """One row per method that has a twin: tokens/s each way, ratio overall and per question."""
    rows = []
    for name, recs in records.items():
        twin = records.get(name + PLAIN_TWIN)
        if name.endswith(PLAIN_TWIN) or twin is None:
            continue
        by_id = {r["question_id"]: r for r in twin}
        paired = [(r, by_id[r["question_id"]]) for r in recs if r["question_id"] in by_id]
        ratios = [metrics.tokens_per_s(a) / metrics.tokens_per_s(b) for a, b in paired]
        rows.append({"method": name, "questions": len(paired),
                     "tokens_per_s": round(metrics.speed([a for a, _ in paired]), 2),
                     "tokens_per_s_plain": round(metrics.speed([b for _, b in paired]), 2),
                     "ratio": round(metrics.speedup([a for a, _ in paired], [b for _, b in paired]), 3),
                     "per_question": {"median": round(median(ratios), 3), "low": round(min(ratios), 3),
                                      "high": round(max(ratios), 3)},
                     "call": call(min(ratios), max(ratios)),
                     "same_output": sum(a["output_ids"] == b["output_ids"] for a, b in paired)})
    if "vanilla" + PLAIN_TWIN in records:  # speculation over plain decoding, each order over its own
        for r in rows:
            r["x_vanilla"] = round(metrics.speedup(records[r["method"]], records["vanilla"]), 3)
            r["x_vanilla_plain"] = round(metrics.speedup(records[r["method"] + PLAIN_TWIN],
                                                         records["vanilla" + PLAIN_TWIN]), 3)
    return rows


def cost(costs: dict) -> list[dict]:
    """One row per verify size of a curve measured both ways (``costs["plain"]``), else []."""
    plain = costs.get("plain")
    if not plain:
        return []
    rows = []
    for a, b in zip(costs["verify"], plain["verify"]):
        low, high = b["lo"] / a["hi"], b["hi"] / a["lo"]  # F.linear's ms over the measured order's
        rows.append({"tokens": a["tokens"], "ms": a["ms"], "ms_plain": b["ms"],
                     "x_decode": round(a["ms"] / costs["decode_ms"], 3),
                     "x_decode_plain": round(b["ms"] / plain["decode_ms"], 3),
                     "ratio": round(b["ms"] / a["ms"], 3), "low": round(low, 3), "high": round(high, 3),
                     "call": call(low, high)})
    return rows


def compare(records: dict, costs: dict) -> dict | None:
    """Both tables, or None when the run had no twins (no ``--beside-plain``)."""
    rows = methods(records)
    return {"methods": rows, "cost": cost(costs)} if rows else None


def summary(comparison: dict) -> str:
    """Sentences computed from the tables: what the measured order did to each method, and to the
    verify of a few tokens."""
    lead = {FASTER: "the measured order is faster on every question for",
            SLOWER: "F.linear is faster on every question for",
            LEVEL: "the two are level within noise (the questions disagree) for"}
    parts = []
    for call_, words in lead.items():
        named = [f"`{r['method']}` ({r['ratio']:.2f}x)" for r in comparison["methods"] if r["call"] == call_]
        if named:
            parts.append(f"{words} {', '.join(named)}")
    text = ("Tokens/s with the measured order over F.linear's, all questions: " + "; ".join(parts) + ".")
    different = [r["method"] for r in comparison["methods"] if r["same_output"] != r["questions"]]
    text += (f" Outputs differ on some question for {', '.join(different)}." if different else
             " Every output is the same tokens both ways.")
    spec = [r for r in comparison["methods"] if r["method"] != "vanilla" and "x_vanilla" in r]
    if spec:
        measured = sorted(r["x_vanilla"] for r in spec)
        least, most = (f(spec, key=lambda r: r["x_vanilla_plain"]) for f in (min, max))
        text += (f" Speculation over plain decoding of the same order: {measured[0]:.2f}x to {measured[-1]:.2f}x with "
                 f"the measured order, {least['x_vanilla_plain']:.2f}x (`{least['method']}`) to "
                 f"{most['x_vanilla_plain']:.2f}x (`{most['method']}`) with F.linear.")
    one = next((r for r in comparison["cost"] if r["tokens"] == 1), None)
    if one:
        text += (f" A decode step's forward took {one['ms']:.1f} ms with the measured order and {one['ms_plain']:.1f} "
                 f"with F.linear ({one['call']} across the repeats).")
    few = [r for r in comparison["cost"] if r["tokens"] in (4, 8)]
    if few:
        text += " In decode steps of its own order, a verify of " + "; ".join(
            f"{r['tokens']} tokens costs {r['x_decode']:.2f} with the measured order and {r['x_decode_plain']:.2f} "
            "with F.linear" for r in few) + "."
    return text


def markdown(comparison: dict | None) -> str:
    if not comparison:
        return "(not measured: run with --beside-plain)"
    out = ["| method | tokens/s, measured order | tokens/s, F.linear | measured / F.linear | per question, "
           "median (range) | reading | × plain decoding, measured order | × plain decoding, F.linear | same output |",
           "|---|---|---|---|---|---|---|---|---|"]
    x = lambda r, key: f"{r[key]:.2f}x" if key in r else "–"  # noqa: E731
    for r in comparison["methods"]:
        q = r["per_question"]
        out.append(f"| `{r['method']}` | {r['tokens_per_s']:.1f} | {r['tokens_per_s_plain']:.1f} | {r['ratio']:.2f}x | "
                   f"{q['median']:.2f} ({q['low']:.2f}–{q['high']:.2f}) | {r['call']} | {x(r, 'x_vanilla')} | "
                   f"{x(r, 'x_vanilla_plain')} | {r['same_output']}/{r['questions']} |")
    if comparison["cost"]:
        out += ["", "| verify tokens | ms, measured order | ms, F.linear | × decode, measured | × decode, F.linear | "
                "F.linear / measured (range) | reading |", "|---|---|---|---|---|---|---|"]
        for r in comparison["cost"]:
            out.append(f"| {r['tokens']} | {r['ms']:.1f} | {r['ms_plain']:.1f} | {r['x_decode']:.2f} | "
                       f"{r['x_decode_plain']:.2f} | {r['ratio']:.2f} ({r['low']:.2f}–{r['high']:.2f}) | "
                       f"{r['call']} |")
    return "\n".join(out + ["", summary(comparison)])
