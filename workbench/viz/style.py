"""One look per status, shared by every view: colour (Okabe-Ito, safe for the common kinds of
colour blindness) AND a marker symbol / text glyph, so no view relies on colour alone."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.viz.layout import LINE, wrap

# Okabe & Ito (2008), "Color Universal Design".
OKABE_ITO = {
    "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73", "yellow": "#F0E442",
    "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7", "black": "#000000",
    "grey": "#999999",
}


@dataclass(frozen=True)
class Look:
    colour: str
    symbol: str  # plotly marker symbol
    glyph: str  # the same status in text (tables, cells, legends)
    label: str  # legend text


# Status of a draft-tree node after the accept walk.
NODE = {
    "root": Look(OKABE_ITO["black"], "square", "■", "root (last step's bonus)"),
    "accepted": Look(OKABE_ITO["bluish_green"], "circle", "✓", "accepted"),
    "missed": Look(OKABE_ITO["vermillion"], "x", "✗", "tried and missed"),
    "unreached": Look(OKABE_ITO["sky_blue"], "circle-open", "○", "not reached"),
    "dropped": Look(OKABE_ITO["grey"], "triangle-down-open", "▽", "dropped at rerank"),
    "bonus": Look(OKABE_ITO["orange"], "star", "★", "bonus (the target's token)"),
}

# Provenance of an output token.
PROVENANCE = {
    "prompt": Look(OKABE_ITO["grey"], "square", "", "prompt"),
    "accepted": Look(OKABE_ITO["bluish_green"], "circle", "✓", "accepted draft"),
    "bonus": Look(OKABE_ITO["orange"], "star", "★", "bonus (the target's own token)"),
}

# KV slot status within one step.
SLOT = {
    "committed": Look(OKABE_ITO["blue"], "square", "■", "committed before this step"),
    "kept": Look(OKABE_ITO["bluish_green"], "square", "✓", "written this step, kept"),
    "freed": Look(OKABE_ITO["vermillion"], "square-x-open", "✗", "written this step, rolled back (freed)"),
    "extend": Look(OKABE_ITO["sky_blue"], "square", "+", "draft extend: written, kept"),
    "scratch": Look(OKABE_ITO["grey"], "square-open", "↺", "draft tree scratch: written, freed"),
}

# Methods in the Compare view.
METHOD = {"vanilla": OKABE_ITO["black"], "linear": OKABE_ITO["vermillion"], "eagle2": OKABE_ITO["blue"],
          "linear (same verify budget)": OKABE_ITO["reddish_purple"], "static": OKABE_ITO["sky_blue"]}
# Draft sources keep their colour in their own module (``DraftSource.colour``, one of these hues).

FONT = "Inter, system-ui, sans-serif"
TITLE_PX = 14  # title font size
LEGEND_ROW = 22  # px per row of a horizontal legend
TITLE_TOP = 40  # px above a title: clear of the label a Gradio plot draws in its top-left corner


def base_layout(title: str, height: int = 420, axes: bool = True, width: int = 900) -> dict:
    """Layout shared by every figure: white background, compact margins, the title on top,
    wrapped to ``width`` px (the top margin grows with its lines), the legend in a row: above
    the plot, right-aligned, when there are ``axes`` (clear of the axis titles), else under it.

    No plotly template: applying one (even the default) costs ~50 ms per figure and ~6 kB of
    JSON, which a Step pays for every figure; the few settings that matter are set here."""
    legend = (dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0) if axes else
              dict(orientation="h", yanchor="top", y=0.0, xanchor="left", x=0))
    axis = dict(gridcolor="#EEEEEE", zeroline=False, automargin=True, linecolor="#CCCCCC")
    top = max(70 if axes else 50, round(title_height(title, width) + (LEGEND_ROW + 4 if axes else 0)))
    text = "<br>".join(wrap(title, width - 20, TITLE_PX))
    return dict(title=dict(text=text, font=dict(size=TITLE_PX), x=0.01, xanchor="left",
                           **title_on_top(height)), height=height,
                template="none", paper_bgcolor="white", plot_bgcolor="white", xaxis=axis, yaxis=axis,
                hoverlabel=dict(bgcolor="white", font=dict(family=FONT)),
                margin=dict(l=10, r=10, t=top, b=10), font=dict(family=FONT, size=12, color="#222"),
                legend=legend)


def title_height(title: str, width: int) -> float:
    """Px from the figure's top to below its title wrapped to ``width`` (8 px under it)."""
    return TITLE_TOP + len(wrap(title, width - 20, TITLE_PX)) * TITLE_PX * LINE + 8 if title else 14


def title_on_top(height: float) -> dict:
    """Title settings pinning its first line ``TITLE_TOP`` px under the figure's top edge (plotly
    would centre it in the top margin, far above the plot when that margin also holds a legend)."""
    return dict(yref="container", y=1 - TITLE_TOP / height, yanchor="top")


def empty_figure(message: str, height: int = 300):
    """A figure that only says why there is nothing to draw (e.g. the prefill step)."""
    import plotly.graph_objects as go

    fig = go.Figure(layout=base_layout("", height))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=13))
    return fig
