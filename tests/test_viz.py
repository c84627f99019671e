"""The figure and table builders of ``workbench.viz``, on traces from the real engine (tiny random
models) and on the docs/design.md §5 seed tree written out by hand: node counts, one marker symbol
and colour per status, mask cells equal to the trace's mask, walk moves, KV counts."""

import math
import re
from pathlib import Path

import networkx as nx
import pytest

from helpers import tiny_pair
from workbench.analysis.calibration import calibration_table
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.engine.sampling import SamplingParams
from workbench.viz.best_tree import best_tree_figure, budget_figure, budget_taus, continuation_html, greedy_continuation
from workbench.viz.candidates import FLOOR, path_score_figure
from workbench.viz.calibration import calibration_html, depth_figure, reliability_figure
from workbench.cost_model import Overhead, StepCost
from workbench.viz.compare import (DODGE, cost_figure, dodge_x, gap_html, gap_rows, run_summary, speedup_scatter, speedups, summary_html,
                                   tau_figure, tokens_figure)
from workbench.viz.layout import Box, Line, fit_lines, legend_rows, place_labels, spread, water_fill, wrap
from workbench.viz.kv import kv_figure, kv_slots_html, kv_summary, kv_table_html, slot_labels
from workbench.viz.logits import children, logits_html, logits_rows
from workbench.viz.mask import MASKED, PREFIX, TREE, mask_figure, mask_html, mask_matrix
from workbench.viz.output import output_html, output_tokens, tau_per_step
from workbench.viz.sampling import acceptance_stack_figure, coin_rows, sampling_html
from workbench.viz.style import NODE, SLOT
from workbench.viz.tokens import plotly_text
from workbench.viz.tree import MARGIN, WIDTH, collapse_dropped, layout_tree, node_status, tree_figure, tree_graph
from workbench.viz.walk import moves_html, pointer_rows, pointer_table_html, walk_moves, walk_position

RUNS = {
    "eagle2": (SpecConfig("eagle2", num_steps=3, topk=3, num_draft_tokens=7), SamplingParams()),
    "wide": (SpecConfig("eagle2", num_steps=4, topk=4, num_draft_tokens=10), SamplingParams()),
    "sampling": (SpecConfig("eagle2", num_steps=3, topk=3, num_draft_tokens=7), SamplingParams(temperature=1.0, seed=3)),
    "linear": (SpecConfig.linear(3), SamplingParams()),
    "leviathan": (SpecConfig.linear(3, "leviathan"), SamplingParams(temperature=1.0, seed=1)),
    "block": (SpecConfig.linear(3, "block"), SamplingParams(temperature=1.0, seed=1)),
    "vanilla": (SpecConfig("vanilla"), SamplingParams()),
    "static": (SpecConfig.static(7), SamplingParams()),
}
WORDS = ["␣the", "\n", "numbers", "x", "␣international", "):", "def", "␣superlongidentifiername", "_", "((", "␣a"]


def overlapping_pairs(boxes: dict) -> list[tuple]:
    """Every pair of keys whose boxes overlap (empty when the labels are all readable)."""
    keys = list(boxes)
    return [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:] if boxes[a].overlaps(boxes[b])]


def word(token: int) -> str:
    """Token texts of every length, the widest glyphs included, for the layout tests."""
    return WORDS[token % len(WORDS)].replace("␣", " ")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (traces, request) from 12-token decodes of one prompt."""
    target, head = tiny_pair(tmp_path_factory.mktemp("tiny"))
    out = {}
    for name, (spec, sampling) in RUNS.items():
        eng = Engine(target, head, spec, sampling=sampling, trace=True, token_text=lambda t: f"t{t}")
        eng.add_requests([[3, 5, 7, 9, 11]], 12)
        traces = []
        while not eng.done:
            traces.extend(eng.step())
        out[name] = (traces, eng.requests[0])
    return out


def spec_steps(runs, name):
    return [t for t in runs[name][0] if t["kind"] == "spec"]


def seed_tree_trace() -> dict:
    """The "seed tree" of docs/design.md §5 as a trace: root 0, A 1, B 2 (children of the root), C 3, D 4
    (of A), E 5 (of B); target root->A, A->D; a dropped candidate F under B."""
    names = ["the", "A", "B", "C", "D", "E"]
    parents, depths = [-1, 0, 0, 1, 1, 2], [0, 1, 1, 2, 2, 2]
    cand = [-1, 0, 1, 2, 3, 4]  # flat candidate index of each node; candidate 5 (F) was dropped
    nodes = [{"node": i, "token": 100 + i, "text": names[i], "score": 0.5 ** depths[i], "prob": 0.5,
              "parent": parents[i], "depth": depths[i], "position": 10 + depths[i], "candidate": cand[i],
              "target_prob": None if i == 0 else 0.9}
             for i in range(6)]
    candidates = [{"index": c, "token": 101 + c, "text": names[c + 1], "prob": 0.5, "score": 0.5 ** depths[c + 1],
                   "parent": [-1, -1, 0, 0, 1][c], "level": depths[c + 1]} for c in range(5)]
    candidates.append({"index": 5, "token": 99, "text": "F", "prob": 0.1, "score": 0.05, "parent": 1, "level": 2})
    mask = [[int(j in (0, i, parents[i])) for j in range(6)] for i in range(6)]  # depth <= 2: parent = ancestor
    top = [[{"token": 100 + t, "text": names[t], "prob": 0.9}] for t in [1, 4, 0, 0, 0, 0]]
    return {
        "kind": "spec", "step": 2, "request": 0, "method": "eagle2", "L": 10,
        "draft": {"levels": [], "candidates": candidates, "kept": [0, 1, 2, 3, 4], "dropped": []},
        "tree": {"nodes": nodes, "mask": mask,
                 "retrieve_next_token": [1, 3, 5, -1, -1, -1], "retrieve_next_sibling": [-1, 2, -1, 4, -1, -1]},
        "verify": {"top": top},
        "accept": {"moves": [{"node": 0, "child": 1, "via": "next_token", "read": 0, "match": True},
                             {"node": 1, "child": 3, "via": "next_token", "read": 1, "match": False},
                             {"node": 1, "child": 4, "via": "next_sibling", "read": 3, "match": True}],
                   "path": [0, 1, 4], "accepted": [101, 104], "stop": "leaf", "bonus": {"token": 100, "text": "the", "after_node": 4},
                   "bonus_from": "target", "residual_top": [], "rule": "greedy"},
        "kv": {"target": {"written": [10, 11, 12, 13, 14, 15], "kept": [10, 11, 12], "freed": [13, 14, 15],
                          "moved": [[14, 12]]},  # node 4 (D) verified in slot 14, kept in the third
               "draft": {"extend_written": [8, 9], "scratch": [16, 17, 18, 19]},
               "allocated": 13, "free": 7, "total": 20},
        "emitted": [101, 104, 100], "accept_length": 3, "finished": None,
        "timing_ms": {"draft_extend_ms": 1.0, "draft_tree_ms": 2.0, "build_ms": 0.1, "verify_ms": 3.0,
                      "accept_ms": 0.1, "commit_ms": 0.1},
    }


def markers(fig) -> dict:
    """status (trace.meta) -> marker trace."""
    return {t.meta: t for t in fig.data if t.meta}


# ---- tree ------------------------------------------------------------------------------------
def test_seed_tree_statuses_and_figure():
    tr = seed_tree_trace()
    assert node_status(tr) == ["root", "accepted", "unreached", "missed", "accepted", "unreached"]
    by = markers(tree_figure(tr))
    assert set(by) == {"root", "accepted", "missed", "unreached", "dropped", "bonus"}
    assert sorted(by["accepted"].customdata) == ["1", "4"] and list(by["missed"].customdata) == ["3"]
    assert sorted(by["unreached"].customdata) == ["2", "5"] and list(by["dropped"].customdata) == ["+2"]
    for status, t in by.items():  # each status its own symbol AND colour
        assert (t.marker.symbol, t.marker.color) == (NODE[status].symbol, NODE[status].colour)
    g = tree_graph(tr)
    assert list(g.predecessors("bonus")) == [4] and list(g.predecessors("c5")) == [2]


def test_tree_figure_counts_match_the_trace(runs):
    for name in ("eagle2", "wide", "sampling", "linear"):
        for tr in spec_steps(runs, name)[:4]:  # a figure costs ~50 ms: a few steps of each run
            fig = tree_figure(tr)
            by = markers(fig)
            n = sum(len(t.x) for s, t in by.items() if s not in ("dropped", "bonus", "stop"))  # stop: a ring on a node
            assert n == len(tr["tree"]["nodes"])
            assert by["stop"].name == f"stop: {tr['stop']['cause']}" and len(by["stop"].x) == 1
            folds = collapse_dropped(tree_graph(tr))
            counts = [a["count"] for _, a in folds.nodes(data=True) if a["status"] == "dropped"]
            assert sum(counts) == len(tr["draft"]["candidates"]) - (n - 1)  # one "+n" mark per parent
            assert len(by.get("dropped", {"x": []})["x"]) == len(counts)
            accepted = sorted(int(k) for k in by["accepted"].customdata) if "accepted" in by else []
            assert accepted == sorted(tr["accept"]["path"][1:])
            assert len(by["bonus"].x) == 1 and len(by["root"].x) == 1
            assert f"Step {tr['step']}: {n} verified nodes" in fig.layout.title.text


@pytest.fixture(scope="module")
def wide_traces(tmp_path_factory):
    """Spec steps at the default tree and at 60/6/10 (num_draft_tokens/num_steps/topk), token
    texts of every width."""
    target, head = tiny_pair(tmp_path_factory.mktemp("wide"))
    out = {}
    for name, spec in [("default", SpecConfig("eagle2")), ("60/6/10", SpecConfig("eagle2", num_steps=6, topk=10, num_draft_tokens=60)),
                       ("chain of 16", SpecConfig.linear(16))]:
        eng = Engine(target, head, spec, sampling=SamplingParams(), trace=True, token_text=word)
        eng.add_requests([[3, 5, 7, 9, 11]], 8)
        traces = []
        while not eng.done:
            traces.extend(eng.step())
        out[name] = [t for t in traces if t["kind"] == "spec"]
    return out


@pytest.mark.parametrize("name", ["default", "60/6/10", "chain of 16"])
@pytest.mark.parametrize("compact,width", [(False, 900), (True, 480)])
def test_tree_labels_never_overlap(wide_traces, name, compact, width):
    """Every verified node and the bonus carry a label; no two label boxes overlap; all inside
    the plot area; the figure draws exactly these boxes on axes in px. The chain of 16 is wider
    than 480 px can hold: the figure grows rather than squeezing it."""
    for tr in wide_traces[name][:3]:
        g = collapse_dropped(tree_graph(tr))
        lay = layout_tree(g, compact, width)
        assert overlapping_pairs(lay.boxes) == []
        for k in [n["node"] for n in tr["tree"]["nodes"]] + ["bonus"]:
            assert lay.lines[k][0].text.strip() and lay.boxes[k].x1 > lay.boxes[k].x0
        assert all(0 <= b.x0 and b.x1 <= lay.width and 0 <= b.y0 and b.y1 <= lay.height for b in lay.boxes.values())
        width = max(width, round(lay.width) + 2 * MARGIN)  # only a very deep tree needs more than asked
        markers_px = {k: Box(x - 8, y - 8, x + 8, y + 8) for k, (x, y) in lay.xy.items()}
        assert not any(markers_px[a].overlaps(lay.boxes[b]) for a in g.nodes for b in g.nodes)
        fig = tree_figure(tr, compact=compact, width=width)
        m = fig.layout.margin
        assert (fig.layout.width, m.autoexpand) == (width, False) and m.t >= 100  # what a Gradio plot keeps
        assert list(fig.layout.xaxis.range) == [0, width - 2 * MARGIN]
        assert fig.layout.height - m.t - m.b == pytest.approx(fig.layout.yaxis.range[0], abs=1)
        assert len(fig.layout.annotations) == g.number_of_nodes()


def test_dropped_candidates_fold_into_one_mark_per_parent(wide_traces):
    for tr in wide_traces["60/6/10"]:
        full, folded = tree_graph(tr), collapse_dropped(tree_graph(tr))
        kept = {n["node"] for n in tr["tree"]["nodes"]}
        for key, a in folded.nodes(data=True):
            if a["status"] != "dropped":
                continue
            parent = next(folded.predecessors(key))
            assert key == f"+{parent}" and parent in kept
            under = [m for c in full.successors(parent) if full.nodes[c]["status"] == "dropped"
                     for m in [c, *nx.descendants(full, c)]]
            assert a["count"] == len(under) == len(a["members"]) and {m[0] for m in a["members"]} == set(under)
            scores = [m[2] for m in a["members"]]
            assert scores == sorted(scores, reverse=True)
        n_folds = sum(a["status"] == "dropped" for _, a in folded.nodes(data=True))
        assert folded.number_of_nodes() == len(kept) + 1 + n_folds  # + the bonus


def test_best_tree_at_60_6_10_labels_its_left_token(wide_traces):
    for tr in wide_traces["60/6/10"][:3]:
        fig = best_tree_figure(tr)
        left = next(t for t in fig.data if t.meta == "left")
        texts = [a.text for a in fig.layout.annotations]
        assert sum("left the tree" in t for t in texts) == 1
        assert (left.x[0], left.y[0]) in {(t.x[0], t.y[0]) for t in fig.data if t.meta == "bonus"}  # greedy


def test_path_score_figure_names_the_kept_and_expanded_and_draws_the_cutoff(runs, wide_traces):
    for tr in spec_steps(runs, "wide")[:3] + wide_traces["60/6/10"][:1]:
        fig = path_score_figure(tr)
        cands, kept = tr["draft"]["candidates"], set(tr["draft"]["kept"])
        expanded = {i for lv in tr["draft"]["levels"] for i in lv["frontier"]}
        assert len(fig.layout.annotations) == len(kept | expanded) + 1  # + the root; the others on hover
        ticks = list(fig.layout.yaxis.tickvals)  # powers of ten only: no "2" or "5" that reads as a value
        assert ticks and all(math.log10(t) == round(math.log10(t)) for t in ticks)
        assert all(10 ** fig.layout.yaxis.range[0] <= t <= 10 ** fig.layout.yaxis.range[1] for t in ticks)
        assert all(float(text) == pytest.approx(t) for text, t in zip(fig.layout.yaxis.ticktext, ticks))
        cut = next(t for t in fig.data if t.meta == "cutoff")
        lowest = min(n["score"] for n in tr["tree"]["nodes"][1:])
        assert cut.y[0] == max(lowest, FLOOR)  # a score the trace rounded to 0 is drawn at the floor
        assert all(c["score"] >= lowest for c in cands if c["index"] in kept)
        shown = sum(len(t.x) for t in fig.data if t.meta and "rerank," in t.meta)
        assert shown == len(cands)
        assert (fig.layout.width, fig.layout.margin.autoexpand) == (900, False)


ENTITIES = ("&quot;", "&amp;", "&#x27;", "&#39;")  # what html.escape writes and plotly prints as it is


def plotly_strings(fig) -> list[str]:
    """Every text a figure draws or shows on hover: title, annotations, legend names, hovertext."""
    out = [fig.layout.title.text or ""] + [a.text for a in fig.layout.annotations]
    for t in fig.data:
        out += [t.name or ""] + [str(h) for h in (getattr(t, "hovertext", None) or [])]
    return out


def test_token_text_reaches_the_picture_as_written():
    """A token with a quote, an ampersand or a tag in it is shown as written: no HTML entity that
    plotly would print literally (&quot;), no markup it would read (<b>)."""
    assert plotly_text('␣"a&b<b>') == "␣\"a&#38;b&lt;b&gt;" and plotly_text("plain") == "plain"
    tr = seed_tree_trace()
    for i, text in [(1, '"'), (2, "&"), (4, "<b>x</b>")]:
        tr["tree"]["nodes"][i]["text"] = text
        next(c for c in tr["draft"]["candidates"] if c["index"] == tr["tree"]["nodes"][i]["candidate"])["text"] = text
    tr["accept"]["bonus"]["text"] = "'"
    tr["verify"]["top"][4] = [{"token": 100, "text": "'", "prob": 0.9}]
    for fig in (tree_figure(tr), tree_figure(tr, compact=True, label="a & b"), best_tree_figure(tr)):
        strings = plotly_strings(fig)
        assert not [s for s in strings if any(e in s for e in ENTITIES)]
        assert not [s for s in strings if "<b>x" in s]  # the token's tag never reaches plotly as markup
        labels = " ".join(a.text for a in fig.layout.annotations)
        assert all(t in labels for t in ('"', "&#38;", "&lt;b&gt;x")), labels  # decoded by plotly: " & <b>x


def test_compact_trees_keep_token_names_readable(wide_traces):
    """A deep compact tree is drawn wider rather than cutting every name to one character and
    "…": each verified node keeps at least four characters of its name, or all of it."""
    for tr in wide_traces["chain of 16"][:2] + wide_traces["60/6/10"][:2]:
        lay = layout_tree(collapse_dropped(tree_graph(tr)), True, 480)
        for n in tr["tree"]["nodes"]:
            shown = lay.lines[n["node"]][0].text
            assert not shown.endswith("…") or len(shown) >= 5, shown
    fig = tree_figure(wide_traces["chain of 16"][0], compact=True, width=WIDTH, label="exit:28")
    assert fig.layout.title.text.startswith("exit:28: Step") and fig.layout.width >= WIDTH


def test_best_tree_rings_the_bonus_and_keeps_its_title_to_two_lines(wide_traces):
    for tr in wide_traces["60/6/10"][:3]:
        fig = best_tree_figure(tr)
        left = next(t for t in fig.data if t.meta == "left")
        assert left.marker.symbol == "circle-open"  # around the bonus star, not a second star over it
        assert fig.layout.title.text.count("<br>") <= 1 and "token(s)" not in fig.layout.title.text
    tr = seed_tree_trace()
    tr["verify"]["top"][0] = [{"token": 102, "text": "B", "prob": 0.9}]  # leaves at a token dropped at rerank
    tr["verify"]["top"][2] = [{"token": 99, "text": "F", "prob": 0.8}]
    assert next(t for t in best_tree_figure(tr).data if t.meta == "left").marker.symbol == "hexagram-open"


def test_settings_of_one_tau_are_drawn_apart():
    assert dodge_x([1.0, 2.0, 2.0, 3.0], 0.1) == pytest.approx([1.0, 1.95, 2.05, 3.0])
    assert dodge_x([], 0.1) == [] and dodge_x([1.0], 0.1) == [1.0]
    pts = [dict(method="eagle2", label=f"eagle2:6/3/{k}", tau=2.5, speedup=1.88 + k / 100, low=1.8, high=1.9)
           for k in (2, 4)] + [dict(method="linear", label="linear:1", tau=1.6, speedup=1.5, low=1.4, high=1.6)]
    fig = speedup_scatter(pts, "t")
    trace = next(t for t in fig.data if t.meta == "eagle2")
    assert abs(trace.x[1] - trace.x[0]) == pytest.approx(DODGE * 0.9)  # apart by DODGE of the τ span
    assert [c[1] for c in trace.customdata] == [2.5, 2.5]  # the hover keeps the measured τ


def test_calibration_per_depth_legend_says_what_each_bar_counts(runs):
    cal = calibration_table(runs["eagle2"][0])
    names = [t.name for t in depth_figure(cal).data]
    assert "per step" in names[2] and "|" not in names[2]


def test_speedup_scatter_and_acceptance_stack():
    pts = [dict(method="linear", label=f"linear {i}", tau=2.0 + i / 100, speedup=1.5, low=1.4, high=1.6)
           for i in range(4)] + [dict(method="eagle2", label="eagle2 3/2/4", tau=2.7, speedup=1.7, low=1.7, high=1.8)]
    fig = speedup_scatter(pts, "a title " * 30)
    assert [a.text for a in fig.layout.annotations] == [p["label"] for p in pts]  # every point named
    assert "<br>" in fig.layout.title.text  # a long title wraps instead of being cut
    assert [t.meta for t in fig.data if t.meta] == ["linear", "eagle2", "vanilla"]
    p, q = [0.5, 0.3, 0.2], [0.2, 0.5, 0.3]
    fig = acceptance_stack_figure(["a", "b", "c"], p, q, "t")
    by = {t.meta: t for t in fig.data}
    assert [a + r for a, r in zip(by["accepted"].y, by["rejected"].y)] == pytest.approx(p)  # the stack is p
    assert list(by["rejected"].base) == list(by["accepted"].y) and list(by["q"].y) == q
    assert not by["accepted"].name.startswith("target p")  # the green part is min(p, q), the stack is p
    assert "min(p, q)" in by["accepted"].name and "target's p" in by["rejected"].name
    axis = acceptance_stack_figure(["a", "b", "c"], p, q, "t", beta=0.42).layout.xaxis.title.text
    assert "0.70" in axis and "β = 0.42" in axis  # the shown tokens' part, then β over the whole vocabulary
    assert "β =" not in fig.layout.xaxis.title.text  # without β, the shown part is not called β
    with pytest.raises(ValueError, match="one value per token"):
        acceptance_stack_figure(["a"], p, q, "t")


def test_layout_helpers():
    assert water_fill([10, 20, 30], 100) == [10, 20, 30]
    assert water_fill([10, 50, 90], 70) == [10, 30, 30]
    assert spread([0, 1, 10], [4, 4, 4], gap=1) == [0, 5, 10]
    assert fit_lines([Line("a" * 40, 10, short="+4"), Line("p 0.5", 10)], 30)[0].text == "+4"
    cut = fit_lines([Line("abcdefghij" * 3, 10), Line("detail that is long", 10)], 50)
    assert len(cut) == 1 and cut[0].text.endswith("…") and cut[0].width <= 50
    assert wrap("a bb ccc dddd", 30, 10) == ["a bb", "ccc", "dddd"]
    assert legend_rows(["a"] * 3, 900) == 1 and legend_rows(["x" * 40] * 3, 900) == 2
    points = [(100, 100), (102, 101), (101, 99), (300, 100)]
    boxes = place_labels(points, [(60, 14)] * 4)
    assert overlapping_pairs(dict(enumerate(boxes))) == []
    assert not any(b.overlaps(Box(x - 5, y - 5, x + 5, y + 5)) for b in boxes for x, y in points)
    with pytest.raises(ValueError, match="x0 <= x1"):
        Box(1, 0, 0, 1)


def test_some_candidates_are_dropped_at_rerank(runs):
    assert any(len(t["draft"]["candidates"]) > len(t["tree"]["nodes"]) - 1 for t in spec_steps(runs, "wide"))


def test_prefill_and_vanilla_steps_draw_no_tree(runs):
    for tr in [runs["eagle2"][0][0], runs["vanilla"][0][1]]:
        for fig in (tree_figure(tr), mask_figure(tr)):
            assert not fig.data and fig.layout.annotations
        assert len(logits_rows(tr)) == 1


# ---- mask ------------------------------------------------------------------------------------
def test_mask_cells_equal_the_trace(runs):
    for tr in spec_steps(runs, "wide") + [seed_tree_trace()]:
        z, cols, rows = mask_matrix(tr)
        n = len(tr["tree"]["nodes"])
        assert len(z) == n and all(len(r) == n + 1 for r in z) and len(cols) == n + 1 and len(rows) == n
        assert all(r[0] == PREFIX for r in z)
        assert [[int(c == TREE) for c in r[1:]] for r in z] == tr["tree"]["mask"]
        grid = mask_html(tr)  # what the app shows: the same cells as a table
        cells = re.findall(r"<td data-v='(\d)'", grid)
        assert [int(v) for v in cells] == [v for r in z for v in r] and grid.count("<tr data-node=") == n
        fig = mask_figure(tr)
        assert [list(r) for r in fig.data[0].z] == z
        dots = fig.data[1]  # the "·" layer covers exactly the masked cells
        assert len(dots.x) == sum(c == MASKED for r in z for c in r)
        ticks = list(fig.layout.yaxis.ticktext)
        assert ticks[0].startswith("0 ") and len(ticks) == n


# ---- logits ----------------------------------------------------------------------------------
def test_logits_rows_are_shifted_by_one():
    tr = seed_tree_trace()
    rows = logits_rows(tr)
    assert [r["after"] for r in rows] == ["the", "A", "B", "C", "D", "E"]
    assert children(tr, 0) == [1, 2] and children(tr, 1) == [3, 4] and children(tr, 3) == []
    assert [(k["node"], k["verdict"]) for k in rows[0]["children"]] == [(1, "match"), (2, "not compared")]
    assert [(k["node"], k["verdict"]) for k in rows[1]["children"]] == [(3, "miss"), (4, "match")]
    assert [r["consulted"] for r in rows] == [True, True, False, False, True, False]
    html = logits_html(tr)
    assert html.count("<tr data-node=") == 6


def test_logits_table_has_a_row_per_node(runs):
    for tr in spec_steps(runs, "eagle2"):
        rows = logits_rows(tr)
        assert len(rows) == len(tr["tree"]["nodes"])
        assert all(r["top"] == tr["verify"]["top"][r["node"]] for r in rows)
        assert logits_html(tr).count("<tr data-node=") == len(rows)


# ---- walk ------------------------------------------------------------------------------------
def test_seed_tree_walk():
    tr = seed_tree_trace()
    moves = walk_moves(tr)
    assert [(m.get("pointer"), m.get("read"), m.get("child"), m.get("match")) for m in moves[:3]] == [
        ("retrieve_next_token", 0, 1, True), ("retrieve_next_token", 1, 3, False),
        ("retrieve_next_sibling", 3, 4, True)]
    assert moves[-1]["kind"] == "stop" and moves[-1]["reason"].startswith("a leaf")
    assert walk_position(tr, 0) == (0, 1) and walk_position(tr, 2) == (1, 4) and walk_position(tr, 4) == (4, None)
    rows = pointer_rows(tr)
    assert [r["retrieve_next_token"] for r in rows] == [1, 3, 5, -1, -1, -1]
    assert [r["retrieve_next_sibling"] for r in rows] == [-1, 2, -1, 4, -1, -1]
    assert moves_html(tr, 2).count("<li data-move=") == 2
    assert pointer_table_html(tr).count("<tr data-node=") == 6


def test_walk_moves_follow_the_trace(runs):
    for name in ("eagle2", "sampling", "leviathan", "block"):
        for tr in spec_steps(runs, name):
            moves = walk_moves(tr)
            assert len(moves) == len(tr["accept"]["moves"]) + 1
            assert sum(m.get("match", False) for m in moves) == len(tr["accept"]["path"]) - 1
            assert moves[-1]["bonus"] == tr["accept"]["bonus"]
            assert moves_html(tr).count("<li data-move=") == len(moves)


# ---- sampling --------------------------------------------------------------------------------
def test_coin_rows(runs):
    assert all(coin_rows(t) == [] for t in spec_steps(runs, "eagle2"))
    for name in ("sampling", "leviathan"):
        for tr in spec_steps(runs, name):
            rows = coin_rows(tr)
            assert len(rows) == len(tr["accept"]["moves"])
            assert all((r["coin"] < r["threshold"]) == (r["verdict"] == "match") for r in rows)
            assert sampling_html(tr).count("<tr data-node=") == len(rows)
    assert "greedy" in sampling_html(spec_steps(runs, "eagle2")[0])


def test_block_coin_rows_and_the_rule_table(runs):
    """Block keeps a prefix: every draft in it matches whatever its own coin, the prefix's last
    coin fell under its h, no later one did; the page adds each rule's expectation, the block row
    marked as the one that ran, and a target-only tree has no such table."""
    steps = spec_steps(runs, "block")
    assert steps and all(len(tr["chain"]) == 3 for tr in steps)
    for tr in steps:
        rows, kept = coin_rows(tr), len(tr["accept"]["path"]) - 1
        assert [r["verdict"] == "match" for r in rows] == [i < kept for i in range(len(rows))]
        assert all(r["coin"] >= r["threshold"] for r in rows[kept:])
        assert kept == 0 or rows[kept - 1]["coin"] < rows[kept - 1]["threshold"]
        page = sampling_html(tr)
        assert "block (ran)" in page and "leviathan" in page and "target-only" in page
        if tr["accept"]["bonus_from"] == "residual":
            assert "block residual" in page
    assert "E[accepted drafts]" not in sampling_html(spec_steps(runs, "sampling")[0])
    assert "leviathan (ran)" in sampling_html(spec_steps(runs, "leviathan")[0])


# ---- KV --------------------------------------------------------------------------------------
def test_kv_counts(runs):
    for tr in spec_steps(runs, "eagle2") + [seed_tree_trace()]:
        s = kv_summary(tr)
        n, path = len(tr["tree"]["nodes"]), tr["accept"]["path"]
        off_front = sum(p != i for i, p in enumerate(path))
        assert (s["written"], s["kept"], s["rolled_back"], s["moved"]) == (n, len(path), n - len(path), off_front)
        assert s["committed_after"] == s["committed_before"] + len(path)
        by = markers(kv_figure(tr))
        assert len(by["kept"].x) == len(path) and len(by.get("freed", {"x": []})["x"]) == n - len(path)
        assert by["kept"].marker.color == SLOT["kept"].colour
        assert "data-key='rolled_back'" in kv_table_html(tr)
        strips = kv_slots_html(tr)
        assert strips.count("data-status='kept'") == len(path) and strips.count("data-status='freed'") == n - len(path)


def test_kv_labels_say_which_node_each_slot_holds():
    """After the commit slot 12 holds node 4's rows (moved from 14); slot 14, freed, held them."""
    tr = seed_tree_trace()
    labels = dict(zip(tr["kv"]["target"]["written"], slot_labels(tr)))
    assert labels[12].startswith("node 4 ") and "moved here from slot 14" in labels[12]
    assert labels[14].startswith("node 4 ") and "moved to slot 12" in labels[14]
    assert labels[11].startswith("node 1 ") and "moved" not in labels[11]
    assert labels[13].startswith("node 3 ") and "moved" not in labels[13]
    assert "kept 3 (1 moved)" in kv_slots_html(tr)


def test_kv_of_the_seed_tree_draws_every_slot():
    by = markers(kv_figure(seed_tree_trace()))
    assert {k: sum(x is not None for x in t.x) for k, t in by.items()} == \
        {"committed": 0, "kept": 3, "freed": 3, "extend": 2, "scratch": 4}  # committed: a band
    assert all(t.showlegend is not False and SLOT[k].label in t.name for k, t in by.items())  # a legend for each
    strips = kv_slots_html(seed_tree_trace())
    assert {s: strips.count(f"data-status='{s}' data-slot=") for s in ("kept", "freed", "extend", "scratch")} == \
        {"kept": 3, "freed": 3, "extend": 2, "scratch": 4}
    assert "data-status='committed' data-band='10'" in strips


# ---- output ----------------------------------------------------------------------------------
def test_output_tokens_and_provenance(runs):
    for name in ("eagle2", "sampling", "vanilla"):
        traces, request = runs[name]
        toks = output_tokens(traces)
        assert [t["token"] for t in toks] == request.output_ids
        prov = ["bonus" if p == "prefill" else p for p in request.provenance]
        assert [t["provenance"] for t in toks] == prov
        assert [t["tau"] for t in tau_per_step(traces)] == request.accept_lengths
        html = output_html("a prompt", traces)
        assert html.count("data-prov='accepted'") == prov.count("accepted")
        assert html.count("data-prov='bonus'") == prov.count("bonus")


# ---- compare ---------------------------------------------------------------------------------
def test_compare_summary(runs):
    cmp = {name: {"config": RUNS[name][0].describe(), "traces": runs[name][0]}
           for name in ("vanilla", "linear", "eagle2")}
    s = run_summary(cmp["eagle2"]["traces"])
    req = runs["eagle2"][1]
    assert s["tau"] == pytest.approx(sum(req.accept_lengths) / len(req.accept_lengths))
    assert s["tokens"] == len(req.output_ids) and s["target_forwards"] == req.target_forwards
    sp = speedups(cmp)
    assert sp["vanilla"]["measured"] == pytest.approx(1.0) and sp["vanilla"]["predicted"] is None  # no model yet
    assert summary_html(cmp).count("<tr data-method=") == 3 and gap_html(cmp) == ""
    assert "same tokens" in summary_html(cmp)  # greedy speculation is lossless
    model = StepCost(verify=((1, 10.0), (64, 40.0)), draft=((1, 1.0), (64, 3.0)), overhead=Overhead(spec_per_step=2.0),
                     measured="2026-12-06, a test machine")
    for name in cmp:
        cmp[name].update(spec=RUNS[name][0], model=model)
    sp = speedups(cmp)
    assert sp["vanilla"]["predicted"] == pytest.approx(1.0)
    s = run_summary(cmp["eagle2"]["traces"])
    assert sp["eagle2"]["predicted"] == pytest.approx(model.predict(RUNS["eagle2"][0], s["tau"]).speedup)
    rows = {r["method"]: r for r in gap_rows(cmp)}
    assert set(rows) == set(cmp) and rows["eagle2"]["predicted"]["rest"] == 2.0
    assert rows["eagle2"]["measured"]["verify"] == s["verify_ms"]
    assert sum(rows["eagle2"]["gap_ms"].values()) == pytest.approx(rows["eagle2"]["step_measured"]
                                                                   - rows["eagle2"]["step_predicted"])
    assert gap_html(cmp).count("<tr data-method=") == 3 and "a test machine" in gap_html(cmp)
    assert [t.name for t in tau_figure(cmp).data] == list(cmp)
    assert [t.meta for t in tokens_figure(cmp).data] == list(cmp)  # its legend adds each run's measured speed
    assert all(t.name.startswith(f"{t.meta}: ") and "tokens/s" in t.name for t in tokens_figure(cmp).data)
    assert len(cost_figure(cmp, [{"tokens": 1, "ms": 1.0}, {"tokens": 8, "ms": 2.0}]).data) == 4
    roofed = cost_figure(cmp, [{"tokens": 1, "ms": 1.0, "roofline_ms": 0.5}, {"tokens": 8, "ms": 2.0, "roofline_ms": 0.9}])
    assert len(roofed.data) == 5 and list(roofed.data[1].y) == [0.5, 0.9] and "roofline" in roofed.data[1].name


# ---- calibration and the best tree -----------------------------------------------------------
def test_calibration_of_the_seed_tree():
    """Path [0, 1, 4]: nodes 1-4 were tried (parent accepted), node 5 (under B) was not."""
    cal = calibration_table([seed_tree_trace()])
    s = cal["summary"]
    assert (s["steps"], s["nodes"], s["tried"], s["accepted"]) == (1, 5, 4, 2)
    assert s["p_accept_given_tried"] == pytest.approx(0.5) and s["p_accept"] == pytest.approx(0.4)
    prob = {b["lo"]: (b["count"], b["accepted"]) for b in cal["prob_bins"] if b["count"]}
    assert prob == {0.5: (4, 2)}  # every draft prob is 0.5
    score = {b["lo"]: (b["count"], b["accepted"]) for b in cal["score_bins"] if b["count"]}
    assert score == {0.5: (2, 1), 0.2: (3, 1)}  # scores .5 (depth 1) and .25 (depth 2)
    assert s["ece_prob"] == pytest.approx(0.0) and s["ece_score"] == pytest.approx((2 * 0 + 3 * abs(1 / 3 - .25)) / 5)
    d1, d2 = cal["depths"]
    assert (d1["nodes"], d1["tried"], d1["accepted"], d1["reach"]) == (2, 2, 1, 1.0)
    assert (d2["nodes"], d2["tried"], d2["accepted"], d2["reach"]) == (3, 2, 1, 1.0)


@pytest.mark.parametrize("name", ["eagle2", "wide", "sampling", "static"])
def test_calibration_counts_equal_the_traces(runs, name):
    traces, req = runs[name]
    steps = spec_steps(runs, name)
    cal = calibration_table(traces + traces)  # two runs one after the other: steps are not merged
    s = cal["summary"]
    assert s["steps"] == 2 * len(steps) and s["nodes"] == 2 * sum(len(t["tree"]["nodes"]) - 1 for t in steps)
    assert s["accepted"] == 2 * sum(len(t["accept"]["path"]) - 1 for t in steps)  # the walk's, cut or not
    assert sum(b["count"] for b in cal["score_bins"]) == s["nodes"]
    assert sum(b["count"] for b in cal["prob_bins"]) == s["tried"]
    assert sum(b["accepted"] for b in cal["prob_bins"]) == s["accepted"]  # accepted implies tried
    for d in cal["depths"]:
        at = [n for t in steps for n in t["tree"]["nodes"][1:] if n["depth"] == d["depth"]]
        assert d["nodes"] == 2 * len(at)
    fig = reliability_figure(cal)
    series = {t.name: t for t in fig.data}
    assert list(series["perfectly calibrated"].x) == [0, 1]
    filled = [b for b in cal["prob_bins"] if b["count"]]
    assert list(series["draft probability → P(accept | tried)"].y) == [b["rate"] for b in filled]
    assert len(depth_figure(cal).data) == 3
    assert calibration_html(cal).count("<tr data-bin=") == 10


def test_calibration_of_nothing():
    cal = calibration_table([])
    assert cal["summary"]["nodes"] == 0 and cal["summary"]["p_accept"] is None
    assert reliability_figure(cal).layout.annotations  # says why it is empty
    with pytest.raises(ValueError, match="bins must be >= 1"):
        calibration_table([], bins=0)


def test_best_tree_of_the_seed_tree():
    tr = seed_tree_trace()
    rows = greedy_continuation(tr)
    assert [(r["status"], r.get("node")) for r in rows] == [("covered", 1), ("covered", 4), ("not drafted", None)]
    # scores: A .5, B .5, C .25, D .25, E .25 -> best-first 1, 2, 3, 4, 5; D needs the 4 best
    assert [t["tau"] for t in budget_taus(tr)] == [2, 2, 2, 3, 3]
    tr["verify"]["top"][0] = [{"token": 102, "text": "B", "prob": 0.9}]  # target: root -> B
    tr["verify"]["top"][2] = [{"token": 99, "text": "F", "prob": 0.8}]  # B -> F, dropped at rerank
    rows = greedy_continuation(tr)
    assert [r["status"] for r in rows] == ["covered", "dropped"]
    assert rows[-1]["candidate"] == 5 and rows[-1]["needed_D"] == 7  # 6th best score: kept from D = 7
    html = continuation_html(tr)
    assert html.count("<tr data-depth=") == 3 and "data-status='unknown'" in html
    fig = best_tree_figure(tr)
    assert {t.meta for t in fig.data} >= {"continuation", "left"}


@pytest.mark.parametrize("name", ["eagle2", "wide", "static"])
def test_best_tree_greedy_matches_the_walk(runs, name):
    """At temperature 0 the covered continuation is the accepted path, and the full budget gives τ."""
    for tr in spec_steps(runs, name):
        rows = greedy_continuation(tr)
        assert [r["node"] for r in rows if r["status"] == "covered"] == tr["accept"]["path"][1:]
        assert rows[-1]["token"] == tr["accept"]["bonus"]["token"]
        taus = budget_taus(tr)
        assert taus[-1] == {"D": len(tr["tree"]["nodes"]), "tau": tr["accept_length"]}
        assert all(a["tau"] <= b["tau"] for a, b in zip(taus, taus[1:]))  # more budget never hurts here
        assert list(budget_figure(tr).data[0].y) == [t["tau"] for t in taus]


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="kaleido needs Chromium (Debian package chromium)")
def test_calibration_figures_as_png(tmp_path):
    from workbench.bench.calibration import write_figures

    paths = write_figures(calibration_table([seed_tree_trace()]), tmp_path)
    assert [p.name for p in paths] == ["reliability.png", "calibration-depth.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000 for p in paths)


def test_png_without_a_browser_says_what_to_install(monkeypatch, tmp_path):
    from workbench.viz import png

    monkeypatch.delenv("BROWSER_PATH", raising=False)
    monkeypatch.setattr(png, "CHROMIUM", Path("/nonexistent/chromium"))
    monkeypatch.setattr(png.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="chromium"):
        png.write_png(reliability_figure(calibration_table([])), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


RECTS = "es => es.map(e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })"


@pytest.mark.browser
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Chromium (Debian package chromium)")
@pytest.mark.parametrize("name", ["default", "60/6/10"])
def test_drawn_tree_labels_do_not_overlap_in_a_browser(wide_traces, tmp_path, name):
    """The layout's text widths are estimates: measure the labels Chromium actually draws (the
    page the app and the notebooks show) and check that no two overlap and none leaves the figure."""
    sync_api = pytest.importorskip("playwright.sync_api")
    tr = wide_traces[name][0]
    figs = {"tree": tree_figure(tr), "compact": tree_figure(tr, compact=True), "best": best_tree_figure(tr)}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1000, "height": 800})
        for kind, fig in figs.items():
            path = tmp_path / f"{kind}.html"
            fig.write_html(path, include_plotlyjs=True)
            page.goto(path.as_uri())
            page.wait_for_selector(".annotation-text")
            rects = page.eval_on_selector_all(".annotation-text", RECTS)
            width = page.eval_on_selector(".main-svg", "e => e.getBoundingClientRect().right")
            assert len(rects) == len(fig.layout.annotations) > 0
            boxes = {i: Box(x0 + 0.5, y0 + 0.5, x1 - 0.5, y1 - 0.5) for i, (x0, y0, x1, y1) in enumerate(rects)}
            assert overlapping_pairs(boxes) == [], kind
            assert max(r[2] for r in rects) <= width, kind
        browser.close()


def test_png_renders_again_when_kaleidos_page_was_not_ready(monkeypatch, tmp_path):
    from workbench.viz import png

    class Flaky:
        calls = 0

        def write_image(self, path, **kw):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("ReferenceError: kaleido_scopes is not defined")
            Path(path).write_bytes(b"\x89PNG")

    monkeypatch.setattr(png, "use_browser", lambda: "chromium")
    assert png.write_png(Flaky(), tmp_path / "x.png").read_bytes() == b"\x89PNG" and Flaky.calls == 2

    class Broken:
        def write_image(self, path, **kw):
            raise ValueError("width must be positive")

    with pytest.raises(ValueError, match="width must be positive"):  # any other error: raised at once
        png.write_png(Broken(), tmp_path / "y.png")
