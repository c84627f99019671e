"""The start-up self-check of the Triton kernel: a kernel that fails to run or differs from the
reference is replaced by the torch backend, with one clear line; simulated on the CPU."""

import torch

from workbench.attention import attention_reference
from workbench.attention.selfcheck import check_kernel, choose_attention_backend


def wrong_kernel(q, k, v, meta, scale=None, **knobs):
    return attention_reference(q, k, v, meta, scale) + 0.1


def crashing_kernel(q, k, v, meta, scale=None, **knobs):
    raise RuntimeError("PTX compile failed:\n  sm_90 unsupported")


def reference_kernel(q, k, v, meta, scale=None, **knobs):
    return attention_reference(q, k, v, meta, scale)


def test_a_kernel_equal_to_the_reference_passes():
    assert check_kernel("cpu", torch.float32, kernel=reference_kernel) is None
    assert check_kernel("cpu", torch.bfloat16, 128, 8, 2, kernel=reference_kernel) is None


def test_the_triton_kernel_passes_under_the_interpreter():
    assert check_kernel("cpu", torch.float32) is None


def test_wrong_and_crashing_kernels_are_reported():
    assert check_kernel("cpu", torch.float32, kernel=wrong_kernel).startswith("differs from the reference")
    msg = check_kernel("cpu", torch.float32, kernel=crashing_kernel)
    assert msg == "failed to run: RuntimeError: PTX compile failed: sm_90 unsupported"


def test_fallback_to_torch_with_one_line():
    check = choose_attention_backend("triton", "cpu", torch.float32, 64, 9, 3, kernel=crashing_kernel)
    assert (check.backend, check.ok) == ("torch", False)
    assert "\n" not in check.message and "falling back to the PyTorch backend" in check.message
    ok = choose_attention_backend("triton", "cpu", torch.float32, 64, 9, 3, kernel=reference_kernel)
    assert (ok.backend, ok.ok) == ("triton", True) and "self-check passed" in ok.message
    plain = choose_attention_backend("torch", "cpu", torch.float32, 64, 9, 3, kernel=crashing_kernel)
    assert (plain.backend, plain.ok, plain.message) == ("torch", True, "attention backend: torch on cpu")


def test_workbench_load_falls_back_when_the_kernel_fails(tmp_path, monkeypatch, capsys):
    import workbench.attention.triton_tree as triton_tree
    from workbench.app.tiny import make_tiny_app_model
    from workbench.pipeline import Workbench

    path = make_tiny_app_model(tmp_path / "tiny")
    monkeypatch.setattr(triton_tree, "tree_attention", crashing_kernel)
    wb = Workbench.load(target=str(path), draft="random", attention="triton")
    assert wb.target.attention_backend == "torch" and wb.attention.backend == "torch"
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "attention backend" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: attention backend: torch on cpu: the Triton kernel")
    monkeypatch.undo()
    wb = Workbench.load(target=str(path), draft="random", attention="triton")
    assert wb.target.attention_backend == "triton" and wb.attention.ok
