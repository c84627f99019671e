"""The linear order measured for this CPU against ``F.linear``, in one benchmark run.

    python -m experiments.beside_plain [python -m workbench bench's options]

runs the benchmark suite (``workbench/bench/suite.py``) with every engine method twice on each
question, in turn: as the measured order runs its products (``workbench.cpu_choices``) and with
every product by ``F.linear`` (its twin ``NAME [F.linear]``); the verify cost curve is measured
both ways in one interleaved pass (``cost.measure_verify_cost_beside``). The suite runs unchanged
but for three of its pieces, swapped for the run (``beside``): the methods it parses gain their
twins, its runner runs a twin inside ``plain_products``, its cost curves gain the F.linear curve.
Then, from the run's records, into its ``results.json`` (``"beside_plain"``) and ``report.md``:

- per method, tokens/s each way and their ratio over all questions, the ratio question by question
  (median and range) and whether the outputs are the same tokens;
- per verify size, each way's median ms, its multiple of its own decode step, and F.linear over
  the measured order with a range from the extreme repeats (the slowest of one over the fastest
  of the other, and the other way round).

A difference is called only where it holds everywhere it was measured: on every question (the
range of per-question ratios clear of 1), or across every repeat of the cost curve; otherwise it
is level within noise. It produced docs/bench/head-cpu-fp32-beside-plain.md (docs/benchmarks.md,
"Both orders in one run").
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from unittest import mock

from workbench.bench import report, suite, tune
from workbench.errors import ArgumentParser, UserError, reports_user_errors
from workbench.measure import metrics
from workbench.measure.cost import measure_verify_cost_beside
from workbench.measure.methods import Method, parse_methods
from workbench.models.linear import plain_products

PLAIN_TWIN = " [F.linear]"  # the name of a method's twin: NAME + PLAIN_TWIN


@dataclass(frozen=True)
class Twin(Method):
    """A method's twin: the same method with every product of the target and the draft by F.linear."""

    def describe(self) -> str:
        return super().describe() + ", every product by F.linear"


def with_plain_twins(methods: list[Method]) -> list[Method]:
    """Each engine method followed by its twin that runs every product by ``F.linear``."""
    out = []
    for m in methods:
        out.append(m)
        if not m.hf:
            out.append(Twin(name=m.name + PLAIN_TWIN, spec=m.spec, prompt_lookup=m.prompt_lookup))
    return out


class TwinRunner(suite.Runner):
    """The suite's runner; a twin decodes with every product by F.linear."""

    def decode(self, method: Method, ids: list[int], sampling, max_new_tokens: int, profile=None):
        with plain_products(self.wb.target, self.wb.draft) if isinstance(method, Twin) else contextlib.nullcontext():
            return super().decode(method, ids, sampling, max_new_tokens, profile=profile)


MEASURE_COSTS = tune.measure_costs  # the suite's own, which costs_beside wraps


def costs_beside(wb, **kwargs) -> dict:
    """``tune.measure_costs`` with its verify curve measured both ways in one interleaved pass,
    the F.linear curve as ``"plain": {"verify", "decode_ms"}``."""
    if wb.linear_order.plain_everywhere:
        raise UserError(f"every product already runs F.linear here ({wb.linear_order.describe()}); "
                        "there is no other order to set beside it")
    curves = {}

    def both_ways(target, sizes, prefix_len, repeats, warmup):
        verify, curves["plain"] = measure_verify_cost_beside(target, lambda: plain_products(target), sizes,
                                                             prefix_len=prefix_len, repeats=repeats, warmup=warmup)
        return verify

    with mock.patch.object(tune, "measure_verify_cost", both_ways):
        costs = MEASURE_COSTS(wb, **kwargs)
    costs["plain"] = {"verify": curves["plain"], "decode_ms": curves["plain"][0]["ms"]}
    return costs


@contextlib.contextmanager
def beside():
    """The suite's methods, runner and cost curves with the twins, for the length of a run."""
    def methods(text: str, best=None) -> list[Method]:
        return with_plain_twins(parse_methods(text, best))

    with mock.patch.object(suite, "parse_methods", methods), mock.patch.object(suite, "Runner", TwinRunner), \
            mock.patch.object(tune, "measure_costs", costs_beside):
        yield


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
    """Both tables, or None when the run had no twins."""
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
        return "(not measured: the run had no twins)"
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


def section(result: dict) -> list[str]:
    """The report's section: the measured linear order against F.linear."""
    order = result["meta"]["machine"].get("linear_order", "the measured order")
    return ["## The measured linear order beside F.linear", "",
            f"Every engine method ran twice on each question, one right after the other: with {order}, and with "
            "every product by `F.linear` (`NAME [F.linear]`). The verify cost curve was measured both ways in one "
            "pass, every (order, size) pair taking its turn each round. A difference is read only where it holds on "
            "every question (tokens/s) or across every repeat (cost); otherwise it is level within noise.", "",
            markdown(result["beside_plain"]), ""]


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = ArgumentParser(prog="python -m experiments.beside_plain", description=__doc__.splitlines()[0])
    suite.add_arguments(p)
    args = p.parse_args(argv)
    if args.linear_order == "plain":
        raise UserError("every method runs with F.linear beside the measured linear order; with --linear-order "
                        "plain both would be F.linear (leave --linear-order at auto)")
    with beside():
        rc = suite.cmd_bench(args)
    if rc != 0:
        return rc
    out = Path(args.out)
    result = json.loads((out / "results.json").read_text(encoding="utf-8"))
    result["meta"]["command"] = "python -m experiments.beside_plain " + shlex.join(argv)
    result["beside_plain"] = compare(result["records"], result["costs"])
    report.write_all(out, result)
    with (out / "report.md").open("a", encoding="utf-8") as f:
        f.write("\n" + "\n".join(section(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
