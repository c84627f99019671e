"""The Load tab: a bounded load (a minute at most) on the loaded model, watched as it runs.

Pick a closed loop (a concurrency) or an open loop (a rate: Poisson arrivals per second), the
policies (in the grammar of ``generate --policy``), how many requests and how long, and press
*Run load*. The policies run one after another, each on a fresh engine after a short untimed
warm-up, for at most its share of what is left of ``MAX_SECONDS`` (the table says how many
requests the time cut), on the Spec-Bench quick questions. The chart shows every decode step as
it ends (running batch, speculation on or off, τ); then bars put each policy's tokens/s and TPOT
p50 beside ``off``'s. The runs go through the benchmark's own driver (``workbench/measure/load.py``),
in one pass, not interleaved rounds: a first look, not a measurement to quote.

One load at a time per server (a load takes the CPU): a session that asks while another's runs is
told so in its status line; every other event still runs. The lock belongs to the page
``build_load_tab`` builds and is released when the run ends, fails or is cancelled.
"""

from __future__ import annotations

import html
import threading
import time

import gradio as gr

from workbench.app.views import error
from workbench.measure import specbench
from workbench.measure.load import WARMUP, WARMUP_TOKENS, LoadRun, check_load, equal_outputs, round_figures, run_load
from workbench.engine.policy import KINDS, parse_policies
from workbench.measure.load_spec import Load
from workbench.measure.step_cost import policy_costs
from workbench.viz.html import note, table
from workbench.viz.load import bars_figure, steps_figure
from workbench.viz.style import empty_figure
from workbench.viz.tokens import or_dash

MAX_SECONDS = 60  # one press of Run load, all policies together
MAX_REQUESTS = 64
MAX_NEW_TOKENS = 256
REDRAW_S = 0.5  # the live chart is redrawn at most this often
BUSY = ("Another session is running a load right now (a load takes the CPU, for up to a minute): "
        "try again when it has finished.")
MODES = [("closed loop: concurrency (requests in flight)", "closed"), ("open loop: rate (requests per second)", "open")]
OUTPUTS = ("status", "steps", "bars", "table")
INTRO = ("Run requests that come and go against the loaded model under each speculation policy, and watch each "
         "decode step: how many requests run, whether the policy speculates, what it accepts. Policies, as "
         "`python -m workbench generate --policy` takes them: " + "; ".join(f"`{k.grammar}` ({k.about})" for k in KINDS)
         + "; or a method name alone (`eagle2:4/3/2`, `linear:3`: one fixed setting). `auto`'s first use times this "
         "CPU for a few seconds. Separate policies with `;` when one holds commas. "
         f"At most {MAX_SECONDS} s per run, shared by the policies; one load at a time on this server.")


def _whole(name: str, value, lo: int, hi: int | None) -> int:
    """A number box's value as a whole number in lo..hi, or ValueError naming the box."""
    if value is None or float(value) != int(float(value)) or not (lo <= value and (hi is None or value <= hi)):
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be a whole number in {span}, got {value}")
    return int(value)


def parse_inputs(mode: str, value, *, policies: str, requests, max_new, kv_slots) -> tuple:
    """(load, policies, max_new_tokens, kv_slots or None) from the tab's boxes; ValueError with
    the reason, before any model work."""
    if value is None:
        raise ValueError("give a concurrency or a rate")
    load = Load(mode, float(value), _whole("requests", requests, 1, MAX_REQUESTS))
    named = parse_policies(policies or "")
    kv = None if kv_slots in (None, 0) else _whole("KV slots", kv_slots, 1, None)
    return load, named, _whole("max_new_tokens", max_new, 1, MAX_NEW_TOKENS), kv


def results_table(results: dict) -> str:
    """One row per policy run: its figures, and whether its outputs equal ``off``'s."""
    off = results.get("off")
    rows, attrs = [], []
    for name, res in results.items():
        rec, f = res.record(), round_figures(res.record())
        finished = sum(q["e2e_ms"] is not None for q in rec["requests"])
        same = "–" if off is None else "yes" if equal_outputs(rec, off.record()) else "no"
        rows.append([f"<code>{html.escape(name)}</code>", or_dash(f["throughput_tok_s"], ".1f"),
                     or_dash(f["tpot_ms_p50"], ".0f"), or_dash(f["ttft_ms_p50"], ".0f"), or_dash(f["e2e_ms_p50"], ".0f"),
                     or_dash(f["mean_batch"], ".2f"), or_dash(f["spec_step_share"], ".0%"), or_dash(f["tau"], ".2f"),
                     f"{finished}/{len(rec['requests'])}", same])
        attrs.append({"policy": name, "tokens-per-s": f["throughput_tok_s"], "equal": same})
    return (table(["policy", "tokens/s", "TPOT p50 ms", "TTFT p50 ms", "e2e p50 ms", "mean batch", "spec steps", "τ",
                   "finished", "= off"], rows, attrs, name="load")
            + note("One pass per policy, one after another (the benchmark interleaves several rounds and gives "
                   "ranges: python -m workbench.bench load). = off: the requests both finished have the same "
                   "output."))


def _decode_steps(run: LoadRun) -> list[dict]:
    return [{"batch": s.batch, "speculative": s.speculative, "tau": s.tau} for s in run.log if s.kind == "decode"]


def run_load_tab(wb, lock: threading.Lock, prompts: list[str], mode, value, policies, requests, max_new, kv_slots):
    """Generator for Run load, by output name (``OUTPUTS``): progress with the live step chart,
    then the bars and the table; bad input or a busy server: the status line alone."""
    try:
        load, named, max_new, kv = parse_inputs(mode, value, policies=policies, requests=requests, max_new=max_new,
                                                kv_slots=kv_slots)
        ids = [wb.encode(p) for p in prompts]
        for p in named:
            check_load(wb, p, prompts=ids, load=load, max_new_tokens=max_new, kv_slots=kv)
    except ValueError as err:
        yield {"status": error(str(err))}
        return
    if not lock.acquire(blocking=False):
        yield {"status": error(BUSY)}
        return
    try:
        costs = {}
        if any(p.needs_cost for p in named):
            yield {"status": "Reading this CPU's step cost for auto (measured once, a few seconds, then cached)…"}
            costs = policy_costs(wb, named, log=lambda msg: None)
        t0 = time.perf_counter()
        yield {"status": f"Warming up {len(named)} polic{'ies' if len(named) > 1 else 'y'} (a short untimed run "
                         "each)…"}
        for p in named:  # so that the first policy does not pay for first calls
            run_load(wb, p, prompts=ids, load=WARMUP, max_new_tokens=WARMUP_TOKENS, kv_slots=kv, cost=costs.get(p.name))
        share = max(1.0, MAX_SECONDS - (time.perf_counter() - t0)) / len(named)
        steps, results, shown = {}, {}, 0.0
        for i, p in enumerate(named, 1):
            run = LoadRun(wb, p, prompts=ids, load=load, max_new_tokens=max_new, kv_slots=kv, cost=costs.get(p.name))
            for log in run.steps(share):
                if time.perf_counter() - shown >= REDRAW_S:
                    steps[p.name] = _decode_steps(run)
                    yield {"status": f"Running `{p.name}` ({i}/{len(named)}, {load.label}): step {log.step}, "
                                     f"batch {log.batch}, {log.t:.1f} s of at most {share:.0f} s…",
                           "steps": steps_figure(steps)}
                    shown = time.perf_counter()
            steps[p.name], results[p.name] = _decode_steps(run), run.result()
        cut = [f"`{n}` ({sum(t.finished is None for t in r.timed)} unfinished)" for n, r in results.items() if r.stopped]
        bars = {n: round_figures(r.record()) for n, r in results.items()}
        yield {"status": f"Done: {len(results)} policies at {load.label}, {load.requests} requests of up to {max_new} "
                         "tokens each" + (f"; the time limit cut {', '.join(cut)}" if cut else "") + ".",
               "steps": steps_figure(steps), "bars": bars_figure(bars), "table": results_table(results)}
    finally:
        lock.release()


def build_load_tab(wb) -> None:
    """The tab's components and its event; one lock for every session of this page."""
    lock = threading.Lock()
    prompts = specbench.first_turns_by_task(specbench.select(specbench.load_questions(), "quick"))
    gr.Markdown(INTRO, elem_classes=["wb-explain"])
    with gr.Row(equal_height=True):
        mode = gr.Radio(MODES, value="closed", label="loop", elem_id="load-mode", scale=2)
        value = gr.Number(4, label="concurrency or rate", elem_id="load-value", min_width=90)
        requests = gr.Number(8, label="requests", precision=0, elem_id="load-requests", min_width=90)
        max_new = gr.Number(32, label="max_new_tokens", precision=0, elem_id="load-max-new", min_width=90)
        kv_slots = gr.Number(0, label="KV slots (0 = room for all)", precision=0, elem_id="load-kv", min_width=90)
    with gr.Row(equal_height=True):
        policies = gr.Textbox("off,eagle2:4/3/2,adaptive,auto", label="policies", elem_id="load-policies", scale=4)
        button = gr.Button("Run load", variant="primary", elem_id="load-btn", scale=1)
    c = {"status": gr.Markdown(elem_id="load-status"),
         "steps": gr.Plot(empty_figure("Press Run load.", 300), label="each decode step", elem_id="load-steps"),
         "bars": gr.Plot(label="against off", elem_id="load-bars"), "table": gr.HTML(elem_id="load-table")}
    assert tuple(c) == OUTPUTS

    def on_run(*values):  # a generator function, so Gradio streams its progress
        """Run the load with each policy and draw what each step ran."""
        for update in run_load_tab(wb, lock, prompts, *values):
            yield {c[k]: v for k, v in update.items()}

    button.click(on_run, [mode, value, policies, requests, max_new, kv_slots], list(c.values()), api_name="load",
                 show_progress="minimal", show_progress_on=[c["status"]])
