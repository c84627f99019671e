"""``python -m experiments.gpu.check --dry-run``: the one-command GPU check's plumbing on the CPU
(tiny sizes, the kernel in Triton's interpreter), and its clear errors."""

import json
import os
import subprocess
import sys

import pytest
import torch

from experiments.gpu.check import cpu_taus, predictions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    env.pop("OUT", None)
    return subprocess.run([sys.executable, "-m", "experiments.gpu.check", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is the CPU's version of the check")
def test_dry_run_writes_markdown_and_json(tmp_path):
    proc = run(["--dry-run", "--out", str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "out/gpu-check.json").read_text())
    sections = report["sections"]
    assert report["dry_run"] and set(sections) == {"tests", "kernel", "equality", "timing"}
    assert sections["kernel"]["ok"] and sections["kernel"]["checks_ok"]
    assert all(r["equal"] and r["modes"] == ["torch", "triton"] for r in sections["equality"]["rows"])
    tiny = sections["timing"]["models"]["tiny"]
    assert [r["tokens"] for r in tiny["verify_eager_ms"]] == [1, 2, 4] and all(r["ms"] > 0 for r in tiny["verify_eager_ms"])
    assert {p["method"] for p in tiny["predicted"]} == {"linear:5", "eagle2:8/5/4", "eagle2:60/6/10"}
    md = (tmp_path / "out/gpu-check.md").read_text()
    assert "| equality | ok |" in md and "predicted speedup" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_needs_cuda_or_dry_run_and_checks_its_options(tmp_path):
    proc = run([], tmp_path)
    assert proc.returncode == 2 and "use --dry-run" in proc.stderr
    proc = run(["--dry-run", "--skip", "tests,bogus"], tmp_path)
    assert proc.returncode == 2 and "unknown section(s) bogus" in proc.stderr


def test_prediction_uses_the_cpu_taus_and_nearest_costs():
    taus = cpu_taus()
    assert taus["eagle2:8/5/4"]["num_draft_tokens"] == 8 and taus["eagle2:8/5/4"]["tau"] > 1
    verify = [{"tokens": 1, "ms": 10.0}, {"tokens": 8, "ms": 11.0}, {"tokens": 64, "ms": 20.0}]
    draft = [{"rows": 1, "ms": 1.0}, {"rows": 4, "ms": 2.0}, {"rows": 10, "ms": 3.0}]
    (row,) = predictions({"t": {"tau": 2.0, "num_steps": 5, "topk": 4, "num_draft_tokens": 8}}, verify, draft)
    assert row["draft_ms"] == 10.0 and row["verify_ms"] == 11.0
    assert row["predicted_speedup"] == round(2.0 * 10.0 / 21.0, 2)
