"""How a token's text and a probability are shown: whitespace made visible, short numbers."""

from __future__ import annotations

import html

_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def show(text: str, limit: int | None = 16) -> str:
    """Token text with whitespace made visible (``" the"`` -> ``"␣the"``), cut at ``limit``
    characters with "…" (``None``: never cut)."""
    if text == "":
        return "∅"
    shown = "".join(_VISIBLE.get(ch, ch) for ch in text)
    return shown if limit is None or len(shown) <= limit else shown[: limit - 1] + "…"


def show_html(text: str, limit: int | None = None) -> str:
    """``show`` for HTML, escaped and by default whole: a table cell wraps, so nothing is cut."""
    return html.escape(show(text, limit))


# Plotly draws text as its own small HTML: it reads tags (<b>, <br>, ...) and a few named
# entities (&lt; &gt; &amp; ...), not &quot; or &#x27;, which html.escape writes and plotly then
# prints as they are. So only the three characters that could start a tag or an entity are
# replaced, by forms plotly decodes: what the picture shows is the token's text.
_PLOTLY = str.maketrans({"&": "&#38;", "<": "&lt;", ">": "&gt;"})


def plotly_text(text: str) -> str:
    """``text`` for a plotly title, annotation or legend: shown as written, never read as markup."""
    return text.translate(_PLOTLY)


def node_label(trace: dict, node: int) -> str:
    """``"3 ␣cat"``: the node index and its token, as the mask and the tables label rows."""
    return f"{node} {show(trace['tree']['nodes'][node]['text'])}"


def or_dash(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    """A table cell's number: ``x`` in format ``spec`` with ``suffix`` after it, "–" where it
    was not measured (None)."""
    return "–" if x is None else f"{x:{spec}}{suffix}"


def num(x: float) -> str:
    """A probability in 2 significant digits, small ones in e-notation (0.31, 0.045, 3.1e-05; 0)."""
    if x == 0:
        return "0"
    return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}" if x >= 0.001 else f"{x:.1e}"
