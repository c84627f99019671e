"""KV cache slots touched by one step, for the target and the draft head.

Both share one slot allocator (two physical buffers, same slot ids; docs/design.md §2). In a spec
step the target writes one slot per verified node; commit keeps the first n + 1 of them for the
root and the accepted drafts, in position order, and rolls the rest back: freed. An accepted node
verified further along has its K/V rows copied to its kept slot first (``moved``: a second child,
or a node under one), so a lone request's cache stays one run of slots. The draft writes its
extend slots (kept: the next steps attend to them) and scratch slots for the tree levels (freed
at once).
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from workbench.viz.html import chip, note, table
from workbench.viz.layout import legend_rows
from workbench.viz.style import FONT, LEGEND_ROW, SLOT, base_layout
from workbench.viz.tokens import show

# How this engine rolls back (engine.py): the same for every speculative step, so traces omit it.
ROLLBACK = ("slot-table edit (page size 1): the first n + 1 written slots kept, in path order, an accepted "
            "node's rows copied there when it sat further along; the rest freed")
BAND_OVER = 16  # more cells than this in one group are drawn as one band
BAND_WIDTH = 3.0


def kv_summary(trace: dict) -> dict:
    """Counts: committed before the step, target written / kept / rolled back / moved, draft
    extend / scratch, and the allocator after the step."""
    t = trace["kv"]["target"]
    d = trace["kv"].get("draft", {})
    return {"committed_before": trace["L"], "written": len(t["written"]), "kept": len(t["kept"]),
            "rolled_back": len(t["freed"]), "moved": len(t.get("moved", [])),
            "draft_extend": len(d.get("extend_written", [])), "draft_scratch": len(d.get("scratch", [])),
            "allocated": trace["kv"]["allocated"], "free": trace["kv"]["free"], "total": trace["kv"]["total"],
            "committed_after": trace["L"] + len(t["kept"])}


def _group(slots: list[int], status: str, labels: list[str] | None = None) -> list[dict]:
    """Cells for ``slots`` (one per slot), or one band when there are many."""
    if not slots:
        return []
    if len(slots) > BAND_OVER:
        return [{"band": True, "status": status, "count": len(slots), "slots": slots}]
    return [{"band": False, "status": status, "slot": s, "label": labels[i] if labels else ""}
            for i, s in enumerate(slots)]


def kv_rows(trace: dict) -> dict[str, list[dict]]:
    """{"target KV": groups, "draft KV": groups} in drawing order; a group is a cell (one slot)
    or a band (many slots, e.g. the committed prefix)."""
    t, d = trace["kv"]["target"], trace["kv"].get("draft", {})
    committed = [{"band": True, "status": "committed", "count": trace["L"], "slots": []}] if trace["L"] else []
    if trace["kind"] != "spec":
        return {"target KV": committed + _group(t["written"], "kept"), "draft KV": []}
    written = [{"band": False, "status": "kept" if i < len(t["kept"]) else "freed", "slot": s, "label": label}
               for i, (s, label) in enumerate(zip(t["written"], slot_labels(trace)))]
    return {"target KV": committed + written,
            "draft KV": _group(d.get("extend_written", []), "extend") + _group(d.get("scratch", []), "scratch")}


def slot_labels(trace: dict) -> list[str]:
    """What each slot a spec step wrote holds after its commit: the node verified there, or, for a
    kept slot an accepted node's rows were copied to, that node (and where it came from)."""
    t, nodes = trace["kv"]["target"], trace["tree"]["nodes"]
    node_at = {s: i for i, s in enumerate(t["written"])}
    came_from = {b: a for a, b in t.get("moved", [])}
    went_to = {a: b for a, b in t.get("moved", [])}
    labels = []
    for s in t["written"]:
        i = node_at[came_from.get(s, s)]
        text = f"node {i} {show(nodes[i]['text'])}"
        if s in came_from:
            text += f" (rows moved here from slot {came_from[s]})"
        elif s in went_to:
            text += f" (its rows moved to slot {went_to[s]})"
        labels.append(text)
    return labels


def _title(trace: dict) -> str:
    s = kv_summary(trace)
    moved = f" ({s['moved']} moved)" if s["moved"] else ""
    return (f"KV slots, step {trace['step']}: target wrote {s['written']}, kept {s['kept']}{moved}, rolled back "
            f"{s['rolled_back']}; draft wrote {s['draft_extend']} + {s['draft_scratch']} scratch")


def kv_figure(trace: dict, height: int = 210) -> go.Figure:
    """Two strips of slots (target above, draft below): a marker per slot, a band for long runs.
    One marker trace per status (``meta`` = the status); the legend under the strips names every
    colour and glyph drawn, bands included."""
    fig = go.Figure()
    points: dict[str, dict] = {k: {"x": [], "y": [], "hover": []} for k in SLOT}
    bands: set[str] = set()
    rows = kv_rows(trace)
    for y, (name, groups) in enumerate(rows.items()):
        x = 0.0
        for g in groups:
            look = SLOT[g["status"]]
            if g["band"]:
                fig.add_shape(type="rect", x0=x - 0.4, x1=x + BAND_WIDTH - 0.6, y0=-y - 0.3, y1=-y + 0.3,
                              fillcolor=look.colour, line=dict(color=look.colour), opacity=0.85)
                fig.add_annotation(x=x + BAND_WIDTH / 2 - 0.5, y=-y, showarrow=False, font=dict(color="white"),
                                   text=f"{g['count']} {'committed' if g['status'] == 'committed' else 'slots'}")
                bands.add(g["status"])
                x += BAND_WIDTH
                continue
            p = points[g["status"]]
            p["x"].append(x), p["y"].append(-y)
            p["hover"].append(f"{name} slot {g['slot']}: {look.label}<br>{g['label']}")
            x += 1
    for status, look in SLOT.items():
        p = points[status]
        if p["x"] or status in bands:  # a band-only status still gets its legend entry (a marker at no point)
            fig.add_trace(go.Scatter(
                x=p["x"] or [None], y=p["y"] or [None], mode="markers+text", text=[look.glyph] * len(p["x"]),
                textposition="top center", name=f"{look.glyph} {look.label}", meta=status,
                marker=dict(symbol=look.symbol, size=18, color=look.colour, line=dict(width=2, color=look.colour)),
                hovertext=p["hover"], hoverinfo="text"))
    title = _title(trace)
    legend = [t.name for t in fig.data]
    fig.update_layout(**base_layout(title, height + LEGEND_ROW * legend_rows(legend, 880), axes=False))
    fig.update_layout(margin=dict(b=10 + LEGEND_ROW * legend_rows(legend, 880)), legend=dict(y=-0.02))
    fig.update_yaxes(tickvals=[0, -1], ticktext=list(rows), range=[-1.5, 0.6], showgrid=False)
    fig.update_xaxes(visible=False)
    return fig


def kv_slots_html(trace: dict) -> str:
    """``kv_rows`` as two HTML strips (what the app shows: cheaper to redraw on every Step than
    ``kv_figure``): one cell per slot (``data-status``, ``data-slot``), a band for long runs;
    hover a cell for the slot and its node."""
    title = _title(trace)
    cell = "display:inline-block;min-width:22px;height:22px;line-height:22px;margin:1px;text-align:center;" \
           "font-size:13px;border-radius:3px"
    lines = []
    for name, groups in kv_rows(trace).items():
        cells = []
        for g in groups:
            look = SLOT[g["status"]]
            paint = (f"background:{look.colour};color:white" if not look.symbol.endswith("open") else
                     f"border:2px solid {look.colour};color:{look.colour};box-sizing:border-box")
            if g["band"]:
                text = f"{g['count']} {'committed' if g['status'] == 'committed' else look.glyph}"
                cells.append(f"<span data-status='{g['status']}' data-band='{g['count']}' "
                             f"title='{html.escape(look.label)}' style='{cell};padding:0 8px;{paint}'>"
                             f"{html.escape(text)}</span>")
                continue
            tip = f"{name} slot {g['slot']}: {look.label}" + (f" · {g['label']}" if g["label"] else "")
            cells.append(f"<span data-status='{g['status']}' data-slot='{g['slot']}' title='{html.escape(tip)}' "
                         f"style='{cell};{paint}'>{look.glyph}</span>")
        lines.append(f"<div data-pool='{name}' style='margin:2px 0'><span style='display:inline-block;width:80px;"
                     f"font-size:12px'>{name}</span>{''.join(cells) or '<i>none</i>'}</div>")
    return (f"<div class='wb-kv' data-step='{trace['step']}' style='font-family:{FONT}'><p style='font-size:14px;"
            f"margin:4px 0'>{html.escape(title)}</p>{''.join(lines)}</div>")


def kv_table_html(trace: dict) -> str:
    """The counts as a table, with how rollback was done."""
    s = kv_summary(trace)
    rows = [["target", "committed before the step (L)", str(s["committed_before"])],
            ["target", f"{SLOT['kept'].glyph} written this step", str(s["written"])],
            ["target", f"{SLOT['kept'].glyph} kept (root + accepted drafts)", str(s["kept"])],
            ["target", f"{SLOT['freed'].glyph} rolled back (freed)", str(s["rolled_back"])],
            ["target", "moved (an accepted node's rows copied to its kept slot)", str(s["moved"])],
            ["draft", f"{SLOT['extend'].glyph} draft extend: written, kept", str(s["draft_extend"])],
            ["draft", f"{SLOT['scratch'].glyph} tree scratch: written, freed", str(s["draft_scratch"])],
            ["allocator", "slots allocated / free / total after the step",
             f"{s['allocated']} / {s['free']} / {s['total']}"]]
    keys = ["committed_before", "written", "kept", "rolled_back", "moved", "draft_extend", "draft_scratch", "allocated"]
    out = table(["pool", "slots", "count"], rows, [{"key": k} for k in keys], name="kv")
    how = ROLLBACK if trace["kind"] == "spec" else "no rollback: every written slot is kept"
    return out + note(f"Rollback: {how}.") + "".join(chip(look) for look in SLOT.values())
