"""Where text goes in a figure, so that a static picture (a PNG in a notebook, a screenshot) reads
without a mouse: estimated text sizes, label boxes that never overlap, titles that wrap.

Plotly cannot measure text before it draws, so sizes are estimated from the characters and the
font size, on the wide side (a DejaVu-like sans; symbols such as ␣ and ↵ count as one em). Every
position here is in pixels with y growing downward, the way the boxes are tested; the figures
convert to their own axes. Everything is pure: no plotly, no trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

ASCII_EM = 0.64  # width of an average ASCII character, in font sizes (regular weight)
BOLD_EM = 0.72
SYMBOL_EM = 1.0  # ␣ ↵ → … and other non-ASCII glyphs
LINE = 1.3  # line height, in font sizes


def text_width(text: str, size: float, bold: bool = False) -> float:
    """Estimated width in px of one line of ``text`` at ``size`` px (an over-estimate)."""
    em = BOLD_EM if bold else ASCII_EM
    return sum((em if ord(ch) < 128 else SYMBOL_EM) * size for ch in text)


def fit_text(text: str, size: float, room: float, bold: bool = False) -> str:
    """``text`` if it fits in ``room`` px, else its longest prefix that fits with "…" after it
    (at least one character and the "…")."""
    if text_width(text, size, bold) <= room:
        return text
    cut = len(text) - 1
    while cut > 1 and text_width(text[:cut] + "…", size, bold) > room:
        cut -= 1
    return text[:cut] + "…"


def wrap(text: str, width: float, size: float) -> list[str]:
    """``text`` split at spaces into lines of at most ``width`` px (a longer word keeps its own line)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and text_width(lines[-1] + " " + word, size) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


@dataclass(frozen=True)
class Box:
    """A rectangle in px: x0 <= x1 left to right, y0 <= y1 top to bottom."""

    x0: float
    y0: float
    x1: float
    y1: float

    def __post_init__(self):
        if self.x1 < self.x0 or self.y1 < self.y0:
            raise ValueError(f"a box needs x0 <= x1 and y0 <= y1, got {self}")

    def overlaps(self, other: Box) -> bool:
        """True when the two share more than an edge."""
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def shifted(self, dx: float, dy: float) -> Box:
        return Box(self.x0 + dx, self.y0 + dy, self.x1 + dx, self.y1 + dy)


def water_fill(natural: list[float], total: float) -> list[float]:
    """Column widths: each column's ``natural`` width when they all fit in ``total``, else one
    cap c for the wide columns (narrow ones keep theirs) with sum(min(natural, c)) = total."""
    if sum(natural) <= total:
        return list(natural)
    rest, left = sorted(natural), total
    for i, w in enumerate(rest):
        cap = left / (len(rest) - i)
        if w > cap:
            return [min(n, cap) for n in natural]
        left -= w
    return list(natural)  # not reached: the sum exceeded total, so some column is above its share


def spread(centres: list[float], heights: list[float], gap: float = 0.0) -> list[float]:
    """New centres, in the same order, such that consecutive intervals (centre ± height/2) are at
    least ``gap`` apart; each interval moves down only as far as needed. ``centres`` ascending."""
    out: list[float] = []
    for c, h in zip(centres, heights):
        if out:
            floor = out[-1] + heights[len(out) - 1] / 2 + gap + h / 2
            c = max(c, floor)
        out.append(c)
    return out


def place_labels(points: list[tuple[float, float]], sizes: list[tuple[float, float]], step: float = 4.0,
                 reach: int = 60) -> list[Box]:
    """A box of ``sizes[i]`` (w, h) px beside each point (x, y) px, none overlapping another box or
    covering a point: first choice right of the point, centred on it, then left, then moving
    up and down in ``step`` px (up to ``reach`` steps), nearest first; the last resort is below
    all the others. Points are placed from the top down."""
    marks = [Box(x - 5, y - 5, x + 5, y + 5) for x, y in points]
    placed: dict[int, Box] = {}
    for i in sorted(range(len(points)), key=lambda i: (points[i][1], points[i][0])):
        (x, y), (w, h) = points[i], sizes[i]
        right, left = Box(x + 7, y - h / 2, x + 7 + w, y + h / 2), Box(x - 7 - w, y - h / 2, x - 7, y + h / 2)
        tries = [b.shifted(0, sign * k * step) for k in range(reach + 1) for sign in (1, -1)
                 for b in (right, left)]
        free = next((b for b in tries if not any(b.overlaps(o) for o in [*placed.values(), *marks])), None)
        if free is None:
            bottom = max([o.y1 for o in placed.values()] + [m.y1 for m in marks])
            free = right.shifted(0, bottom + 2 - right.y0)
        placed[i] = free
    return [placed[i] for i in range(len(points))]


@dataclass(frozen=True)
class Line:
    """One line of a label: its text, font size in px, weight, and a ``short`` form to show
    instead of a cut one when the text does not fit ("" = none)."""

    text: str
    size: float = 11
    bold: bool = False
    short: str = ""

    @property
    def width(self) -> float:
        return text_width(self.text, self.size, self.bold)



def lines_height(lines: list[Line]) -> float:
    """Height in px of a multi-line label (plotly spaces lines by its largest font)."""
    return len(lines) * LINE * max(line.size for line in lines)


def fit_lines(lines: list[Line], room: float) -> list[Line]:
    """The lines that fit ``room`` px: the first (the name) in its short form, or cut with "…",
    when too wide; the later ones (details) kept only when they fit whole."""
    name = lines[0]
    if name.width > room:
        text = name.short or name.text
        name = Line(fit_text(text, name.size, room, name.bold), name.size, name.bold)
    return [name] + [line for line in lines[1:] if line.width <= room]


# A tree drawn left to right: one column per depth, each column = marker + gap + labels + gutter.
MARKER = 16  # px: the widest marker
GAP = 4  # px between a marker and its label
GUTTER = 16  # px between a column's widest label and the next column's markers: where edges bend
ROW_PAD = 4  # px between two labels of one column
# px: the narrowest label column, a name of about four characters at 11 px bold ("␣books", or "␣boo…"):
# a deep tree grows wider rather than cutting every token to one character and "…", which no one can read.
MIN_LABEL = 5 * SYMBOL_EM * 11


@dataclass(frozen=True)
class TreeLayout:
    """A drawn tree in px (origin top left, y down): marker centres ``xy``, label ``boxes`` and
    the ``lines`` they hold, each edge's polyline (from the end of the parent's label, bending in
    the gutter, to the child's marker), and the size of the drawing."""

    xy: dict
    boxes: dict
    lines: dict
    edges: dict
    width: float
    height: float


def tree_layout(g, root, lines: dict, width: float) -> TreeLayout:
    """Lay out the tree ``g`` (a networkx DiGraph from ``root``; node attribute ``depth``; the
    children in the order drawn top to bottom) in ``width`` px, labels ``lines[key]`` right of
    each marker. Columns share the width by ``water_fill``; a label wider than its column is cut
    by ``fit_lines``. Leaves take consecutive rows in depth-first order, a parent sits at the
    mean height of its children, and ``spread`` then pushes down any label that would touch the
    one above it in its column: no two label boxes overlap (columns do not share x either).
    A tree too deep for ``width`` (columns narrower than ``MIN_LABEL``) is laid out wider: the
    layout's ``width`` says how wide."""
    depth = {k: g.nodes[k]["depth"] for k in g.nodes}
    cols = max(depth.values()) + 1
    natural = [max((max(line.width for line in lines[k]) for k in g.nodes if depth[k] == d), default=0.0)
               for d in range(cols)]
    fixed = MARKER + GAP + GUTTER
    caps = water_fill(natural, max(width - cols * fixed, cols * MIN_LABEL))
    spare = max(0.0, width - cols * fixed - sum(caps)) / cols  # widen the gutters when there is room
    x0 = [sum(caps[:d]) + d * (fixed + spare) for d in range(cols)]
    shown = {k: fit_lines(lines[k], caps[depth[k]]) for k in g.nodes}
    tall = {k: lines_height(shown[k]) for k in g.nodes}
    y = _rows(g, root, tall)
    for d in range(cols):
        keys = sorted((k for k in g.nodes if depth[k] == d), key=lambda k: y[k])
        y.update(zip(keys, spread([y[k] for k in keys], [tall[k] for k in keys], ROW_PAD)))
    xy = {k: (x0[depth[k]] + MARKER / 2, y[k]) for k in g.nodes}
    boxes = {k: Box(x0[depth[k]] + MARKER + GAP, y[k] - tall[k] / 2,
                    x0[depth[k]] + MARKER + GAP + max(line.width for line in shown[k]), y[k] + tall[k] / 2)
             for k in g.nodes}
    edges = {(u, v): [(boxes[u].x1 + 2, y[u]), (x0[depth[u]] + MARKER + GAP + caps[depth[u]] + 4, y[u]), xy[v]]
             for u, v in g.edges}
    height = max(b.y1 for b in boxes.values()) + ROW_PAD
    return TreeLayout(xy, boxes, lines=shown, edges=edges, width=x0[-1] + MARKER + GAP + caps[-1], height=height)


def _rows(g, root, tall: dict) -> dict:
    """{key: y}: leaves one under the other in depth-first order (each as tall as its label plus
    ``ROW_PAD``), a parent at the mean y of its children."""
    y, top = {}, 0.0
    for key in nx.dfs_preorder_nodes(g, root):
        if g.out_degree(key) == 0:
            y[key] = top + (tall[key] + ROW_PAD) / 2
            top += tall[key] + ROW_PAD
    for key in nx.dfs_postorder_nodes(g, root):
        if key not in y:
            y[key] = sum(y[c] for c in g.successors(key)) / g.out_degree(key)
    return y


def legend_rows(names: list[str], width: float, size: float = 12) -> int:
    """Rows a horizontal plotly legend of ``names`` takes in ``width`` px. Plotly puts the
    entries in one row when they fit, else in a grid whose columns are as wide as the widest
    entry (a 40 px symbol and its text)."""
    entries = [40 + text_width(name, size) for name in names]
    if sum(entries) <= width:
        return 1
    columns = max(1, int(width // max(entries)))
    return -(-len(entries) // columns)
