"""The start-up self-check of the Triton kernel: a kernel that fails to run or differs from the
reference is replaced by the torch backend, with one clear line; simulated on the CPU."""

import pytest
import torch

from workbench.attention import attention_reference
from workbench.attention.selfcheck import check_kernel, choose_attention_backend


def wrong_kernel(q, k, v, meta, scale=None, **knobs):
    return attention_reference(q, k, v, meta, scale=scale) + 0.1


def crashing_kernel(q, k, v, meta, scale=None, **knobs):
    raise RuntimeError("PTX compile failed:\n  sm_90 unsupported")


def reference_kernel(q, k, v, meta, scale=None, **knobs):
    return attention_reference(q, k, v, meta, scale=scale)


def test_a_kernel_equal_to_the_reference_passes():
    assert check_kernel("cpu", torch.float32, kernel=reference_kernel) is None
    assert check_kernel("cpu", torch.bfloat16, head_dim=128, num_heads=8, num_kv_heads=2,
                        kernel=reference_kernel) is None


def test_the_triton_kernel_passes_under_the_interpreter():
    assert check_kernel("cpu", torch.float32) is None


def test_wrong_and_crashing_kernels_are_reported():
    assert check_kernel("cpu", torch.float32, kernel=wrong_kernel).startswith("differs from the reference")
    msg = check_kernel("cpu", torch.float32, kernel=crashing_kernel)
    assert msg == "failed to run: RuntimeError: PTX compile failed: sm_90 unsupported"


def test_fallback_to_torch_with_one_line():
    check = choose_attention_backend("triton", "cpu", dtype=torch.float32, head_dim=64, num_heads=9, num_kv_heads=3,
                                     kernel=crashing_kernel)
    assert (check.backend, check.ok) == ("torch", False)
    assert "\n" not in check.message and "falling back to the PyTorch backend" in check.message
    ok = choose_attention_backend("triton", "cpu", dtype=torch.float32, head_dim=64, num_heads=9, num_kv_heads=3,
                                  kernel=reference_kernel)
    assert (ok.backend, ok.ok) == ("triton", True) and "self-check passed" in ok.message
    plain = choose_attention_backend("torch", "cpu", dtype=torch.float32, head_dim=64, num_heads=9, num_kv_heads=3,
                                     kernel=crashing_kernel)
    assert (plain.backend, plain.ok, plain.message) == ("torch", True, "attention backend: torch on cpu")


def test_workbench_load_falls_back_when_the_kernel_fails(tmp_path, monkeypatch, capsys):
    import workbench.attention.triton_tree as triton_tree
    from workbench.testing.tiny import make_tiny_app_model
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


# ---- the engine's launches ----------------------------------------------------------------------
def test_engine_cases_reach_the_launches_the_engine_makes(monkeypatch):
    """On an H200 (132 SMs, faked here: the plan reads host lists only) in bf16, at SmolLM2's
    and Llama-3-8B's heads, the engine cases run BLOCK_M = 64 with several query blocks a
    request, and the default split cuts the prefix; the small cases reach none of that."""
    from workbench.attention import triton_tree
    from workbench.attention.selfcheck import CASES, ENGINE_CASES, make_problem

    monkeypatch.setattr(triton_tree, "_sm_count", lambda index: 132)
    cuda = torch.device("cuda", 0)

    def plans(cases, g, dh):
        gen = torch.Generator().manual_seed(0)
        out = []
        for p in cases:
            *_, launched = make_problem(p, 2 * g, hkv=2, dh=dh, dtype=torch.bfloat16, device="cpu", gen=gen)
            out.append(triton_tree.plan_launch(launched, 2 * g, hkv=2, head_dim=dh, elem_bytes=2, device=cuda, **{
                k: v for k, v in p.knobs.items() if k in ("block_n", "num_splits")}))
        return out

    for g, dh in ((3, 64), (4, 128)):
        engine = plans(ENGINE_CASES, g, dh)
        assert any(pl.block_m == 64 and pl.m_blocks >= 2 and pl.num_splits > 1 for pl in engine)  # verify
        assert sum(pl.block_m == 64 and pl.num_splits > 1 for pl in engine) >= 3  # and the graph buckets
        assert all(pl.block_m < 64 and pl.m_blocks == 1 for pl in plans(CASES, g, dh))


def test_engine_cases_pass_under_the_interpreter():
    """The engine cases (bucket launches included) at a small head dim: the interpreter is slow."""
    from workbench.attention.selfcheck import ENGINE_CASES

    assert check_kernel("cpu", torch.bfloat16, head_dim=16, num_heads=6, num_kv_heads=2, cases=ENGINE_CASES) is None
    # a kernel that plans by the host lists (here: the reference) misreads a bucket launch
    problem = check_kernel("cpu", torch.bfloat16, head_dim=16, num_heads=6, num_kv_heads=2, kernel=reference_kernel,
                           cases=ENGINE_CASES[1:2])
    assert problem.startswith("differs from the reference on the 32-token graph bucket case")


def test_a_bucket_launch_needs_room_for_the_real_layout():
    from workbench.attention.meta import build_meta
    from workbench.attention.selfcheck import as_bucket

    meta = build_meta([2, 1], [list(range(10)), [10, 11]], extra_slots=[[12, 13], [14]], masks=None)
    launched = as_bucket(meta, 14)  # the plan: one request of 3 rows after 14 prefix keys
    assert (launched.q_lens, launched.prefix_list, launched.kv_lens) == ([3, 0], [14, 0], [17, 0])
    assert launched.cu_kv is meta.cu_kv and launched.prefix_lens is meta.prefix_lens  # the real layout
    assert launched.kv_slots.numel() == 17 and torch.equal(launched.kv_slots[:15], meta.kv_slots)
    with pytest.raises(ValueError, match="do not cover a prefix of 10"):
        as_bucket(meta, 9)


# ---- sticky faults ------------------------------------------------------------------------------
def test_a_sticky_gpu_fault_is_fatal_not_a_fallback(monkeypatch):
    """After an illegal address no CUDA call works: the check must stop with one clear line."""
    from workbench.attention import selfcheck

    def faulting_kernel(q, k, v, meta, scale=None, **knobs):
        raise RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered")

    monkeypatch.setattr(selfcheck, "device_lost", lambda device, exc: "illegal memory access" in str(exc))
    with pytest.raises(selfcheck.DeviceFault) as fault:
        choose_attention_backend("triton", "cpu", dtype=torch.float32, head_dim=64, num_heads=9, num_kv_heads=3,
                                 kernel=faulting_kernel)
    msg = str(fault.value)
    assert "\n" not in msg and msg.startswith("fatal: the GPU faulted while the Triton kernel's self-check ran "
                                              "(RuntimeError: Triton Error [CUDA]: an illegal memory access")
    assert "Restart with --attention torch --no-cuda-graphs" in msg
    assert isinstance(fault.value, SystemExit)  # uncaught: the message, exit status 1, no traceback
    # a failure that leaves the device usable still falls back
    check = choose_attention_backend("triton", "cpu", dtype=torch.float32, head_dim=64, num_heads=9, num_kv_heads=3,
                                     kernel=crashing_kernel)
    assert check.backend == "torch"


def test_device_lost_tells_sticky_from_passing_errors(monkeypatch):
    from workbench.attention.selfcheck import device_lost

    calls = []

    def sync(device, failures):
        calls.append(device)
        if len(calls) <= failures:
            raise RuntimeError("CUDA error: an error was reported earlier")

    gpu = torch.device("cuda", 0)
    other = RuntimeError("CUDA out of memory")
    assert not device_lost("cpu", RuntimeError("an illegal memory access was encountered"))
    assert device_lost(gpu, RuntimeError("CUDA error: an illegal memory access was encountered"))
    for failures, lost in ((0, False), (1, False), (2, True)):  # one failure: reported, then cleared
        calls.clear()
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device, f=failures: sync(device, f))
        assert device_lost(gpu, other) is lost


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_engine_cases_pass_on_the_gpu(dtype):
    for dh, g in ((64, 3), (128, 4), (64, 1)):  # SmolLM2's, Llama-3-8B's heads, and no GQA
        assert check_kernel("cuda", dtype, head_dim=dh, num_heads=2 * g, num_kv_heads=2) is None
