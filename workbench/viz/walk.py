"""The accept walk: the pointer arrays it follows and the moves it made, in order.

``retrieve_index[i]`` is node i's row in its verify block: i itself, since a tree's nodes are
verified in node order (so traces do not carry it); ``retrieve_next_token[i]`` is its first
child and ``retrieve_next_sibling[i]`` its next sibling (-1: none); how the walk follows them:
``engine/accept.py``. ``walk_moves`` lists the engine's moves plus a final "stop" move with the
reason the engine recorded, for a viewer to step through or animate; nothing here decides anything.
"""

from __future__ import annotations

from workbench.viz.html import table
from workbench.viz.logits import VERDICT
from workbench.viz.style import NODE
from workbench.viz.tokens import num, show_html
from workbench.viz.tree import node_status

STOP_REASONS = {"leaf": "a leaf: no child to try", "no_match": "no child matched"}


def pointer_rows(trace: dict) -> list[dict]:
    """One row per verified node: token text, parent, depth, the three retrieve_* entries, status."""
    tree, status = trace["tree"], node_status(trace)
    return [{"node": n["node"], "text": n["text"], "parent": n["parent"], "depth": n["depth"],
             "retrieve_index": i, "retrieve_next_token": tree["retrieve_next_token"][i],
             "retrieve_next_sibling": tree["retrieve_next_sibling"][i], "status": status[i]}
            for i, n in enumerate(tree["nodes"])]


def walk_moves(trace: dict) -> list[dict]:
    """The walk's moves in order: ``pointer`` (the array read), ``node`` (where the walk stands),
    ``child`` (the node tried), ``match``, sampling fields when present; then one ``stop`` move
    with the bonus and why the walk stopped."""
    nodes, accept = trace["tree"]["nodes"], trace["accept"]
    out = []
    for m in accept["moves"]:
        via = "retrieve_next_token" if m["via"] == "next_token" else "retrieve_next_sibling"
        out.append(dict(m, kind="try", pointer=via, text=nodes[m["child"]]["text"], at_text=nodes[m["node"]]["text"]))
    last = accept["path"][-1]
    reason = STOP_REASONS[accept["stop"]]
    if accept["stop"] == "leaf" and accept.get("rule") in ("leviathan", "block"):
        reason = "the end of the chain"
    elif accept.get("rule") == "block":  # every draft was looked at: the coins kept no longer prefix
        reason = "block verification kept no longer prefix"
    if "stop" in trace:  # why, as the engine recorded it (engine/stops.py)
        reason += f"; cause: {trace['stop']['cause']}"
    out.append({"kind": "stop", "node": last, "at_text": nodes[last]["text"], "reason": reason,
                "bonus": trace["accept"]["bonus"], "bonus_from": trace["accept"]["bonus_from"]})
    return out


def walk_position(trace: dict, k: int) -> tuple[int, int | None]:
    """(node the walk stands on, child being tried) after ``k`` moves; child None at the stop."""
    moves, node = walk_moves(trace), 0
    for m in moves[:k]:
        if m["kind"] == "try" and m["match"]:
            node = m["child"]
    nxt = moves[k] if k < len(moves) else None
    return node, (nxt["child"] if nxt and nxt["kind"] == "try" else None)


def describe(move: dict, trace: dict) -> str:
    """One move as a sentence (HTML)."""
    at = f"at node {move['node']} <code>{show_html(move['at_text'])}</code>"
    if move["kind"] == "stop":
        b = move["bonus"]
        origin = {"target": "the target's token", "residual": "drawn from the residual"}.get(move["bonus_from"],
                                                                                           move["bonus_from"])
        return (f"{at}: stop ({move['reason']}). <b>Bonus</b> <code>{show_html(b['text'])}</code>: {origin} "
                f"after node {b['after_node']}.")
    try_ = (f"{at}: {move['pointer']}[{move['read']}] = {move['child']} → try "
            f"<code>{show_html(move['text'])}</code>")
    verdict = "<b>match</b>, accept and descend" if move["match"] else "<b>miss</b>"
    if "coin" in move:
        test = f"min(1, p/q) with q {num(move['draft_prob'])}" if "draft_prob" in move else "p (renormalised)"
        return f"{try_}: target p {num(move['target_prob'])}, coin {move['coin']:.3f} vs {test} → {verdict}"
    top = trace["verify"]["top"][move["node"]][0]
    return f"{try_}: the target's argmax after it is <code>{show_html(top['text'])}</code> → {verdict}"


def moves_html(trace: dict, upto: int | None = None) -> str:
    """Ordered list of moves; with ``upto`` = k, moves after the k-th are hidden and the k-th is
    highlighted (stepping / animation)."""
    moves = walk_moves(trace)
    upto = len(moves) if upto is None else max(0, min(upto, len(moves)))
    items = []
    for i, m in enumerate(moves[:upto]):
        look = NODE["bonus"] if m["kind"] == "stop" else VERDICT["match" if m["match"] else "miss"]
        current = "background:#FFF6D6;" if i == upto - 1 else ""
        items.append(f"<li data-move='{i}' data-kind='{m['kind']}' data-match='{int(m.get('match', False))}' "
                     f"style='{current}padding:2px 4px'><span style='color:{look.colour};font-weight:700'>"
                     f"{look.glyph}</span> {describe(m, trace)}</li>")
    left = len(moves) - upto
    rest = f"<p style='color:#777;font-size:12px'>{left} more move(s) to go.</p>" if left else ""
    return f"<ol class='wb-moves' style='font-size:13px;margin:0;padding-left:22px'>{''.join(items)}</ol>{rest}"


def pointer_table_html(trace: dict, upto: int | None = None) -> str:
    """The pointer arrays as a table; with ``upto``, the walk's node and the child being tried
    are highlighted."""
    rows = pointer_rows(trace)
    here, trying = walk_position(trace, len(walk_moves(trace)) if upto is None else upto)
    cells, attrs, styles = [], [], []
    for r in rows:
        look = NODE[r["status"]]
        cells.append([str(r["node"]), f"<code>{show_html(r['text'])}</code>", str(r["parent"]), str(r["depth"]),
                      str(r["retrieve_index"]), str(r["retrieve_next_token"]), str(r["retrieve_next_sibling"]),
                      f"<span style='color:{look.colour};font-weight:700'>{look.glyph}</span> {look.label}"])
        attrs.append({"node": r["node"], "status": r["status"]})
        styles.append("background:#FFF6D6" if r["node"] == trying else
                      "background:#E8F5EF" if r["node"] == here else "")
    return table(["node", "token", "parent", "depth", "retrieve_index", "retrieve_next_token",
                  "retrieve_next_sibling", "status"], cells, attrs, styles, name="pointers")
