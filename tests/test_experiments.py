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
    from workbench.models.linear import available_paths

    (r,) = measure([2], layers=1, repeats=1)
    assert r["rows"] == 2 and set(r["layers"]) == set(r["lm_head"]) == set(available_paths())
    assert all(ms > 0 for part in ("layers", "lm_head") for ms in r[part].values())
    (b,) = measure([2], layers=1, repeats=1, dtype=torch.bfloat16)  # only what bf16 may run
    assert set(b["layers"]) == set(available_paths(torch.bfloat16)) and "weight-left" not in b["layers"]
    assert linear_order_main(["--rows", "1,2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 2 |" in out and "choice: few-row linear:" in out and "fp32" in out
    assert linear_order_main(["--rows", "2", "--repeats", "1", "--dtype", "bf16"]) == 0
    assert "choice: few-row bf16 linear:" in capsys.readouterr().out
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


def test_forward_parts_replaces_each_part_and_restores_it(tmp_path, capsys):
    from experiments.forward_parts import PARTS, main as parts_main, measure, without
    from workbench.measure.cost import chain_batch, prefilled
    from workbench.models.loading import load_target
    from workbench.testing.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path)
    target = load_target(path)
    pool = prefilled(target, target.new_kv_pool, vocab=target.config.vocab_size, prefix_len=6, spare=4, device="cpu")
    batch = chain_batch(3, pool, pool.alloc.alloc(3))
    logits = lambda: target.logits(target(batch, pool.kv))  # noqa: E731
    real = logits()
    for part in PARTS:  # each stand-in really stands in: the forward computes something else
        with without(part):
            assert not torch.allclose(logits(), real), part
    assert torch.equal(logits(), real)  # and every original is back afterwards
    with pytest.raises(ValueError, match="unknown part"), without("softmax"):
        pass
    (r,) = measure(target, [2], prefix=4, rounds=2, repeats=1)
    assert r["tokens"] == 2 and r["forward"].runs == 2 and set(r["parts"]) == set(PARTS)
    assert r["forward"].median > 0
    assert parts_main(["--target", str(path), "--tokens", "1,2", "--prefix", "4", "--rounds", "1",
                       "--repeats", "1"]) == 0
    assert "| 2 |" in capsys.readouterr().out


def test_forward_parts_times_each_linear_path_in_the_forward_and_alone(tmp_path, capsys):
    from experiments.forward_parts import main as parts_main, measure_paths
    from workbench.models.linear import Linear, LinearOrder, apply_linear_order
    from workbench.models.loading import load_target
    from workbench.testing.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path)
    target = load_target(path)
    own = LinearOrder(reason="the model's own")
    apply_linear_order(target, own)
    (r,) = measure_paths(target, ["plain", "weight-left"], [2], prefix=4, rounds=2, repeats=1)
    assert r["tokens"] == 2 and set(r["forward"]) == set(r["products"]) == {"plain", "weight-left"}
    assert all(s.runs == 2 and s.median > 0 for w in ("forward", "products") for s in r[w].values())
    assert all(m.order is own for m in target.modules() if isinstance(m, Linear))  # restored afterwards
    assert parts_main(["--target", str(path), "--tokens", "1", "--prefix", "4", "--rounds", "1", "--repeats", "1",
                       "--paths", "plain,weight-left"]) == 0
    out = capsys.readouterr().out
    assert "F.linear: forward" in out and "(W @ x^T)^T: products alone" in out and "| 1 |" in out
    assert parts_main(["--target", str(path), "--paths", "fast"]) == 2
    assert "--paths fast: name one or more of" in capsys.readouterr().err
    assert parts_main(["--target", str(path), "--paths", "plain", "--tokens", "64"]) == 2
    assert "with --paths, at most 32" in capsys.readouterr().err
    from workbench.models.linear import onednn_bf16_available

    bf16_onednn = ["--target", str(path), "--tokens", "2", "--prefix", "4", "--rounds", "1", "--repeats", "1",
                   "--paths", "plain,onednn-packed", "--dtype", "bf16"]
    if onednn_bf16_available():
        assert parts_main(bf16_onednn) == 0
        assert "bf16" in capsys.readouterr().out
    else:  # an AVX2-only CPU: oneDNN's bf16 product is not offered, and the message says what is
        assert parts_main(bf16_onednn) == 2
        assert "--paths plain,onednn-packed: name one or more of plain" in capsys.readouterr().err
    assert parts_main(["--target", str(path), "--paths", "weight-left", "--dtype", "bf16"]) == 2  # not for bf16
    assert "for bf16" in capsys.readouterr().err


@pytest.mark.skipif(not __import__("workbench.models.linear", fromlist=["x"]).onednn_packed_available(),
                    reason="torch built without oneDNN's packed linear")
def test_forward_parts_times_fused_against_separate_projections(tmp_path, capsys):
    from experiments.forward_parts import fusion_table, main as parts_main, measure_fusion
    from workbench.models.linear import ONEDNN, ROW_BUCKETS, FusedPack, LinearOrder, apply_linear_order
    from workbench.models.loading import load_target
    from workbench.testing.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path)
    target = load_target(path)
    apply_linear_order(target, LinearOrder(tuple(ONEDNN for _ in ROW_BUCKETS), "test"))
    (r,) = measure_fusion(target, [4], prefix=4, rounds=2, repeats=1)
    assert r["tokens"] == 4 and all(s.runs == 2 and s.median > 0 for s in r["forward"].values())
    assert isinstance(target.model.layers[0].self_attn.qkv_packed, FusedPack)  # the model's own order back
    assert "| 4 |" in fusion_table([r])
    assert parts_main(["--target", str(path), "--fusion", "--paths", "plain"]) == 2
    assert "give one" in capsys.readouterr().err


def test_verify_in_a_step_and_alone_are_timed_side_by_side(tmp_path):
    from experiments.verify_in_step import _settings, measure
    from helpers import tiny_app_workbench
    from workbench.errors import UserError

    results = measure(tiny_app_workbench(tmp_path), [(2, 2, 3)], prefix=8, rounds=3)
    assert set(results) == {"eagle2:3/2/2 in a step", "eagle2:3/2/2 alone"}
    assert all(len(v) == 3 and min(v) > 0 for v in results.values())  # one value a round, each a time
    assert _settings("3/2/4, 5/4/8") == [(3, 2, 4), (5, 4, 8)]
    for bad in ("3/2", "x", "3/0/4", ""):
        with pytest.raises(UserError, match="num_steps/topk/num_draft_tokens"):
            _settings(bad)


def test_verify_in_step_refuses_bad_sizes_in_one_line(capsys):
    from experiments.verify_in_step import main as verify_in_step_main

    for argv in (["--rounds", "0"], ["--prefix", "0"], ["--settings", "3/2"]):  # refused before the model loads
        assert verify_in_step_main(argv) == 2
    err = capsys.readouterr().err
    assert "--rounds must be >= 1, got 0" in err and "--prefix must be >= 1" in err and "Traceback" not in err


def test_commit_move_decodes_both_ways_to_the_same_output(tmp_path):
    """The experiment's "in place" way keeps the path's own slots (nothing copied) and its "moved"
    way is the engine's: one decode each, the same tokens, and the in-place cache left one run only
    while every accepted path stayed at the front."""
    from experiments.commit_move import in_place, measure, report
    from helpers import random_prompts, tiny_app_workbench

    assert in_place([7, 8, 9, 10], [0, 2]) == ([7, 9], [8, 10], [])
    prompts = {1: random_prompts(1, 12, seed=9)[0]}
    seen = measure(tiny_app_workbench(tmp_path), ["eagle2:8/5/4", "linear:3"], prompts, rounds=2, max_new_tokens=24)
    assert set(seen) == {(1, m, w) for m in ("eagle2:8/5/4", "linear:3") for w in ("moved", "in place")}
    runs = [r for v in seen.values() for r in v]
    assert len(runs) == 8 and all(r["tok_s"] > 0 and r["verify_ms"] > 0 for r in runs)
    assert len({tuple(r["output"]) for r in runs}) == 1  # the copy moves rows, not what they hold
    assert all(r["off_front"] == 0 for r in seen[(1, "linear:3", "moved")])  # a chain never leaves the front
    lines = report(seen, prompts, ["eagle2:8/5/4", "linear:3"])
    assert len(lines) == 4 and all(line.endswith("| yes |") for line in lines[2:])


def test_commit_move_refuses_bad_input_in_one_line(capsys):
    from experiments.commit_move import main as commit_move_main

    for argv in (["--rounds", "0"], ["--questions", "99999"], ["--methods", "vanilla"]):  # before the model loads
        assert commit_move_main(argv) == 2
    err = capsys.readouterr().err
    assert "--rounds must be >= 1, got 0" in err and "unknown: 99999" in err and "one speculative method" in err
    assert "Traceback" not in err
