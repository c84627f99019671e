"""How long a Step takes in the app: ``python -m experiments.app_latency [--steps 20] [--browser]``.

Loads the app's default model (dtype auto, the default head) and warms up as the app does, starts a
run with the page's default inputs and presses Step ``--steps`` times (restarting the run when
it finishes). Each Step is timed as the app does it:

* default: the Step handler's work: one engine step + building every view + serialising them
  to JSON (what Gradio sends to the page; the raw trace is sent only when asked for);
* ``--browser``: in chromium (Playwright, Debian's ``/usr/bin/chromium``), from the click on
  Step to the moment the tree figure shows the new step: server, network and plotly drawing.

Prints median and p90 ms. A benchmark, not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from workbench.errors import ArgumentParser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def handler_times(wb, steps: int) -> tuple[list[float], list[float]]:
    """(ms per Step: engine step + views + JSON, ms of that in the engine step), with the page's
    default inputs."""
    from workbench.app.state import Session, Settings
    from workbench.app.views import render

    settings, session, times, engine = Settings(prompt="Tell me about Paris."), None, [], []
    while len(times) < steps:
        if session is None or (session.engine.done and session.at_end):
            session = Session.start(wb, settings)
            session.step()  # the prefill is a different kind of step: not counted
        t0 = time.perf_counter()
        session.step()
        engine.append((time.perf_counter() - t0) * 1e3)
        values = render(session, wb)
        for v in values:  # what Gradio's postprocess does with each output
            v.to_json() if hasattr(v, "to_json") else json.dumps(v) if isinstance(v, (dict, str)) else None
        times.append((time.perf_counter() - t0) * 1e3)
    return times, engine


def browser_times(wb, steps: int, port: int = 7899) -> list[float]:
    """ms from clicking Step to the tree figure titled with the new step, in chromium (the tree is
    the one plotly figure a Step redraws, and the last view to be drawn)."""
    from playwright.sync_api import sync_playwright

    from workbench.app.ui import build_app, launch

    demo = build_app(wb)
    launch(demo, port=port, block=False)
    times = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/")
            page.click("#step-btn")  # prefill: not counted
            page.wait_for_function("document.querySelector('#summary').innerText.includes('Step 1')")
            for n in range(2, steps + 2):
                t0 = time.perf_counter()
                page.click("#step-btn")
                page.wait_for_function(
                    f"(() => {{ const t = document.querySelector('#tree-plot .gtitle');"
                    f" return t && t.textContent.startsWith('Step {n}:') ||"
                    f" document.querySelector('#summary').innerText.includes('finished'); }})()", timeout=60000)
                times.append((time.perf_counter() - t0) * 1e3)
            browser.close()
    finally:
        demo.close()
    return times


def main(argv=None) -> None:
    """Parse the options, load, time, print."""
    ap = ArgumentParser(prog="python -m experiments.app_latency", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="steps timed")
    ap.add_argument("--browser", action="store_true", help="time in chromium, click to drawn figure")
    ap.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"], help="the target's dtype")
    args = ap.parse_args(argv)
    from workbench.app.load import load_workbench

    wb, _ = load_workbench(dtype=args.dtype)
    times, engine = (browser_times(wb, args.steps), None) if args.browser else handler_times(wb, args.steps)
    where = "click to drawn views, chromium" if args.browser else "engine step + views + JSON"
    print(f"Step latency ({where}; {wb.target_dir.name} {args.dtype}, draft head {wb.draft_source}, default "
          f"inputs, {len(times)} steps, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs): "
          f"median {statistics.median(times):.0f} ms, p90 {_p90(times):.0f} ms")
    if engine:
        views = [t - e for t, e in zip(times, engine)]
        print(f"  of which the engine step: median {statistics.median(engine):.0f} ms; views + JSON: median "
              f"{statistics.median(views):.0f} ms, p90 {_p90(views):.0f} ms")


def _p90(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=10)[-1]


if __name__ == "__main__":
    main()
