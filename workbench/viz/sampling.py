"""Sampling verification of one step: per tried child the target probability, the coin, the
verdict, and the distribution the bonus was drawn from (docs/design.md §7).

Target-only rule (trees): accept child c with probability p(c) / (mass left); on a miss p(c) is
set to 0 and the rest renormalised; if every child misses, the bonus is drawn from that residual.
Leviathan rule (a sampled chain): accept x with min(1, p(x)/q(x)); on the first miss the bonus is
drawn from norm(max(0, p - q)). Greedy (temperature 0) needs none of this: match = argmax.
"""

from __future__ import annotations

from workbench.viz.html import bar, note, table
from workbench.viz.logits import VERDICT
from workbench.viz.style import OKABE_ITO
from workbench.viz.tokens import num, show_html


def coin_rows(trace: dict) -> list[dict]:
    """Per tried child: node, child, token text, target p, draft q (leviathan), coin, threshold,
    verdict. Empty for greedy steps."""
    if trace["kind"] != "spec" or trace["accept"]["rule"] == "greedy":
        return []
    nodes, rows = trace["tree"]["nodes"], []
    for m in trace["accept"]["moves"]:
        q = m.get("draft_prob")
        threshold = m["target_prob"] if q is None else (min(1.0, m["target_prob"] / q) if q > 0 else 0.0)
        rows.append({"node": m["node"], "child": m["child"], "text": nodes[m["child"]]["text"],
                     "target_prob": m["target_prob"], "draft_prob": q, "coin": m["coin"], "threshold": threshold,
                     "verdict": "match" if m["match"] else "miss"})
    return rows


def sampling_html(trace: dict) -> str:
    """The coin table and the residual (or the plain target distribution) the bonus came from."""
    if trace["kind"] != "spec":
        return note("Prefill and vanilla steps sample the target directly: no coins.")
    accept = trace["accept"]
    if accept["rule"] == "greedy":
        return note("Temperature 0 (greedy): a child is accepted when it is the target's argmax; "
                    "no coin, no residual. Set a temperature above 0 to see sampling verification.")
    leviathan = accept["rule"] == "leviathan"
    rows, cells = coin_rows(trace), []
    for r in rows:
        look = VERDICT[r["verdict"]]
        q = [num(r["draft_prob"])] if leviathan else []
        cells.append([f"{r['node']} → {r['child']}", f"<code>{show_html(r['text'])}</code>",
                      num(r["target_prob"]), *q, f"{r['coin']:.3f}", num(r["threshold"]),
                      f"<span style='color:{look.colour};font-weight:700'>{look.glyph}</span> {r['verdict']}"])
    head = ["node → child", "token", "target p" + ("" if leviathan else " (renormalised)")]
    head += (["draft q"] if leviathan else []) + ["coin u", "accept if u <", "verdict"]
    attrs = [{"node": r["node"], "child": r["child"], "verdict": r["verdict"]} for r in rows]
    out = table(head, cells, attrs, name="coins")
    return out + _bonus_html(accept) + _expected_html(trace)


def _expected_html(trace: dict) -> str:
    """What the tree was worth before the coins fell (target-only rule only)."""
    accept = trace["accept"]
    if "expected" not in accept:
        return ""
    reach = ", ".join(f"depth {d} {num(r)}" for d, r in enumerate(accept["reach"], start=1))
    return note(f"Before the coins: each child is accepted with exactly its target probability p (the mass of "
                f"the siblings rejected before it is taken out), so this tree was worth "
                f"<b>{accept['expected']:.2f}</b> tokens on average: 1 (the bonus) + the sum over its nodes of "
                f"the target's probability of the path to each. This step's coins gave τ = "
                f"{trace['accept_length']}. P(the walk gets a node at): {reach}.")


def _bonus_html(accept: dict) -> str:
    bonus = accept["bonus"]
    if accept["bonus_from"] != "residual":
        origin = "the target distribution p at the last accepted node"
    elif accept["rule"] == "leviathan":
        origin = "the residual norm(max(0, p − q)) at the rejected draft"
    else:
        origin = "the residual: the target distribution with every rejected child removed, renormalised"
    top = "".join(f"<div><code>{show_html(t['text'])}</code> {bar(t['prob'], OKABE_ITO['orange'])} "
                  f"{num(t['prob'])}</div>" for t in accept.get("residual_top", []))
    return note(f"Bonus <code>{show_html(bonus['text'])}</code> after node {bonus['after_node']}, drawn from "
                f"{origin}.") + (f"<div style='font-size:13px'>{top}</div>" if top else "")
