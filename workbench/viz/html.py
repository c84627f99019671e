"""Small HTML building blocks for the tables: inline styles only, so the HTML renders the same in
the app, in a notebook and in a saved file. Every table row carries ``data-*`` attributes (node,
move, slot) so tests and scripts can read a table without parsing its text."""

from __future__ import annotations

import html

from workbench.viz.style import FONT, Look

TABLE = f"border-collapse:collapse;font-family:{FONT};font-size:13px;width:100%"
CELL = "border-bottom:1px solid #E5E5E5;padding:3px 6px;text-align:left;vertical-align:top"
HEAD = CELL + ";font-weight:600;background:#F7F7F7"


def table(headers: list[str], rows: list[list[str]], row_attrs: list[dict] | None = None,
          row_styles: list[str] | None = None, name: str = "") -> str:
    """An HTML table; cells are HTML already (escape text with ``html.escape`` first)."""
    head = "".join(f"<th style='{HEAD}'>{h}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        attrs = "".join(f" data-{k}='{html.escape(str(v))}'" for k, v in (row_attrs[i] if row_attrs else {}).items())
        style = f" style='{row_styles[i]}'" if row_styles and row_styles[i] else ""
        body.append(f"<tr{attrs}{style}>" + "".join(f"<td style='{CELL}'>{c}</td>" for c in row) + "</tr>")
    return (f"<table class='wb-table' data-table='{name}' style='{TABLE}'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def chip(look: Look, text: str | None = None) -> str:
    """A coloured glyph + label, as in a legend: colour and glyph together, never colour alone."""
    label = html.escape(text if text is not None else look.label)
    return (f"<span style='display:inline-block;margin:0 10px 2px 0'><span style='color:{look.colour};"
            f"font-weight:700'>{look.glyph}</span> {label}</span>")


def bar(p: float, colour: str, width: int = 60) -> str:
    """A small horizontal bar of length p (0..1) beside a probability."""
    w = max(1, round(p * width))
    return (f"<span style='display:inline-block;width:{width}px;background:#EEE;vertical-align:middle'>"
            f"<span style='display:block;width:{w}px;height:8px;background:{colour}'></span></span>")


def note(text: str) -> str:
    """A muted paragraph under a table."""
    return f"<p style='font-family:{FONT};font-size:12px;color:#555;margin:4px 0'>{text}</p>"
