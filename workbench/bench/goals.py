"""The issue's goals, checked against a benchmark summary: each with its value, the target,
whether it is met, and the numbers that explain a miss (tau, and what a step costs here).

- tau >= 4.0 for the EAGLE-2 paper tree 60/6/10 at temperature 0 on MT-bench first turns
- tau(tree) >= 1.3 x tau(chain) for every eagle2 tree run beside ``linear`` at its num_steps
- ``eagle2:best`` >= 2.0x transformers greedy ``generate`` tokens/s, and >= 1.6x our vanilla with
  outputs equal to vanilla (stated for bf16 on the 2-core CPU)
"""

from __future__ import annotations

from workbench.bench import tune

PAPER_TREE, SPEED_TREE = "eagle2:60/6/10", "eagle2:best"


def goals(summary: dict, methods: list, costs: dict, dtype: str) -> list[dict]:
    """The issue's goals, each with its value, whether it is met, and the numbers behind it."""
    out = []
    paper = summary.get(PAPER_TREE, {})
    out.append(_goal("tau >= 4.0 at 60/6/10, temperature 0, MT-bench first turns", paper.get("tau_mtbench_turn1"),
                     4.0, f"{PAPER_TREE} not run or no MT-bench question" if not paper else ""))
    for m in methods:
        chain = f"linear:{m.spec.num_steps}" if m.speculative else None
        if m.name.startswith("eagle2:") and chain in summary and summary[chain].get("tau"):
            ratio = summary[m.name]["tau"] / summary[chain]["tau"]
            out.append(_goal(f"tau({m.name}) >= 1.3 x tau({chain})", round(ratio, 3), 1.3,
                             f"tau {summary[m.name]['tau']} vs {summary[chain]['tau']}"))
    best = summary.get(SPEED_TREE)
    spec = next((m.spec for m in methods if m.name == SPEED_TREE), None)
    note = _cost_note(best, spec, costs) if best else f"{SPEED_TREE} not run"
    if dtype != "bf16":
        note = f"measured in {dtype}, the goal is stated for bf16; " + note
    out.append(_goal("eagle2 best >= 2.0x transformers greedy tokens/s", (best or {}).get("speedup_vs_hf_greedy"),
                     2.0, note))
    equal = (best or {}).get("equal_to_vanilla")
    value = (best or {}).get("speedup_vs_vanilla")
    g = _goal("eagle2 best >= 1.6x vanilla, outputs equal to vanilla", value, 1.6,
              note + (f"; outputs equal to vanilla on {equal:.0%} of questions" if equal is not None else ""))
    g["met"] = bool(g["met"] and equal == 1.0)
    out.append(g)
    return out


def _goal(text: str, value, target: float, note: str) -> dict:
    return {"goal": text, "value": value, "target": target, "met": value is not None and value >= target,
            "note": note}


def _cost_note(best: dict, spec, costs: dict) -> str:
    pred = tune.predict(costs, spec)
    verify = tune.verify_ms(costs, spec.num_draft_tokens)
    return (f"tau {best.get('tau')}; one step ~{pred['step_ms']:.0f} ms (verify of {spec.num_draft_tokens} tokens "
            f"~{verify:.0f} ms) against {costs['decode_ms']:.0f} ms per decoded token")
