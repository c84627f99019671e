"""Shifted by one: what the target predicts **after** each verified node, and which children of
that node the walk compared with it.

Verify row i is the target's distribution of the token that follows node i, so it judges the
*children* of i, never i itself (docs/design.md §3). A row is only consulted when node i is on the
accepted path (the walk never stands on other nodes); the target still computed it, the tree
attention made that free.
"""

from __future__ import annotations

from workbench.engine import accept
from workbench.viz.html import bar, note, table
from workbench.viz.style import NODE, OKABE_ITO
from workbench.viz.tokens import num, show_html

VERDICT = {"match": NODE["accepted"], "miss": NODE["missed"], "not compared": NODE["unreached"]}


def children(trace: dict, node: int) -> list[int]:
    """Children of ``node`` in walk order: ``retrieve_next_token`` then ``retrieve_next_sibling``."""
    return accept.children(node, trace["tree"]["retrieve_next_token"], trace["tree"]["retrieve_next_sibling"])


def logits_rows(trace: dict) -> list[dict]:
    """Per verified node: ``after`` (its token text), ``top`` (the target's top next tokens),
    ``consulted`` (on the accepted path), ``children``: node, text and verdict ("match", "miss"
    or "not compared")."""
    if trace["kind"] != "spec":
        after = "the prompt" if trace["kind"] == "prefill" else "the last token"
        return [{"node": 0, "after": after, "top": trace["verify"]["top"][0], "consulted": True, "children": []}]
    nodes, path = trace["tree"]["nodes"], set(trace["accept"]["path"])
    verdict = {m["child"]: ("match" if m["match"] else "miss") for m in trace["accept"]["moves"]}
    rows = []
    for n in nodes:
        i = n["node"]
        kids = [{"node": c, "text": nodes[c]["text"], "token": nodes[c]["token"],
                 "verdict": verdict.get(c, "not compared")} for c in children(trace, i)]
        rows.append({"node": i, "after": n["text"], "top": trace["verify"]["top"][i], "consulted": i in path,
                     "children": kids})
    return rows


def _top_cell(top: list[dict], child_tokens: dict[int, str]) -> str:
    """Top tokens with bars; a token that is also a child of this node is marked with the
    child's verdict glyph."""
    parts = []
    for t in top:
        mark = ""
        if t["token"] in child_tokens:
            look = VERDICT[child_tokens[t["token"]]]
            mark = f" <span style='color:{look.colour}'>{look.glyph} child</span>"
        parts.append(f"<span style='display:inline-block;margin-right:14px;white-space:nowrap'>"
                     f"<code>{show_html(t['text'])}</code> {bar(t['prob'], OKABE_ITO['blue'], 40)} "
                     f"{num(t['prob'])}{mark}</span>")
    return "".join(parts)


def _children_cell(kids: list[dict]) -> str:
    if not kids:
        return "<span style='color:#777'>leaf: no child to compare</span>"
    return "".join(f"<div><span style='color:{VERDICT[k['verdict']].colour};font-weight:700'>"
                   f"{VERDICT[k['verdict']].glyph}</span> node {k['node']} <code>{show_html(k['text'])}</code>: "
                   f"{k['verdict']}</div>" for k in kids)


def logits_html(trace: dict) -> str:
    """The table: one row per node, "after <token>", the target's top tokens, the children."""
    rows = logits_rows(trace)
    cells, attrs, styles = [], [], []
    for r in rows:
        kids = {k["token"]: k["verdict"] for k in r["children"]}
        consulted = "on the path: consulted" if r["consulted"] else "off the path: not consulted"
        cells.append([f"{r['node']}", f"after <code>{show_html(r['after'])}</code><br>"
                      f"<span style='color:#777;font-size:11px'>{consulted}</span>",
                      _top_cell(r["top"], kids), _children_cell(r["children"])])
        attrs.append({"node": r["node"], "consulted": int(r["consulted"]), "children": len(r["children"])})
        styles.append("" if r["consulted"] else "opacity:0.6")
    out = table(["node", "the target's row i = the token after", "target's top next tokens",
                 "children of i (compared by the walk)"], cells, attrs, styles, name="logits")
    if trace["kind"] != "spec":
        out += note(f"The target's choice: <code>{show_html(_choice_text(trace))}</code>.")
    return out


def _choice_text(trace: dict) -> str:
    """Text of the token a prefill / vanilla step emitted, when it is among the top tokens."""
    tok = trace["emitted"][0] if trace["emitted"] else None
    return next((t["text"] for t in trace["verify"]["top"][0] if t["token"] == tok), f"token {tok}")
