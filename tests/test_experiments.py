"""The micro-benchmarks kept beside the package (``experiments/``) still run end to end: the
few-row linear order (``experiments/linear_order.py``) and the tree-attention kernel benchmark
(``experiments/kernel.py``, its CPU behaviour: the Triton interpreter at one tiny shape)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from experiments.linear_order import main as linear_order_main, measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_linear_order_measures_both_orders(capsys):
    (r,) = measure([2], layers=1, repeats=1)
    assert r["rows"] == 2 and all(r[k] > 0 for k in r if k.endswith("_ms"))
    assert linear_order_main(["--rows", "1,2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 2 |" in out and "choice: few-row linear:" in out
    with pytest.raises(SystemExit):
        linear_order_main(["--rows", "0,x"])
    assert "positive integers" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour of the benchmark script")
def test_kernel_benchmark_on_a_cpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "experiments.kernel"]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "needs a CUDA GPU" in proc.stderr
    out = tmp_path / "kernel.json"
    proc = subprocess.run(cmd + ["--interpret-smoke", "--out", str(out)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["interpreted"] and report["failures"] == 0
    assert all(c["ok"] for c in report["checks"])
    (row,) = report["results"]
    assert row["max_abs_diff_vs_sdpa"] < 2e-2 and row["sdpa_us"] > 0 and row["gather_us"] > 0
    assert "| B | P | N |" in proc.stdout
