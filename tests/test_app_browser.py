"""End to end in a real browser (Playwright driving Debian's chromium): open the page, enter a
prompt, press Step three times, check that the tree, mask, logits, walk, KV and output views show
what the engine's trace of that step holds, that the Best tree and Calibration tabs show what
those traces hold, open Compare and check its static row and tree against a static run, pick the
n-gram draft and step with it, save screenshots, and check that no request of the page leaves
127.0.0.1 (no font, script or image from elsewhere). At 1366×768: the first screen is the prompt,
Step and (after Step) the tree and the status line, with the settings folded; a bad field is
named and outlined in view; autoplay stops when unticked, on Reset and at the run's end.

The expected trace comes from a separate run of the same settings (greedy decoding is
deterministic). Environment:

* ``WORKBENCH_SCREENSHOTS=docs/screenshots`` saves the screenshots there (else a temp dir);
* ``WORKBENCH_BROWSER_MODEL=default`` serves the real default model and head in bf16 (for the
  README's screenshots) instead of the tiny random model; the prompt is then the examples' math
  word problem, whose step 3 accepts a path of several drafts (the README's first screenshot).
"""

import os
import re
import time
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} missing (Debian package chromium)"),
              pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]
sync_api = pytest.importorskip("playwright.sync_api")

REAL = os.environ.get("WORKBENCH_BROWSER_MODEL") == "default"
MATH = "A bakery sells muffins for $3 each"  # the start of the examples' math word problem
STEPS = 3
LAPTOP = {"width": 1366, "height": 768}


def prompt() -> str:
    """The prompt the tests type (the real model: the math word problem, which the head drafts well)."""
    if not REAL:
        return "tell me about the cat"
    from workbench.app.ui import load_examples

    return next(e["prompt"] for e in load_examples() if e["prompt"].startswith(MATH))


PROMPT = prompt()


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """(url, Workbench) of an app served in this process on a free port."""
    import socket

    from workbench.app.ui import build_app, launch

    if REAL:
        from workbench.app.load import load_workbench

        wb, info = load_workbench()
    else:
        from workbench.testing.tiny import make_tiny_app_model
        from workbench.pipeline import Workbench

        wb = Workbench.load(target=str(make_tiny_app_model(tmp_path_factory.mktemp("tiny-app"), seed=1)),
                            draft="random:1", dtype="fp32")
        info = "tiny random test model"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = build_app(wb, info)
    launch(demo, port=port, block=False)
    yield f"http://127.0.0.1:{port}/", wb
    demo.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    out = Path(os.environ.get("WORKBENCH_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def expected_trace(wb) -> dict:
    """Step ``STEPS`` of the page's default inputs with PROMPT, decoded outside the app."""
    from workbench.app.state import Session, Settings

    session = Session.start(wb, Settings(prompt=PROMPT))
    for _ in range(STEPS):
        session.step()
    return session.traces


def save(page, shots: Path, name: str, selectors: list[str]) -> None:
    """Screenshot the box around ``selectors``, stored as a 256-colour PNG (small for the README)."""
    page.evaluate("window.scrollTo(0, 0)")  # bounding boxes are viewport-relative: make them page-relative
    boxes = [page.locator(s).first.bounding_box() for s in selectors]
    x0, y0 = min(b["x"] for b in boxes), min(b["y"] for b in boxes)
    x1, y1 = max(b["x"] + b["width"] for b in boxes), max(b["y"] + b["height"] for b in boxes)
    path = shots / f"{name}.png"
    clip = dict(x=x0 - 8, y=y0 - 8, width=x1 - x0 + 16, height=y1 - y0 + 16)
    page.screenshot(path=str(path), full_page=True, clip=clip)
    quantize(path)


def quantize(path: Path) -> None:
    """Store ``path`` as a 256-colour PNG (small for the README), when Pillow is there."""
    try:
        from PIL import Image
    except ImportError:
        return
    Image.open(path).convert("RGB").quantize(colors=256).save(path, optimize=True)


def open_page(p, url: str, timeout_ms: int = 120_000):
    """Chromium at 1366×768 on ``url``: (browser, page), the page waiting up to ``timeout_ms``."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport=LAPTOP)
    page.set_default_timeout(timeout_ms)
    page.goto(url)
    return browser, page


def plot_data(page, elem_id: str) -> list[dict]:
    return page.evaluate(f"""() => document.querySelector('#{elem_id} .js-plotly-plot').data.map(t => (
        {{meta: t.meta || null, n: (t.x || []).length, keys: t.customdata || [], z: t.z || null}}))""")


def rows(page, selector: str, attr: str) -> list[str]:
    return page.eval_on_selector_all(selector, f"els => els.map(e => e.getAttribute('{attr}'))")


def test_step_views_match_the_trace_and_compare(app, shots):
    url, wb = app
    traces = expected_trace(wb)
    tr = traces[-1]
    assert tr["kind"] == "spec"
    n, path = len(tr["tree"]["nodes"]), tr["accept"]["path"]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=LAPTOP)
        page.set_default_timeout(120_000)
        requests = []  # every request the page makes, to check that none leaves this machine
        page.on("request", lambda r: requests.append(r.url))
        page.goto(url)
        page.fill("#prompt textarea", PROMPT)
        for step in range(1, STEPS + 1):
            page.click("#step-btn")
            page.wait_for_function(f"document.querySelector('#summary').innerText.includes('Step {step} of')")
        page.wait_for_function(f"(document.querySelector('#tree-plot .gtitle') || {{}}).textContent"
                               f"?.startsWith('Step {STEPS}:')")

        assert "draft: EAGLE head" in page.inner_text("#summary")  # the step header names the draft source
        tree = {t["meta"]: t for t in plot_data(page, "tree-plot") if t["meta"]}
        assert sum(tree[s]["n"] for s in ("root", "accepted", "missed", "unreached") if s in tree) == n
        assert sorted(int(k) for k in tree.get("accepted", {"keys": []})["keys"]) == sorted(path[1:])
        assert tree["bonus"]["n"] == 1
        cells = [int(v) for v in rows(page, "#mask-view td[data-v]", "data-v")]
        assert [cells[i * (n + 1) + 1 : (i + 1) * (n + 1)] for i in range(n)] == tr["tree"]["mask"]
        assert len(rows(page, "#kv-slots [data-status='freed']", "data-slot")) == n - len(path)
        page.get_by_text("This step's trace (JSON)").click()  # open the accordion: the raw trace comes on demand
        page.click("#trace-btn")
        page.wait_for_function("document.querySelector('#trace-json').innerText.includes('retrieve_next_token')")
        assert rows(page, "#logits-view tr[data-node]", "data-consulted") == [str(int(i in path)) for i in range(n)]
        statuses = rows(page, "#walk-pointers tr[data-node]", "data-status")
        assert [i for i, s in enumerate(statuses) if s == "accepted"] == sorted(path[1:]) and len(statuses) == n
        assert len(rows(page, "#walk-moves li[data-move]", "data-kind")) == len(tr["accept"]["moves"]) + 1
        counts = page.eval_on_selector_all("#kv-table tr[data-key] td:last-child", "es => es.map(e => e.innerText)")
        kv = dict(zip(rows(page, "#kv-table tr[data-key]", "data-key"), counts))
        assert (kv["written"], kv["kept"], kv["rolled_back"]) == (str(n), str(len(path)), str(n - len(path)))
        accepted = sum(len(t["accept"]["accepted"]) for t in traces if t["kind"] == "spec")
        assert len(rows(page, "#output-view span[data-prov='accepted']", "data-step")) == accepted

        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(shots / "step.png"))  # the first screen after Step 3, as a user sees it
        quantize(shots / "step.png")
        save(page, shots, "tree", ["#tree-plot"])
        save(page, shots, "mask-logits", ["#mask-view", "#logits-view"])
        save(page, shots, "walk", ["#walk-pointers", "#walk-moves"])
        save(page, shots, "kv", ["#kv-slots", "#kv-table"])

        page.get_by_role("tab", name="Best tree").click()  # drawn when opened, for the step on screen
        page.wait_for_function(f"(document.querySelector('#best-plot .gtitle') || {{}}).textContent"
                               f"?.startsWith('Step {STEPS}:')")
        best = {t["meta"]: t for t in plot_data(page, "best-plot") if t["meta"]}
        assert best["left"]["keys"] == ["not drafted"] or best["left"]["keys"] == ["dropped"]
        assert sorted(int(k) for k in best.get("accepted", {"keys": []})["keys"]) == sorted(path[1:])
        save(page, shots, "best-tree", ["#best-plot", "#best-budget"])

        check_calibration_tab(page, traces)
        save(page, shots, "calibration", ["#calibration-plot", "#calibration-depth"])

        page.get_by_role("tab", name="Compare").click()
        page.fill("#compare-max-new input", "16" if REAL else "8")
        page.click("#compare-btn")
        page.wait_for_function("document.querySelector('#compare-status').innerText.startsWith('Done')",
                               timeout=600_000)
        page.wait_for_selector("#compare-tree-1 .gtitle")
        methods = rows(page, "#compare-summary [data-table='summary'] tr[data-method]", "data-method")
        assert methods == ["vanilla", "linear", "linear (same verify budget)", "eagle2", "static"]
        check_compare_static(page, wb, 16 if REAL else 8)
        check_compare_stops(page)
        save(page, shots, "compare", ["#compare-summary", "#compare-tau", "#compare-tokens"])
        save(page, shots, "compare-cost", ["#compare-cost", "#compare-tree-3"])
        save(page, shots, "compare-static", ["#compare-tree-1", "#compare-tree-2"])
        check_draft_selector(page)
        browser.close()
    assert requests and [u for u in requests if not u.startswith(("http://127.0.0.1:", "data:", "blob:"))] == []


def check_calibration_tab(page, traces: list[dict]) -> None:
    """The session's calibration (steps 1..STEPS) equals the table computed from the traces."""
    from workbench.analysis.calibration import calibration_table

    cal = calibration_table(traces)
    page.get_by_role("tab", name="Calibration").click()
    page.wait_for_selector("#calibration-table tr[data-bin]")
    got = {r: page.eval_on_selector_all("#calibration-table tr[data-bin]", f"es => es.map(e => +e.dataset['{r}'])")
           for r in ("probCount", "probAccepted", "scoreCount", "scoreAccepted")}
    assert got["probCount"] == [b["count"] for b in cal["prob_bins"]]
    assert got["probAccepted"] == [b["accepted"] for b in cal["prob_bins"]]
    assert got["scoreCount"] == [b["count"] for b in cal["score_bins"]]
    assert got["scoreAccepted"] == [b["accepted"] for b in cal["score_bins"]]
    series = page.evaluate("""() => document.querySelector('#calibration-plot .js-plotly-plot').data.map(
        t => ({name: t.name, y: t.y}))""")
    named = {t["name"]: t["y"] for t in series}
    assert named["perfectly calibrated"] == [0, 1]
    rates = named["draft probability → P(accept | tried)"]
    assert rates == pytest.approx([b["rate"] for b in cal["prob_bins"] if b["count"]])
    depths = page.evaluate("() => document.querySelector('#calibration-depth .js-plotly-plot').data[0].x")
    assert depths == [d["depth"] for d in cal["depths"]]
    from workbench.app.calibration import shipped_calibration

    bench = shipped_calibration()  # the benchmark's view of the shipped head, drawn from its JSON
    if bench is not None:
        counts = page.eval_on_selector_all("#calibration-bench-table tr[data-bin]", "es => es.map(e => +e.dataset.probCount)")
        assert counts == [b["count"] for b in bench["table"]["prob_bins"]]
        names = page.evaluate("() => document.querySelector('#calibration-bench-plot .js-plotly-plot').data.map(t => t.name)")
        assert "perfectly calibrated" in names and len(names) == 3


def check_draft_selector(page) -> None:
    """Picking the n-gram draft starts a new run drafted by it, named in the step header."""
    page.get_by_role("tab", name="Step through").click()
    page.click("#settings")  # the draft source is among the settings, folded away until opened
    page.get_by_label("n-gram (prompt lookup)").check()
    page.click("#step-btn")
    page.wait_for_function("document.querySelector('#summary').innerText.includes('Step 1 of 1')")
    page.click("#step-btn")
    page.wait_for_function("document.querySelector('#summary').innerText.includes('Step 2 of 2')")
    assert "draft: n-gram (prompt lookup, ngram:1-12)" in page.inner_text("#summary")


def check_compare_stops(page) -> None:
    """The stop-cause bar at 1366 px: one bar per speculative run, its segments adding up to that
    run's speculative steps in the table beside it, and the bar drawn within the page's width."""
    names = rows(page, "#compare-summary [data-table='stops'] tr[data-method]", "data-method")
    steps = dict(zip(names, map(int, rows(page, "#compare-summary [data-table='stops'] tr[data-method]", "data-steps"))))
    bars = page.evaluate("() => document.querySelector('#compare-stops .js-plotly-plot').data"
                         ".map(t => ({y: t.y, x: t.x}))")
    totals: dict[str, int] = {}
    for bar in bars:
        for name, x in zip(bar["y"], bar["x"]):
            totals[name] = totals.get(name, 0) + x
    assert steps and totals == steps, (totals, steps)
    box = page.locator("#compare-stops").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= LAPTOP["width"], box


def check_compare_static(page, wb, max_new: int) -> None:
    """The static row and the static tree at step 2 equal a static run of the same settings."""
    from workbench.app.compare import decode
    from workbench.app.state import Settings
    from workbench.engine.config import SpecConfig
    from workbench.viz.compare import run_summary

    spec, sampling, ids, _ = Settings(prompt=PROMPT).build(wb)
    traces = decode(wb, SpecConfig.static(spec.num_draft_tokens), sampling=sampling, ids=ids, max_new=max_new)
    tau = page.get_attribute("#compare-summary tr[data-method='static']", "data-tau")
    forwards = page.get_attribute("#compare-summary tr[data-method='static']", "data-forwards")
    s = run_summary(traces)
    assert tau == f"{s['tau']:.2f}" and forwards == str(s["target_forwards"])
    step2 = traces[1]
    tree = {t["meta"]: t for t in plot_data(page, "compare-tree-2") if t["meta"]}
    assert sum(tree[k]["n"] for k in ("root", "accepted", "missed", "unreached") if k in tree) == \
        len(step2["tree"]["nodes"]) == spec.num_draft_tokens
    assert sorted(int(k) for k in tree.get("accepted", {"keys": []})["keys"]) == sorted(step2["accept"]["path"][1:])
    taus = page.evaluate("""() => document.querySelector('#compare-tau .js-plotly-plot').data.map(
        t => ({name: t.name, y: t.y}))""")
    static_tau = next(t["y"] for t in taus if t["name"] == "static")
    assert static_tau == [t["accept_length"] for t in traces if t["kind"] != "prefill"]


def in_view(page, selector: str) -> bool:
    """Is the whole box of ``selector`` inside the viewport (no scrolling needed to see it)?"""
    box, size = page.locator(selector).first.bounding_box(), page.viewport_size
    return box is not None and box["y"] >= 0 and box["x"] >= 0 and box["y"] + box["height"] <= size["height"] \
        and box["x"] + box["width"] <= size["width"]


def recorded(page) -> int:
    """Steps recorded in the run on screen (0 before the first)."""
    found = re.search(r"of (\d+) recorded", page.inner_text("#summary"))
    return int(found.group(1)) if found else 0


def test_the_first_screen_is_the_step(app, shots):
    """At 1366×768 a first visit sees the prompt, Step and, once stepped, the tree and the status
    line without scrolling; the settings are folded (their label shows the defaults); a bad
    field is named in the status line, outlined and shown."""
    url, _ = app
    with sync_api.sync_playwright() as p:
        browser, page = open_page(p, url, timeout_ms=120_000)
        page.wait_for_selector("#step-btn")
        assert in_view(page, "#prompt") and in_view(page, "#step-btn") and in_view(page, "#autoplay")
        assert not page.locator("#num-draft-tokens").is_visible()  # folded away, the values in the label:
        assert "eagle2 · num_steps 5 · topk 4 · num_draft_tokens 8 · greedy" in page.inner_text("#settings")
        page.fill("#prompt textarea", PROMPT)
        for step in (1, 2):
            page.click("#step-btn")
            page.wait_for_function(f"document.querySelector('#summary').innerText.includes('Step {step} of')")
        page.wait_for_function("(document.querySelector('#tree-plot .gtitle') || {}).textContent?.startsWith('Step 2:')")
        status = page.inner_text("#status")  # what the press did, next to the button: step 2 and why it stopped
        assert status.startswith(("Step 2 accepted ", "Nothing accepted at step 2:")) and "stopped" in status or \
            "Nothing accepted" in status, status
        for selector in ("#status", "#summary", "#step-btn", "#output-tail"):
            assert in_view(page, selector), selector
        tree = page.locator("#tree-plot").bounding_box()  # its title, legend and first nodes: its foot may be below
        assert 0 <= tree["y"] and tree["y"] + 250 <= LAPTOP["height"], tree
        page.click("#settings")
        page.fill("#num-draft-tokens input", "800")
        page.click("#settings .label-wrap")  # fold the settings again: the error opens them
        page.click("#step-btn")
        page.wait_for_function("document.querySelector('#status').innerText.startsWith('⚠️')")
        status = page.inner_text("#status")
        assert "num_draft_tokens must be in 2..69" in status and "Check num_draft_tokens (under Settings › Method" in status
        assert in_view(page, "#status") and page.locator("#num-draft-tokens").is_visible()
        outline = "id => { const s = getComputedStyle(document.getElementById(id)); return s.outlineStyle + s.outlineColor; }"
        assert page.evaluate(outline, "num-draft-tokens") == "solidrgb(213, 94, 0)"  # outlined: Okabe-Ito vermillion
        assert page.evaluate(outline, "topk").startswith("none")  # and no other field
        page.screenshot(path=str(shots / "error.png"))
        quantize(shots / "error.png")
        browser.close()


def test_autoplay_stops_when_unticked_on_reset_and_at_the_end(app):
    from workbench.app.ui import AUTOPLAY_S

    url, _ = app
    quiet = 2 * AUTOPLAY_S + 1.0  # long enough for two more ticks, were autoplay still on
    with sync_api.sync_playwright() as p:
        browser, page = open_page(p, url, timeout_ms=60_000)
        page.fill("#prompt textarea", PROMPT)
        page.check("#autoplay input")
        page.wait_for_function("/of [3-9]\\d* recorded/.test(document.querySelector('#summary').innerText)")
        page.uncheck("#autoplay input")  # mid-run
        time.sleep(AUTOPLAY_S)  # a tick under way may still finish its step
        stopped = recorded(page)
        time.sleep(quiet)
        assert recorded(page) == stopped and not page.is_checked("#autoplay input")

        page.check("#autoplay input")
        page.wait_for_function(f"!document.querySelector('#summary').innerText.includes('of {stopped} recorded')")
        page.click("#reset-btn")
        page.wait_for_function("document.querySelector('#summary').innerText.includes('No step yet')")
        time.sleep(quiet)
        assert page.inner_text("#summary").startswith("No step yet") and not page.is_checked("#autoplay input")

        page.click("#settings")
        page.fill("#max-new-tokens input", "6")
        page.check("#autoplay input")
        page.wait_for_function("document.querySelector('#summary').innerText.includes('finished')")
        page.wait_for_function("!document.querySelector('#autoplay input').checked")  # it unticks itself
        end = recorded(page)
        time.sleep(quiet)
        assert recorded(page) == end
        browser.close()


def load_traces(page, elem_id: str) -> list[dict]:
    return page.evaluate(f"""() => document.querySelector('#{elem_id} .js-plotly-plot').data.map(t => (
        {{meta: t.meta || null, name: t.name || null, x: t.x || [], y: t.y || [], on: t.customdata || []}}))""")


def test_load_tab_draws_each_step_then_the_bars_and_runs_one_load_at_a_time(app):
    """A small closed loop: the step chart (batch, speculation on/off, τ per step) and the bars
    against off; bad input in the status line; while one session's load runs, another session's
    Run load is refused with a message and its Step still works."""
    from workbench.app.load_tab import BUSY

    url, _ = app
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=LAPTOP)
        page.set_default_timeout(120_000)
        page.goto(url, wait_until="load")
        page.get_by_role("tab", name="Load").click()
        page.fill("#load-value input", "2")
        page.fill("#load-requests input", "4")
        page.fill("#load-max-new input", "8")
        page.fill("#load-policies textarea", "off,eagle2:4/3/2")
        page.click("#load-btn")
        page.wait_for_function("document.querySelector('#load-status').innerText.startsWith('Done')")
        page.wait_for_selector("#load-bars .js-plotly-plot")
        steps = {(t["meta"], t["name"]): t for t in load_traces(page, "load-steps")}
        assert {n for _, n in steps} == {"off", "eagle2:4/3/2"}
        assert set(steps[("speculative", "off")]["on"]) == {0} and set(steps[("speculative", "eagle2:4/3/2")]["on"]) == {1}
        assert 1 <= max(steps[("batch", "eagle2:4/3/2")]["y"]) <= 2
        assert all(y is None for y in steps[("tau", "off")]["y"]) and max(steps[("tau", "eagle2:4/3/2")]["y"]) >= 1
        bars = {t["meta"]: t for t in load_traces(page, "load-bars")}
        assert bars["throughput_tok_s"]["x"] == bars["tpot_ms_p50"]["x"] == ["off", "eagle2:4/3/2"]
        assert rows(page, "#load-table tr[data-policy]", "data-equal") == ["yes", "yes"]

        page.get_by_label("open loop: rate (requests per second)").check()
        page.fill("#load-value input", "0")
        page.click("#load-btn")
        page.wait_for_function("document.querySelector('#load-status').innerText.startsWith('⚠️')")
        assert "a rate must be > 0 requests per second, got 0" in page.inner_text("#load-status")

        page.fill("#load-value input", "0.25")  # arrivals about 4 s apart: the load outlasts a second page's step
        page.fill("#load-policies textarea", "off")
        page.click("#load-btn")
        page.wait_for_function("document.querySelector('#load-status').innerText.startsWith('Running')")
        other = browser.new_page(viewport=LAPTOP)  # a second session
        other.set_default_timeout(120_000)
        other.goto(url, wait_until="load")
        other.get_by_role("tab", name="Load").click()
        other.click("#load-btn")
        other.wait_for_function("document.querySelector('#load-status').innerText.startsWith('⚠️')")
        assert BUSY.split(" (")[0] in other.inner_text("#load-status")
        other.get_by_role("tab", name="Step through").click()
        other.fill("#prompt textarea", PROMPT)
        other.click("#step-btn")  # stepping in another session keeps working
        other.wait_for_function("document.querySelector('#summary').innerText.includes('Step 1 of')")
        assert page.inner_text("#load-status").startswith("Running")  # the first load is still under way
        page.wait_for_function("document.querySelector('#load-status').innerText.startsWith('Done')")
        browser.close()


def test_a_step_keeps_the_output_and_the_tree_in_view_and_replays_the_tree(app):
    """At 1366×768, after Steps with the settings left open: the settings fold, the output's end
    (beside Step) and the tree's top are in view, and the output strip ends with the last step's
    tokens; the replay slider's first stop redraws the tree as level 1 of its growth."""
    url, _ = app
    with sync_api.sync_playwright() as p:
        browser, page = open_page(p, url, timeout_ms=120_000)
        page.fill("#prompt textarea", PROMPT)
        page.click("#settings")  # opened, and left open
        page.wait_for_selector("#num-draft-tokens", state="visible")
        for step in (1, 2, 3):
            page.click("#step-btn")
            page.wait_for_function(f"document.querySelector('#summary').innerText.includes('Step {step} of')")
        page.wait_for_selector("#num-draft-tokens", state="hidden")  # the Step folded the settings
        assert in_view(page, "#output-tail") and in_view(page, "#step-btn") and in_view(page, "#status")
        tree = page.locator("#tree-plot").bounding_box()
        assert 0 <= tree["y"] and tree["y"] + 250 <= LAPTOP["height"], tree  # its title, legend and first nodes
        last = page.eval_on_selector_all("#output-tail [data-step]", "els => els.map(e => e.dataset.step)")
        recorded_last = page.eval_on_selector_all("#output-view [data-step]", "els => els.map(e => e.dataset.step)")
        assert last and last[-1] == recorded_last[-1] == str(STEPS)  # the strip ends where the output does
        page.locator("#replay-slider input[type=range]").scroll_into_view_if_needed()
        box = page.locator("#replay-slider input[type=range]").bounding_box()
        page.mouse.click(box["x"] + 2, box["y"] + box["height"] / 2)  # the first stop: growth, level 1
        page.wait_for_function("(document.querySelector('#tree-plot .gtitle') || {}).textContent?.includes("
                               "'growth: level 1')")
        assert page.input_value("#replay-slider input[type=range]") == "0"
        browser.close()
