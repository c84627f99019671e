"""One command for a fresh CUDA machine: ``python -m experiments.gpu.check [--out DIR] [--dry-run]``.

Needs only torch, triton and transformers (pytest is used when present), no network and
nothing from the repository heavier than its source; made to finish well inside 8 minutes on
one GPU. In order, each section timed and kept going if another fails:

1. ``tests``: the GPU-marked tests (``pytest -m gpu``), or, without pytest, the kernel's
   start-up self-check (its engine-shaped cases included) at the head shapes of both models in
   bf16, fp16 and fp32;
2. ``kernel``: ``bench/kernel.py`` on a reduced sweep (reference check, SDPA-with-dense-mask
   baseline, % of the HBM roofline; the full sweep is ``python -m experiments.kernel``);
3. ``equality``: greedy outputs of the engine on tiny random models, torch vs triton backend
   and eager vs CUDA graphs (target and draft levels), for vanilla, linear, eagle2 and static,
   and the start-up check of CUDA graphs (``engine/graph_check.py``) on the same models, with
   the logit error it measured;
4. ``timing``: random weights made on the device at SmolLM2-135M and Llama-3-8B shapes (bf16):
   a decode step and a verify of N = 1..64 tokens, one draft level of 1, 4 and 10 rows (each
   eager and graph-replayed: ``bench/cost.py``), the start-up check of CUDA graphs at these
   shapes, and the speedup predicted for the accept lengths τ measured on the CPU with the real
   head (``docs/bench/cpu-quick.json``).

Writes ``gpu-check.md`` and ``gpu-check.json`` (+ ``kernel.json``) to ``--out``, else ``$OUT``,
else ``bench_out/gpu``. ``--dry-run`` runs the same plumbing on the CPU at tiny sizes (the kernel
through the Triton interpreter; no graphs), in CI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from workbench.errors import ArgumentParser, UserError, reports_user_errors

ROOT = Path(__file__).resolve().parents[2]
# name -> HF-style config of the synthetic targets (random weights; only the shapes matter).
SHAPES = {
    "SmolLM2-135M": dict(hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9, num_kv_heads=3,
                         head_dim=64, vocab_size=49152, rope_theta=100000.0, tie_word_embeddings=True),
    "Llama-3-8B": dict(hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32, num_kv_heads=8,
                       head_dim=128, vocab_size=128256, rope_theta=500000.0, max_position_embeddings=8192,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
}
TINY = dict(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
            vocab_size=128)
DRAFT_ROWS = (1, 4, 10)  # a draft level's rows: a chain, eagle2's topk 4 and 10
TREES = ("linear:5", "eagle2:8/5/4", "eagle2:60/6/10")  # the CPU report's methods whose τ is used


NEEDS = ("torch", "triton", "transformers")  # imported by main, and by the test run it starts


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m experiments.gpu.check", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT, else bench_out/gpu)")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: check the plumbing (CI)")
    p.add_argument("--prefix", type=int, default=1024, help="committed prefix for the timings")
    p.add_argument("--skip", default="", help="comma-separated sections to skip: tests,kernel,equality,timing "
                   "(default: none)")
    return p


def check_python() -> None:
    """Refuse, in one line, a Python that lacks what the check imports (``make gpu-check`` runs
    the system ``python3``, not the project's venv)."""
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"{sys.executable} has no {', '.join(missing)}: run the check with a Python that has "
                        f"{', '.join(NEEDS)} (make gpu-check PYTHON=/path/to/python, or .venv/bin/python)")


# ---- sections -------------------------------------------------------------------------------
def section_tests(ctx: dict) -> dict:
    if ctx["dry_run"]:
        return {"skipped": "dry run (the GPU tests skip without CUDA)"}
    try:
        import pytest  # noqa: F401
    except ImportError:
        return selfchecks(ctx)
    # Only the files that hold GPU tests: collecting the others would import the app's and the
    # browser tests' dependencies, which a bare GPU image does not have.
    files = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").glob("test_*.py"))
             if "mark.gpu" in p.read_text()]
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *files]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    tail = proc.stdout.strip().splitlines()[-1:] or [""]
    return {"ok": proc.returncode == 0, "runner": "pytest -m gpu", "summary": tail[0],
            "output_tail": proc.stdout[-3000:] + proc.stderr[-1000:]}


def selfchecks(ctx: dict) -> dict:
    import torch

    from workbench.attention.selfcheck import check_kernel

    rows = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for name, shape in SHAPES.items():
            problem = check_kernel(ctx["device"], dtype, head_dim=shape["head_dim"],
                                   num_heads=2 * shape["num_heads"] // shape["num_kv_heads"], num_kv_heads=2)
            rows.append({"dtype": str(dtype).replace("torch.", ""), "shape": name, "ok": problem is None,
                         "problem": problem})
    return {"ok": all(r["ok"] for r in rows), "runner": "self-checks (pytest is not installed)", "checks": rows}


def section_kernel(ctx: dict) -> dict:
    from experiments.gpu import kernel

    if ctx["dry_run"]:
        setup, shapes = kernel.Setup.interpreted(), kernel.INTERPRETED_SHAPES
    else:
        setup = kernel.Setup(rep_ms=40)
        shapes = [(b, p, n) for p in (512, 4096, 32768) for n in (8, 64) for b in (1, 16)]
    report = kernel.benchmark(setup, shapes)
    (ctx["out"] / "kernel.json").write_text(json.dumps(report, indent=2) + "\n")
    heads = f"{setup.dtype}, Hq {setup.hq} / Hkv {setup.hkv} / Dh {setup.dh}"
    return {"ok": report["failures"] == 0, "json": "kernel.json", "heads": heads, "results": report["results"],
            "checks_ok": all(c["ok"] for c in report["checks"])}


def section_equality(ctx: dict) -> dict:
    import torch

    from workbench.engine.config import SpecConfig
    from workbench.engine.engine import Engine
    from workbench.models.draft import random_head
    from workbench.models.loading import load_target
    from workbench.testing.tiny import make_tiny_checkpoint

    specs = [SpecConfig("vanilla"), SpecConfig.linear(3), SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), SpecConfig.static(6)]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 16, (n,), generator=gen).tolist() for n in (5, 17, 9)]
    modes = [("torch", False), ("triton", False)] + ([("triton", True)] if ctx["device"] == "cuda" else [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_checkpoint(Path(tmp) / "tiny", vocab_size=16, hidden_size=128, num_heads=4, num_kv_heads=2)
        target = load_target(path, device=ctx["device"])
        head = random_head(target, 1, std=0.3)
        for spec in specs:
            outs, replays = {}, {}
            for backend, graphs in modes:
                target.attention_backend = backend
                eng = Engine(target, head if spec.speculative else None, spec, cuda_graphs=graphs)
                eng.add_requests(prompts, 10 if ctx["dry_run"] else 32)
                eng.run()
                outs[f"{backend}{' + graphs' if graphs else ''}"] = [r.output_ids for r in eng.requests]
                if graphs:  # did the graphs really replay (a failed capture runs eagerly)?
                    replays = {"target": eng.graphed.replays,
                               "draft": eng.graphed_draft.replays if eng.graphed_draft is not None else None}
            first = next(iter(outs.values()))
            rows.append({"method": spec.describe(), "modes": list(outs),
                         "equal": all(o == first for o in outs.values()), "graph_replays": replays or None})
        check = graph_start_up_check(target, head) if ctx["device"] == "cuda" else None
    # with graphs, the target (and, speculative, the draft) must have replayed at least once
    replayed = all(g["target"] > 0 and (g["draft"] is None or g["draft"] > 0)
                   for g in (r["graph_replays"] for r in rows) if g)
    return {"ok": all(r["equal"] for r in rows) and replayed and (check is None or check["ok"]), "rows": rows,
            "graph_check": check}


def section_timing(ctx: dict) -> dict:
    import torch

    from workbench.measure.cost import measure_draft_cost, measure_verify_cost
    from workbench.models.draft import random_head

    shapes = {"tiny": TINY} if ctx["dry_run"] else SHAPES
    sizes = (1, 2, 4) if ctx["dry_run"] else (1, 2, 4, 8, 16, 32, 64)
    prefix = 32 if ctx["dry_run"] else ctx["prefix"]
    repeats = 5 if ctx["dry_run"] else 20
    taus = cpu_taus()
    out = {"prefix": prefix, "dtype": ctx["dtype_name"], "taus_from": "docs/bench/cpu-quick.json", "models": {}}
    for name, shape in shapes.items():
        t0 = time.perf_counter()
        target = synthetic_target(shape, ctx["device"], ctx["dtype"])
        head = random_head(target, 0)
        target.attention_backend = "triton" if ctx["device"] == "cuda" else "torch"
        eager = measure_verify_cost(target, sizes, prefix, repeats)
        draft = measure_draft_cost(target, head, rows=DRAFT_ROWS, prefix_len=prefix, repeats=repeats)
        graphed = draft_graphed = None
        if ctx["device"] == "cuda":  # None when a capture failed (its warning is on stderr)
            graphed = measure_verify_cost(target, sizes, prefix, repeats, warmup=3, cuda_graphs=True)
            draft_graphed = measure_draft_cost(target, head, rows=DRAFT_ROWS, prefix_len=prefix, repeats=repeats,
                                               warmup=3, cuda_graphs=True)
        model = {"verify_eager_ms": eager, "verify_graph_ms": graphed, "draft_level_ms": draft,
                 "draft_level_graph_ms": draft_graphed,
                 "graph_check": graph_start_up_check(target, head) if ctx["device"] == "cuda" else None,
                 "predicted": predictions(taus, graphed or eager, draft_graphed or draft),
                 "setup_s": round(time.perf_counter() - t0, 1)}
        out["models"][name] = model
        del target, head
        if ctx["device"] == "cuda":
            torch.cuda.empty_cache()
    return {"ok": True, **out}


# ---- helpers ----------------------------------------------------------------------------------
def graph_start_up_check(target, head) -> dict:
    """The engines' start-up check of CUDA graphs on ``target`` and ``head`` (triton backend)."""
    from dataclasses import asdict

    from workbench.engine.graph_check import check_graphs

    target.attention_backend = "triton"
    return asdict(check_graphs(target, head))


def synthetic_target(shape: dict, device: str, dtype):
    """A TargetModel with random weights made on ``device`` (no checkpoint, no host copy)."""
    import torch

    from workbench.models.config import ModelConfig
    from workbench.models.llama import TargetModel

    cfg = ModelConfig(**shape)
    with torch.device("meta"):
        model = TargetModel(cfg)
    model = model.to(dtype).to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def cpu_taus() -> dict:
    """τ (greedy) and the tree of each method in ``TREES`` from the committed CPU report."""
    path = ROOT / "docs/bench/cpu-quick.json"
    if not path.exists():
        return {}
    report = json.loads(path.read_text())
    taus = {}
    for name in TREES:
        desc, summary = report.get("methods", {}).get(name), report.get("summary", {}).get(name, {})
        m = re.search(r"num_steps=(\d+), topk=(\d+), num_draft_tokens=(\d+)", desc or "")
        if m and summary.get("tau"):
            taus[name] = {"tau": summary["tau"], "num_steps": int(m[1]), "topk": int(m[2]),
                          "num_draft_tokens": int(m[3])}
    return taus


def predictions(taus: dict, verify: list[dict], draft: list[dict]) -> list[dict]:
    """τ · t(decode) / (num_steps · t(draft level) + t(verify D)), costs at the nearest measured size."""
    from workbench.metrics import predicted_speedup

    def at(rows, key, n):
        return min(rows, key=lambda r: (abs(r[key] - n), -r[key]))["ms"]

    decode = at(verify, "tokens", 1)
    rows = []
    for name, t in taus.items():
        draft_ms = t["num_steps"] * at(draft, "rows", t["topk"])
        verify_ms = at(verify, "tokens", t["num_draft_tokens"])
        rows.append({"method": name, "tau": t["tau"], "draft_ms": round(draft_ms, 3), "verify_ms": verify_ms,
                     "decode_ms": decode, "predicted_speedup": round(predicted_speedup(t["tau"], verify_ms, draft_ms, decode), 2)})
    return rows


# ---- report -------------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    lines = [f"# GPU check on {report['device_name']}", "",
             f"torch {report['torch']}, triton {report['triton']}, transformers {report['transformers']}, "
             f"Python {report['python']}; {report['wall_s']:.0f} s" + (" (dry run: CPU, tiny sizes)" if report["dry_run"] else ""),
             "", "| section | result | seconds |", "|---|---|---|"]
    for name, sec in report["sections"].items():
        result = sec.get("skipped") or ("error: " + sec["error"].splitlines()[-1] if "error" in sec
                                        else "ok" if sec.get("ok") else "FAILED")
        lines.append(f"| {name} | {result} | {sec.get('seconds', 0):.1f} |")
    tests = report["sections"].get("tests", {})
    if tests.get("summary"):
        lines += ["", f"GPU tests ({tests['runner']}): {tests['summary']}"]
    kern = report["sections"].get("kernel", {})
    if kern.get("results"):
        lines += ["", f"## Tree-attention kernel ({kern['heads']})", "",
                  "| B | P | N | kernel µs | SDPA + dense mask µs | % of HBM roofline |", "|---|---|---|---|---|---|"]
        for r in kern["results"]:
            if "error" not in r:
                lines.append(f"| {r['B']} | {r['P']} | {r['N']} | {r['kernel_us']:.1f} | {r.get('sdpa_us') or float('nan'):.1f} "
                             f"| {100 * r['roofline_frac']:.0f}% |")
    eq = report["sections"].get("equality", {})
    if eq.get("rows"):
        lines += ["", "## Greedy equality on a tiny random model", "",
                  "| method | modes | equal | graph replays (target / draft) |", "|---|---|---|---|"]
        for r in eq["rows"]:
            g = r.get("graph_replays")
            replays = f"{g['target']} / {'-' if g['draft'] is None else g['draft']}" if g else "-"
            lines.append(f"| {r['method']} | {', '.join(r['modes'])} | {'yes' if r['equal'] else 'NO'} | {replays} |")
        if eq.get("graph_check"):
            lines += ["", f"Start-up check of CUDA graphs: {eq['graph_check']['message']}"]
    timing = report["sections"].get("timing", {})
    for name, m in timing.get("models", {}).items():
        graphed = {r["tokens"]: r["ms"] for r in m["verify_graph_ms"] or []}
        lines += ["", f"## {name}, random weights, {timing['dtype']}, prefix {timing['prefix']}", "",
                  "| N tokens | forward + logits, eager ms | CUDA graph ms |", "|---|---|---|"]
        lines += [f"| {r['tokens']} | {r['ms']:.3f} | {graphed.get(r['tokens'], float('nan')):.3f} |"
                  for r in m["verify_eager_ms"]]
        draft_graphed = {r["rows"]: r["ms"] for r in m.get("draft_level_graph_ms") or []}
        lines += ["", "| draft level rows | draft forward + log-probs, eager ms | CUDA graph ms |", "|---|---|---|"]
        lines += [f"| {r['rows']} | {r['ms']:.3f} | {draft_graphed.get(r['rows'], float('nan')):.3f} |"
                  for r in m["draft_level_ms"]]
        if m.get("graph_check"):
            lines += ["", f"Start-up check of CUDA graphs: {m['graph_check']['message']}"]
        if m["predicted"]:
            lines += ["", "| tree (τ from the CPU report) | τ | draft ms | verify ms | decode ms | predicted speedup |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {p['method']} | {p['tau']} | {p['draft_ms']} | {p['verify_ms']} | {p['decode_ms']} | "
                      f"{p['predicted_speedup']}x |" for p in m["predicted"]]
    return "\n".join(lines) + "\n"


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    unknown = skip - {"tests", "kernel", "equality", "timing"}
    if unknown:
        raise UserError(f"unknown section(s) {', '.join(sorted(unknown))} in --skip")
    if args.prefix < 1:
        raise UserError(f"--prefix must be positive, got {args.prefix}")
    check_python()
    if args.dry_run and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # the kernel runs in Triton's interpreter on the CPU
    import torch

    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        raise UserError("no CUDA device; use --dry-run to check the plumbing on the CPU")
    out = args.out or Path(os.environ.get("OUT") or "bench_out/gpu")
    out.mkdir(parents=True, exist_ok=True)
    import transformers
    import triton

    ctx = {"device": "cuda" if cuda else "cpu", "dry_run": args.dry_run, "out": out, "prefix": args.prefix,
           "dtype": torch.bfloat16 if cuda else torch.float32, "dtype_name": "bf16" if cuda else "fp32"}
    report = {"device_name": torch.cuda.get_device_name() if cuda else f"CPU ({platform.machine()})",
              "torch": torch.__version__, "triton": triton.__version__, "transformers": transformers.__version__,
              "python": platform.python_version(), "dry_run": args.dry_run, "sections": {}}
    t_start = time.perf_counter()
    sections = {"tests": section_tests, "kernel": section_kernel, "equality": section_equality,
                "timing": section_timing}
    for name, run in sections.items():
        if name in skip:
            report["sections"][name] = {"skipped": "--skip"}
            continue
        print(f"[gpu-check {time.perf_counter() - t_start:5.0f}s] {name}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            result = run(ctx)
        except Exception:  # noqa: BLE001 - one failing section must not lose the others' results
            result = {"ok": False, "error": traceback.format_exc()[-3000:]}
        result["seconds"] = round(time.perf_counter() - t0, 1)
        report["sections"][name] = result
        (out / "gpu-check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")  # partial results survive
    report["wall_s"] = time.perf_counter() - t_start
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    text = markdown(report)
    (out / "gpu-check.md").write_text(text)
    print(text)
    failed = [n for n, s in report["sections"].items() if not s.get("skipped") and not s.get("ok")]
    print(f"wrote {out}/gpu-check.md and .json; " + (f"FAILED: {', '.join(failed)}" if failed else "all sections ok"),
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
