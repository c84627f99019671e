"""CUDA-graph replay (``engine/graphs.py``): buckets and padding on the CPU (padded rows must not
change the real rows, run eagerly), the static-buffer layout with the worst-case launch plan
through the Triton interpreter, and graph-vs-eager equality on a GPU."""

import pytest
import torch

from helpers import random_prompts, tiny_pair
from workbench.attention.meta import build_meta
from workbench.attention.batch import ForwardBatch, extend_batch
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.engine.graphs import Bucket, _Captured, make_buckets, pad_batch, pick_bucket
from workbench.kv import SlotAllocator


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    # head_dim 32: the Triton kernel needs a power of two >= 16.
    return tiny_pair(tmp_path_factory.mktemp("graphs"), hidden_size=128, num_heads=4, num_kv_heads=2)


def test_buckets_and_choice():
    buckets = make_buckets((1, 2, 4), (1, 4, 8))
    assert Bucket(4, 1) not in buckets and Bucket(1, 1) in buckets and Bucket(4, 8) in buckets
    assert pick_bucket(buckets, 1, 1) == Bucket(1, 1)
    assert pick_bucket(buckets, 1, 3) == Bucket(2, 4)  # padding needs a dummy request
    assert pick_bucket(buckets, 2, 4) == Bucket(2, 4)  # exact fit: no dummy
    assert pick_bucket(buckets, 4, 5) is None  # 4 real + 1 dummy > 4
    assert pick_bucket(buckets, 1, 9) is None
    with pytest.raises(ValueError, match="positive"):
        make_buckets((0,), (1,))


def prefilled(target, prompts, spare):
    """Pool + allocator + each request's committed slots after an eager prefill."""
    alloc = SlotAllocator(sum(map(len, prompts)) + spare)
    kv = target.new_kv_pool(alloc.num_slots + 1)  # + the scratch slot
    slots = [alloc.alloc(len(p)) for p in prompts]
    target(extend_batch(prompts, [[] for _ in prompts], slots, [0] * len(prompts), "cpu"), kv)
    return kv, alloc, slots


def decode_batch(prompts, alloc, slots):
    return extend_batch([[5] for _ in prompts], slots, [alloc.alloc(1) for _ in prompts],
                        [len(p) for p in prompts], "cpu")


def verify_batch(prompts, alloc, slots, n=3):
    """n chain nodes per request under a tree mask, after its prefix."""
    new = [alloc.alloc(n) for _ in prompts]
    meta = build_meta([n] * len(prompts), slots, new, [torch.ones(n, n, dtype=torch.bool).tril()] * len(prompts))
    ids = torch.tensor([7, 3, 9] * len(prompts))[: n * len(prompts)]
    pos = torch.tensor([len(p) + i for p in prompts for i in range(n)])
    return ForwardBatch(ids, pos, torch.tensor(sum(new, [])), meta)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("kind", ["decode", "verify"])
def test_padded_rows_do_not_change_real_rows(pair, kind, backend):
    target, _ = pair
    target.attention_backend = backend
    try:
        prompts = random_prompts(2, 16, seed=3)
        kv, alloc, slots = prefilled(target, prompts, spare=8)
        batch = (decode_batch if kind == "decode" else verify_batch)(prompts, alloc, slots)
        scratch = alloc.num_slots
        want = target.logits(target(batch, kv))
        bucket = pick_bucket(make_buckets((1, 2, 4), (4, 8, 16)), batch.meta.batch_size, batch.num_tokens)
        assert bucket.tokens > batch.num_tokens and bucket.batch > batch.meta.batch_size  # really padded
        padded = pad_batch(batch, bucket, scratch)
        assert padded.num_tokens == bucket.tokens and padded.meta.batch_size == bucket.batch
        got = target.logits(target(padded, kv))[: batch.num_tokens]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert torch.equal(got.argmax(-1), want.argmax(-1))
    finally:
        target.attention_backend = "torch"


@pytest.mark.parametrize("kind", ["decode", "verify"])
def test_static_buffers_with_the_worst_case_launch_plan(pair, kind):
    """What a graph replays, without the graph: the padded batch copied into the static buffers,
    whose host lists describe the bucket's worst case, through the (interpreted) Triton kernel."""
    target, _ = pair
    target.attention_backend = "triton"
    try:
        prompts = random_prompts(2, 16, seed=4, lengths=(70, 150))  # prefixes past one key block
        kv, alloc, slots = prefilled(target, prompts, spare=8)
        batch = (decode_batch if kind == "decode" else verify_batch)(prompts, alloc, slots)
        want = target.logits(target(batch, kv))
        bucket = Bucket(4, 8)
        cap = _Captured(bucket, batch.meta.mask is not None, max_keys=alloc.num_slots + 1, device=torch.device("cpu"))
        cap.load(pad_batch(batch, bucket, alloc.num_slots))
        got = target.logits(target(cap.batch, kv))[: batch.num_tokens]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    finally:
        target.attention_backend = "torch"


def test_graphs_refused_without_cuda(pair):
    target, head = pair
    with pytest.raises(ValueError, match="CUDA graphs need"):
        Engine(target, head, SpecConfig("vanilla"), cuda_graphs=True)
    assert Engine(target, head, SpecConfig("vanilla")).cuda_graphs is False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("spec", [SpecConfig("vanilla"), SpecConfig.linear(3), SpecConfig("eagle2", 3, 2, 6)],
                         ids=lambda s: s.describe())
def test_graphs_equal_eager_on_gpu(pair, spec):
    target, head = pair
    target, head = target.cuda(), head.cuda()
    target.attention_backend = "triton"
    outs = []
    for graphs in (False, True):
        eng = Engine(target, head if spec.speculative else None, spec, cuda_graphs=graphs)
        eng.add_requests(random_prompts(3, 16, seed=5), 20)
        eng.run()
        outs.append([r.output_ids for r in eng.requests])
        if graphs:
            assert eng.graphed.replays > 0
    target.attention_backend = "torch"
    target.cpu(), head.cpu()
    assert outs[0] == outs[1]


def test_a_failed_capture_runs_eagerly_and_says_so_once(pair, capsys):
    """On the CPU every capture fails (no CUDA stream): the runner must fall back, not break."""
    from workbench.engine.graphs import GraphedTarget

    target, _ = pair
    target.attention_backend = "triton"
    try:
        prompts = random_prompts(2, 16, seed=6)
        kv, alloc, slots = prefilled(target, prompts, spare=8)
        runner = GraphedTarget(target, kv, alloc.num_slots, alloc.num_slots + 1, make_buckets((1, 2, 4), (2, 4)))
        batch = decode_batch(prompts, alloc, slots)
        want = target.logits(target(batch, kv))
        for _ in range(2):
            _, got = runner(batch)
            torch.testing.assert_close(got, want)
        assert runner.failed and runner.replays == 0 and runner.eager == 2
        assert capsys.readouterr().err.count("CUDA graph capture failed") == 1
    finally:
        target.attention_backend = "torch"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_cli_refuses_cuda_graphs_without_cuda(tmp_path, capsys):
    from workbench.app.tiny import make_tiny_app_model
    from workbench.cli import main

    path = make_tiny_app_model(tmp_path / "tiny")
    code = main(["generate", "--prompt", "hello", "--target", str(path), "--draft", "random", "--cuda-graphs",
                 "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "error: --cuda-graphs needs a CUDA device and the triton attention backend" in err
    assert main(["generate", "--prompt", "hello", "--target", str(path), "--draft", "random", "--no-cuda-graphs",
                 "--max-new-tokens", "2", "--json"]) == 0
    assert "attention backend: torch on cpu" in capsys.readouterr().err
