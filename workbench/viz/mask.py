"""The tree mask of one verify forward as a heatmap.

Rows are the query nodes (root first), columns are the keys: the committed prefix, collapsed to
one band because every node sees all of it, then the tree nodes. Cell (i, j) is "node i may
attend to node j": the root, node i's ancestors and node i itself (docs/design.md §3). Because the
rerank sorts nodes by flat index, parents come first and the mask is lower-triangular.

Cells carry a glyph as well as a colour: ✓ may attend, · masked.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from workbench.viz.style import FONT, OKABE_ITO, base_layout, empty_figure
from workbench.viz.tokens import node_label

MASKED, TREE, PREFIX = 0, 1, 2  # cell values
_COLOURS = [(MASKED, "#F2F2F2"), (TREE, OKABE_ITO["blue"]), (PREFIX, OKABE_ITO["sky_blue"])]


def mask_matrix(trace: dict) -> tuple[list[list[int]], list[str], list[str]]:
    """(z [N, 1 + N], column labels, row labels): column 0 is the prefix band (``PREFIX`` in every
    row), columns 1.. the tree mask (``TREE`` / ``MASKED``) exactly as the trace records it."""
    nodes, mask = trace["tree"]["nodes"], trace["tree"]["mask"]
    labels = [node_label(trace, n["node"]) for n in nodes]
    z = [[PREFIX] + [TREE if cell else MASKED for cell in row] for row in mask]
    return z, [f"prefix ({trace['L']} tokens)"] + labels, labels


def _colourscale() -> list:
    """Discrete colours for 0, 1, 2 (zmin 0, zmax 2): each value gets a flat band."""
    scale = []
    for value, colour in _COLOURS:
        lo, hi = max(value - 0.5, 0) / 2, min(value + 0.5, 2) / 2
        scale += [[lo, colour], [hi, colour]]
    return scale


def mask_figure(trace: dict, height: int = 420) -> go.Figure:
    """Heatmap of ``mask_matrix`` with ✓ / · glyphs; hover says who sees whom."""
    if trace["kind"] != "spec":
        return empty_figure("No tree at this step: the prefill and vanilla decoding use a plain causal mask.",
                            height=220)
    z, cols, rows = mask_matrix(trace)
    n = len(rows)
    glyphs = [["✓ all" if j == 0 else "✓" if v else "" for j, v in enumerate(r)] for r in z]
    hover = [[(f"{rows[i]} sees the whole committed prefix (positions 0..{trace['L'] - 1})" if j == 0 else
               f"{rows[i]} {'may' if v else 'may NOT'} attend to {cols[j]}") for j, v in enumerate(r)]
             for i, r in enumerate(z)]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(n + 1)), y=list(range(n)), colorscale=_colourscale(), zmin=0, zmax=2, showscale=False,
        text=glyphs, texttemplate="%{text}", textfont=dict(size=13, color="white"), hovertext=hover,
        hoverinfo="text", xgap=2, ygap=2))
    fig.update_layout(**base_layout(f"Tree mask, step {trace['step']}: rows = {n} query nodes, columns = "
                                    f"what they may attend to (prefix band + {n} tree nodes)", height))
    fig.update_xaxes(tickvals=list(range(n + 1)), ticktext=cols, tickangle=-35)
    fig.update_yaxes(tickvals=list(range(n)), ticktext=rows, autorange="reversed")
    _masked_dots(fig)
    return fig


def _masked_dots(fig: go.Figure) -> None:
    """White glyphs read on the blue cells; the '·' of masked cells needs a dark grey (a heatmap
    has one text colour), so they are a second, text-only layer over the same grid."""
    heat = fig.data[0]
    xs, ys, dots = [], [], []
    for i, row in enumerate(heat.z):
        for j, v in enumerate(row):
            if v == MASKED:
                xs.append(j), ys.append(i), dots.append("·")
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="text", text=dots, textfont=dict(size=16, color="#555555"),
                             hoverinfo="skip", showlegend=False))



def mask_html(trace: dict) -> str:
    """``mask_matrix`` as an HTML grid (what the app shows: a table costs the browser far less to
    redraw on every Step than a plotly heatmap). Each row carries ``data-node``, each cell
    ``data-v`` (``PREFIX`` / ``TREE`` / ``MASKED``); hover a cell for who sees whom."""
    if trace["kind"] != "spec":
        return "<p>No tree at this step: the prefill and vanilla decoding use a plain causal mask.</p>"
    z, cols, rows = mask_matrix(trace)
    colour = dict(_COLOURS)
    cell = "width:26px;height:22px;text-align:center;font-size:13px;border:2px solid white"
    head = "".join(f"<th style='writing-mode:vertical-rl;transform:rotate(180deg);font-weight:400;"
                   f"font-size:11px;padding:2px'>{html.escape(c)}</th>" for c in cols)
    body = []
    for i, row in enumerate(z):
        cells = []
        for j, v in enumerate(row):
            text = "✓ all" if j == 0 else "✓" if v == TREE else "·"
            ink = "#555555" if v == MASKED else "white"
            tip = (f"{rows[i]} sees the whole committed prefix (positions 0..{trace['L'] - 1})" if j == 0 else
                   f"{rows[i]} {'may' if v == TREE else 'may NOT'} attend to {cols[j]}")
            width = "width:52px;" if j == 0 else ""
            cells.append(f"<td data-v='{v}' title='{html.escape(tip)}' style='{cell};{width}background:"
                         f"{colour[v]};color:{ink}'>{text}</td>")
        body.append(f"<tr data-node='{i}'><th style='text-align:right;font-weight:400;font-size:12px;"
                    f"padding-right:6px;white-space:nowrap'>{html.escape(rows[i])}</th>{''.join(cells)}</tr>")
    n = len(rows)
    title = (f"Tree mask, step {trace['step']}: rows = {n} query nodes, columns = what they may attend to "
             f"(prefix band + {n} tree nodes)")
    return (f"<p style='font-family:{FONT};font-size:14px;margin:4px 0'>{html.escape(title)}</p>"
            f"<table class='wb-mask' data-step='{trace['step']}' style='border-collapse:collapse;font-family:{FONT}'>"
            f"<thead><tr><th></th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
