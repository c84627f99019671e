"""Sampling verification of one step: per tried child the target probability, the coin, the
verdict, and the distribution the bonus was drawn from (docs/design.md §7).

The rules (target-only for trees; Leviathan and block for a chain drawn from q) are
``engine/accept.py``'s. For a chain drawn from q, a table gives each rule's expected accepted
drafts on this step's p and q (``analysis/chain_rules.py``). Greedy needs none of this: match =
argmax.
"""

from __future__ import annotations

import plotly.graph_objects as go

from workbench.analysis.chain_rules import trace_rule_table
from workbench.analysis.expectation import trace_expectation
from workbench.viz.html import bar, note, table
from workbench.viz.layout import legend_rows
from workbench.viz.logits import VERDICT
from workbench.viz.style import LEGEND_ROW, OKABE_ITO, base_layout
from workbench.viz.tokens import num, show_html


def coin_rows(trace: dict) -> list[dict]:
    """Per tried child: node, child, token text, target p, draft q (a chain drawn from q), coin,
    threshold (block: the prefix's h_i), verdict (block: inside the kept prefix). Empty for greedy
    steps."""
    if trace["kind"] != "spec" or trace["accept"]["rule"] == "greedy":
        return []
    nodes, rows = trace["tree"]["nodes"], []
    for m in trace["accept"]["moves"]:
        q = m.get("draft_prob")
        exact = m["target_prob"] if q is None else (min(1.0, m["target_prob"] / q) if q > 0 else 0.0)
        threshold = m.get("accept_prob", exact)  # a lossy step records the relaxed probability it used
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
    leviathan = accept["rule"] in ("leviathan", "block")  # a chain drawn from q: show q
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
    return out + _bonus_html(accept) + _expected_html(trace) + _rules_html(trace)


def _rules_html(trace: dict) -> str:
    """Each chain rule's expected accepted drafts on this step's p and q (a chain drawn from q only)."""
    rows = trace_rule_table(trace)
    if rows is None:
        return ""
    cells = [[r.rule + (" (ran)" if r.ran else ""), num(r.expected_accepted), num(r.expected_accepted + 1)]
             for r in rows]
    return note("Before the coins, on this step's drafts, p and q: the expected accepted drafts under each rule "
                "(target-only as if these tokens were its top-1 drafts). Block is never below token-level "
                "(leviathan) on average over the drafts; for one drawn chain it can be.") + \
        table(["rule", "E[accepted drafts]", "E[tokens emitted]"], cells, name="rules")


def _expected_html(trace: dict) -> str:
    """What the tree was worth before the coins fell (target-only rule only)."""
    e = trace_expectation(trace)
    if e is None:
        return ""
    reach = ", ".join(f"depth {d} {num(r)}" for d, r in enumerate(e.reach, start=1))
    walk, emitted = len(trace["accept"]["path"]), trace["accept_length"]  # the worth is the walk's, never cut
    cut = f"; the output ended inside them, so the step emitted {emitted} (its τ)" if emitted < walk else ""
    return note(f"Before the coins: each child is accepted with exactly its target probability p (the mass of "
                f"the siblings rejected before it is taken out), so this tree was worth "
                f"<b>{e.accept_length:.2f}</b> tokens on average: 1 (the bonus) + the sum over its nodes of "
                f"the target's probability of the path to each. This step's coins gave the walk "
                f"{walk} ({walk - 1} accepted + the bonus){cut}. P(the walk gets a node at): {reach}.")


def _bonus_html(accept: dict) -> str:
    bonus = accept["bonus"]
    if accept["bonus_from"] != "residual":
        origin = "the target distribution p at the last accepted node"
    elif accept["rule"] == "leviathan":
        origin = "the residual norm(max(0, p − q)) at the rejected draft"
    elif accept["rule"] == "block":
        origin = "the block residual norm(max(0, w·p − q)) after the kept prefix (w: its weight)"
    else:
        origin = "the residual: the target distribution with every rejected child removed, renormalised"
    top = "".join(f"<div><code>{show_html(t['text'])}</code> {bar(t['prob'], OKABE_ITO['orange'])} "
                  f"{num(t['prob'])}</div>" for t in accept.get("residual_top", []))
    return note(f"Bonus <code>{show_html(bonus['text'])}</code> after node {bonus['after_node']}, drawn from "
                f"{origin}.") + (f"<div style='font-size:13px'>{top}</div>" if top else "")


def acceptance_stack_figure(tokens: list[str], p: list[float], q: list[float], title: str, width: int = 900,
                            height: int = 420, beta: float | None = None) -> go.Figure:
    """Per token, the target's p drawn as the stack it is made of under Algorithm 1:
    min(p, q), emitted through acceptance, under max(0, p − q) = (1 − β)·r, emitted through a
    rejection (r, the residual, renormalised, would overstate it by 1 / (1 − β)); the draft's q
    beside it. The stack's top is p exactly (the legend says so). ``tokens`` name the bars.

    ``beta``: the acceptance probability β = Σ min(p, q) over the **whole** vocabulary, as the
    text beside the figure quotes it; the bars show only some tokens, so their own Σ min(p, q)
    is smaller, and the axis gives both rather than calling the part β. Without ``beta`` the
    axis gives the shown tokens' sum only."""
    if not len(tokens) == len(p) == len(q):
        raise ValueError(f"tokens, p and q must have one value per token, got {len(tokens)}, {len(p)}, {len(q)}")
    accepted = [min(a, b) for a, b in zip(p, q)]
    rejected = [max(0.0, a - b) for a, b in zip(p, q)]
    shown = sum(accepted)
    fig = go.Figure([
        go.Bar(x=tokens, y=accepted, name="min(p, q): emitted through acceptance", offsetgroup="p",
               marker_color=OKABE_ITO["bluish_green"], meta="accepted"),
        go.Bar(x=tokens, y=rejected, base=accepted, name="+ max(0, p − q) = (1 − β)·r: through a rejection "
                                                         "(the stack's top is the target's p)",
               offsetgroup="p", marker_color=OKABE_ITO["vermillion"], meta="rejected"),
        go.Bar(x=tokens, y=q, name="draft q", offsetgroup="q", marker_color=OKABE_ITO["sky_blue"], meta="q"),
    ])
    fig.update_layout(**base_layout(title, height, width=width))
    rows = legend_rows([t.name for t in fig.data], width - 20)  # base_layout left room for one
    fig.update_layout(width=width, barmode="group", legend=dict(x=0, xanchor="left"),
                      margin=dict(t=fig.layout.margin.t + (rows - 1) * LEGEND_ROW))
    part = f"Σ min(p, q) over these {len(tokens)} tokens = {shown:.2f}"
    fig.update_xaxes(title=f"next token ({part} of β = {beta:.2f} over the whole vocabulary)" if beta is not None
                     else f"next token ({part})")
    fig.update_yaxes(title="probability", rangemode="tozero")
    return fig
