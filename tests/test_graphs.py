"""CUDA-graph replay (``engine/graphs.py``) of the target and of the draft head's levels: buckets
and padding on the CPU (padded rows must not change the real rows, run eagerly), the
static-buffer layout with the worst-case launch plan through the Triton interpreter, and
graph-vs-eager equality on a GPU."""

import pytest
import torch

from helpers import random_prompts, tiny_pair
from workbench.attention.meta import build_meta
from workbench.attention.batch import ForwardBatch, extend_batch
from workbench.engine.config import SpecConfig
from workbench.engine.engine import Engine
from workbench.engine.graphs import (Bucket, GraphedDraft, _Captured, make_buckets, pad_batch, pad_features,
                                     pick_bucket)
from workbench.kv import SlotAllocator


@pytest.fixture(autouse=True)
def no_failed_graphs(monkeypatch):
    """Each test starts with no graph failed on any device (``graphs.FAILED`` lasts a process)."""
    from workbench.engine import graphs

    monkeypatch.setattr(graphs, "FAILED", {})


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
    target(extend_batch(tokens=prompts, prefix_slots=[[] for _ in prompts], new_slots=slots, device="cpu"), kv)
    return kv, alloc, slots


def decode_batch(prompts, alloc, slots):
    return extend_batch(tokens=[[5] for _ in prompts], prefix_slots=slots, new_slots=[alloc.alloc(1) for _ in prompts],
                        device="cpu")


def verify_batch(prompts, alloc, slots, n=3, device="cpu"):
    """n chain nodes per request under a tree mask, after its prefix."""
    new = [alloc.alloc(n) for _ in prompts]
    meta = build_meta([n] * len(prompts), slots, extra_slots=new,
                      masks=[torch.ones(n, n, dtype=torch.bool).tril()] * len(prompts), device=device)
    ids = torch.tensor([7, 3, 9] * len(prompts))[: n * len(prompts)]
    pos = torch.tensor([len(p) + i for p in prompts for i in range(n)])
    return ForwardBatch(ids.to(device), pos.to(device), torch.tensor(sum(new, []), device=device), meta)


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
@pytest.mark.parametrize("spec", [SpecConfig("vanilla"), SpecConfig.linear(3), SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6),
                                  SpecConfig.static(6)], ids=lambda s: s.describe())
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
            assert eng.graphed.replays > 0 and eng.graphed.failed is None
            if spec.speculative:  # the draft levels are replayed too
                assert eng.graphed_draft.replays > 0 and eng.graphed_draft.failed is None
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
        assert capsys.readouterr().err.count("CUDA graphs off on cpu: a graph of the target forward") == 1
    finally:
        target.attention_backend = "torch"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_cli_refuses_cuda_graphs_without_cuda(tmp_path, capsys):
    from workbench.testing.tiny import make_tiny_app_model
    from workbench.cli import main

    path = make_tiny_app_model(tmp_path / "tiny")
    code = main(["generate", "--prompt", "hello", "--target", str(path), "--draft", "random", "--cuda-graphs",
                 "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "error: --cuda-graphs needs a CUDA device and the triton attention backend" in err
    assert main(["generate", "--prompt", "hello", "--target", str(path), "--draft", "random", "--no-cuda-graphs",
                 "--max-new-tokens", "2", "--json"]) == 0
    assert "attention backend: torch on cpu" in capsys.readouterr().err


# ---- draft levels ---------------------------------------------------------------------------------
def draft_level(head, prompts, seed=7, n=2, device="cpu"):
    """A draft pool after an eager extend of each prompt, then a depth-2 tree level: per request
    ``n`` frontier nodes attending the prefix, ``n`` earlier-level nodes (their ancestors) and
    themselves, so each request has 2n extra keys for its n rows. Returns pool, allocator,
    the level's batch and features, and the scratch slot."""
    gen = torch.Generator().manual_seed(seed)
    hsz = head.config.hidden_size
    alloc = SlotAllocator(sum(map(len, prompts)) + 2 * n * len(prompts) + 4)
    kv = head.new_kv_pool(alloc.num_slots + 1)  # + the scratch slot
    slots = [alloc.alloc(len(p)) for p in prompts]
    head(torch.randn(sum(map(len, prompts)), hsz, generator=gen).to(device),
         extend_batch(tokens=prompts, prefix_slots=[[] for _ in prompts], new_slots=slots, device=device), kv)
    earlier = [alloc.alloc(n) for _ in prompts]
    level = [alloc.alloc(n) for _ in prompts]
    # node r of this level descends from earlier node r (and sees only it among the earlier ones)
    mask = torch.cat([torch.eye(n, dtype=torch.bool), torch.eye(n, dtype=torch.bool)], dim=1)
    meta = build_meta([n] * len(prompts), slots, extra_slots=[e + lv for e, lv in zip(earlier, level)],
                      masks=[mask] * len(prompts),
                      device=device)
    ids = torch.randint(3, 16, (n * len(prompts),), generator=gen).to(device)
    pos = torch.tensor([len(p) for p in prompts for _ in range(n)], device=device)
    batch = ForwardBatch(ids, pos, torch.tensor(sum(level, []), device=device), meta)
    return kv, alloc, batch, torch.randn(batch.num_tokens, hsz, generator=gen).to(device), alloc.num_slots


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_padded_draft_level_rows_do_not_change_real_rows(pair, backend):
    target, head = pair
    target.attention_backend = backend
    try:
        kv, _, batch, feats, scratch = draft_level(head, random_prompts(3, 16, seed=8))
        want = head(feats, batch, kv)
        bucket = pick_bucket(make_buckets((1, 2, 4), (4, 8, 16)), batch.meta.batch_size, batch.num_tokens)
        assert bucket == Bucket(4, 8)  # 3 requests x 2 nodes: 2 padding tokens in one dummy request
        padded = pad_batch(batch, bucket, scratch)
        got = head(pad_features(feats, bucket), padded, kv)[: batch.num_tokens]
        # The head's outputs reach ~200 here, and the CPU's few-row linear sums in an order that
        # depends on the row count (linear.py): fp32 rounding, ~1e-6 of the values.
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-5)
    finally:
        target.attention_backend = "torch"


def test_draft_level_static_buffers_hold_the_ancestors(pair):
    """A level's extra keys (ancestors + self) outnumber its rows: the static mask is sized by
    ``max_extra``, and the features are one more static buffer."""
    target, head = pair
    target.attention_backend = "triton"
    try:
        kv, alloc, batch, feats, scratch = draft_level(head, random_prompts(2, 16, seed=9, lengths=(70, 150)))
        want = head(feats, batch, kv)
        bucket = Bucket(4, 8)
        cap = _Captured(bucket, True, max_keys=alloc.num_slots + 1, device=torch.device("cpu"), max_extra=4,
                        features=head.config.hidden_size)
        assert cap.mask.numel() == 8 * 8 and cap.features.shape == (8, head.config.hidden_size)
        cap.load(pad_batch(batch, bucket, scratch), pad_features(feats, bucket))
        got = head(cap.features, cap.batch, kv)[: batch.num_tokens]
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-5)  # rounding: see the test above
    finally:
        target.attention_backend = "torch"


def test_bucket_choice_for_draft_levels(pair):
    target, head = pair
    target.attention_backend = "triton"
    try:
        prompts = random_prompts(3, 16, seed=10)
        kv, alloc, batch, _, scratch = draft_level(head, prompts)
        buckets = make_buckets((1, 2, 4), (4, 8, 16))
        # 3 requests x topk 2 = 6 rows, each with 4 extra keys (2 ancestors + 2 own)
        runner = GraphedDraft(head, kv, scratch, alloc.num_slots + 1, max_extra=4, buckets=buckets)
        assert runner.bucket_for(batch) == Bucket(4, 8)
        # a runner sized for fewer scratch keys than the level has: eager
        narrow = GraphedDraft(head, kv, scratch, alloc.num_slots + 1, max_extra=2, buckets=buckets)
        assert narrow.bucket_for(batch) is None
        # an extend (causal, extra keys = its rows) fits whatever max_extra is
        ext = extend_batch(tokens=[[4, 5, 6]], prefix_slots=[list(range(10))], new_slots=[[10, 11, 12]], device="cpu")
        assert runner.bucket_for(ext) == Bucket(2, 4)
        # more rows than the largest bucket, or keys past max_keys: eager
        big = extend_batch(tokens=[[4] * 17], prefix_slots=[[]], new_slots=[list(range(17))], device="cpu")
        assert runner.bucket_for(big) is None
        small = GraphedDraft(head, kv, scratch, 8, max_extra=4, buckets=buckets)
        assert small.bucket_for(batch) is None
        with pytest.raises(ValueError, match="outside the KV pool"):
            GraphedDraft(head, kv, kv.num_slots, kv.num_slots + 1)
    finally:
        target.attention_backend = "torch"
    with pytest.raises(ValueError, match="CUDA graphs need a graphable attention backend"):
        GraphedDraft(head, kv, scratch, alloc.num_slots + 1)


def test_a_failed_draft_capture_runs_eagerly_and_says_so_once(pair, capsys):
    target, head = pair
    target.attention_backend = "triton"
    try:
        kv, alloc, batch, feats, scratch = draft_level(head, random_prompts(2, 16, seed=11))
        want = head(feats, batch, kv)
        runner = GraphedDraft(head, kv, scratch, alloc.num_slots + 1, max_extra=4,
                              buckets=make_buckets((1, 2, 4), (4,)))
        for _ in range(2):
            torch.testing.assert_close(runner(feats, batch), want)
        assert runner.failed and runner.replays == 0 and runner.eager == 2
        err = capsys.readouterr().err
        assert err.count("CUDA graphs off on cpu: a graph of the draft forward") == 1
        with pytest.raises(ValueError, match="feature rows"):
            runner(feats[:1], batch)
    finally:
        target.attention_backend = "torch"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_draft_level_graph_equals_eager_on_gpu(pair):
    """One tree level (more extra keys than rows) replayed from a graph, twice with different
    features, against the eager head; then a second level layout in the same bucket."""
    target, head = pair
    target, head = target.cuda(), head.cuda()
    target.attention_backend = "triton"
    try:
        kv, alloc, batch, feats, scratch = draft_level(head, random_prompts(3, 16, seed=13), device="cuda")
        buckets = make_buckets((1, 2, 4), (4, 8))
        runner = GraphedDraft(head, kv, scratch, alloc.num_slots + 1, max_extra=4, buckets=buckets)
        for scale in (1.0, 0.5):
            want = head(feats * scale, batch, kv)
            got = runner(feats * scale, batch)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        assert runner.replays == 2 and runner.failed is None
        kv2, alloc2, batch2, feats2, scratch2 = draft_level(head, random_prompts(2, 16, seed=14), device="cuda")
        runner2 = GraphedDraft(head, kv2, scratch2, alloc2.num_slots + 1, max_extra=4, buckets=buckets)
        torch.testing.assert_close(runner2(feats2, batch2), head(feats2, batch2, kv2), atol=1e-4, rtol=1e-4)
        assert runner2.replays == 1
    finally:
        target.attention_backend = "torch"
        target.cpu(), head.cpu()


@pytest.mark.parametrize("spec", [SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6), SpecConfig.static(6)], ids=lambda s: s.describe())
def test_engine_without_graphs_is_unchanged(pair, spec):
    """Graphs off: no runner, pools of the old size, and the draft calls take the eager path
    (the same outputs as an engine whose draft forwards go through a runner that falls back)."""
    target, head = pair
    prompts = random_prompts(2, 16, seed=12)
    eng = Engine(target, head, spec, cuda_graphs=False)
    eng.add_requests(prompts, 8)
    assert eng.graphed is None and eng.graphed_draft is None
    assert eng.draft_kv.num_slots == eng.table.allocator.num_slots == eng.target_kv.num_slots
    eng.run()
    target.attention_backend = "triton"
    try:
        routed = Engine(target, head, spec, cuda_graphs=False)
        routed.add_requests(prompts, 8)
        n = routed.table.allocator.num_slots
        routed.drafter.kv = head.new_kv_pool(n + 1)  # before any draft forward: + the scratch slot
        routed.drafter.graphed = GraphedDraft(head, routed.drafter.kv, n, n + 1, max_extra=8)
        routed.run()
    finally:
        target.attention_backend = "torch"
    assert [r.output_ids for r in routed.requests] == [r.output_ids for r in eng.requests]
    assert routed.graphed_draft.eager > 0 and routed.graphed_draft.replays == 0


# ---- the start-up check, on a fake device -------------------------------------------------------
class EagerGraph:
    """A stand-in for a CUDA graph on the CPU: ``replay`` runs the forward again over the same
    static buffers (the worst-case launch plan included) into the same output tensors."""

    def __init__(self, replay):
        self.replay = replay


@pytest.fixture
def eager_graphs(monkeypatch):
    """Captures that 'record' by running the forward once; ``perturb`` shifts what replays give."""
    from workbench.engine import graph_check, graphs

    state = {"perturb": 0.0}

    def record(runner, cap):
        cap.outputs = runner.run_eager(cap.batch, cap.features)

        @torch.inference_mode()
        def replay():
            for out, new in zip(cap.outputs, runner.run_eager(cap.batch, cap.features)):
                out.copy_(new + state["perturb"])

        cap.graph = EagerGraph(replay)

    monkeypatch.setattr(graphs.GraphedForward, "_record", record)
    monkeypatch.setattr(graph_check, "PREFIXES", (40, 7))  # the interpreter is slow
    monkeypatch.setattr(graph_check, "_RESULTS", graph_check.weakref.WeakKeyDictionary())
    return state


@pytest.fixture
def triton_pair(pair):
    target, head = pair
    target.attention_backend = "triton"
    yield target, head
    target.attention_backend = "torch"


def test_the_start_up_check_passes_when_replay_equals_eager(triton_pair, eager_graphs, capsys):
    from workbench.engine.graph_check import check_graphs

    target, head = triton_pair
    check = check_graphs(target, head)
    # the same eager forward twice, once through the runner's padded static buffers: equal up to
    # fp32 rounding (a loaded machine's CPU kernels may split a reduction differently), far under the tolerance
    assert check.ok and check.error < 1e-5 and check.message.startswith("CUDA graphs on cpu (replay equals eager")
    assert capsys.readouterr().err == ""


def test_the_start_up_check_fails_once_with_one_line(triton_pair, eager_graphs, capsys):
    from workbench.engine.graph_check import check_graphs

    target, head = triton_pair
    eager_graphs["perturb"] = 1.0  # every replayed value off by one
    for _ in range(2):  # the second call returns the kept result, silently
        check = check_graphs(target, head)
        assert not check.ok and check.message.startswith(
            "CUDA graphs off on cpu: the target forward (decode) replayed differs from eager (logit error")
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"warning: {check.message}"] and lines[0].endswith("; running eagerly")


def test_the_start_up_check_fails_when_capture_raises(triton_pair, monkeypatch, capsys):
    """The real capture on the CPU (no CUDA stream) raises: the check says so, no runner warns."""
    from workbench.engine import graph_check

    monkeypatch.setattr(graph_check, "PREFIXES", (8, 3))
    monkeypatch.setattr(graph_check, "_RESULTS", graph_check.weakref.WeakKeyDictionary())
    target, _ = triton_pair
    check = graph_check.check_graphs(target)
    assert not check.ok and "the target forward could not be captured and replayed" in check.message
    assert capsys.readouterr().err.count("warning:") == 1


def _greedy(engine, prompts) -> list[list[int]]:
    engine.add_requests(prompts, 6)
    engine.run()
    return [r.output_ids for r in engine.requests]


def test_a_graph_that_fails_in_an_engine_falls_back_to_eager_with_one_line(triton_pair, eager_graphs, monkeypatch,
                                                                            capsys):
    """With a fake CUDA flag on the CPU: the start-up check passes, then the engine's capture
    raises. The step runs eagerly with the same output, stderr gets one line for the target's
    and the draft's runners together, and later engines default to eager without another word."""
    from workbench.engine import graphs

    target, head = triton_pair
    spec, prompts = SpecConfig.linear(2), random_prompts(2, 12, seed=31)
    want = _greedy(Engine(target, head, spec, cuda_graphs=False), prompts)
    monkeypatch.setattr(graphs, "is_cuda", lambda device: True)
    graphed = Engine(target, head, spec)
    assert graphed.cuda_graphs and capsys.readouterr().err == ""  # the check passed

    def broken(runner, cap):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs.GraphedForward, "_record", broken)
    assert _greedy(graphed, prompts) == want
    assert graphed.graphed.replays == 0 and graphed.graphed.eager > 0 and graphed.graphed_draft.replays == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: CUDA graphs off on cpu: a graph of the ")
    later = Engine(target, head, spec)
    assert not later.cuda_graphs and _greedy(later, prompts) == want and capsys.readouterr().err == ""


def test_a_graph_that_fails_at_replay_falls_back_too(triton_pair, eager_graphs, monkeypatch, capsys):
    from workbench.engine import graphs
    from workbench.engine.graphs import GraphedTarget

    target, _ = triton_pair
    prompts = random_prompts(2, 16, seed=32)
    kv, alloc, slots = prefilled(target, prompts, spare=8)
    runner = GraphedTarget(target, kv, alloc.num_slots, alloc.num_slots + 1, make_buckets((1, 2, 4), (2, 4)))
    batch = decode_batch(prompts, alloc, slots)
    want = target.logits(target(batch, kv))
    monkeypatch.setattr(_Captured, "load", lambda self, *a: (_ for _ in ()).throw(RuntimeError("replay failed")))
    torch.testing.assert_close(runner(batch)[1], want)
    assert runner.failed == "RuntimeError: replay failed" and "target forward" in graphs.FAILED["cpu"]
    assert capsys.readouterr().err.count("warning: CUDA graphs off on cpu") == 1


def test_the_engine_default_follows_the_check(pair, monkeypatch):
    """With a fake CUDA flag: graphs on by default only where the check passed."""
    from workbench.engine import graph_check, graphs
    from workbench.engine.graph_check import GraphCheck

    target, head = pair
    asked = []
    verdict = {"ok": True}

    def check(t, d=None):
        asked.append(d)
        return GraphCheck(verdict["ok"], "fake")

    monkeypatch.setattr(graph_check, "check_graphs", check)
    monkeypatch.setattr(graphs, "is_cuda", lambda device: True)
    assert Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)).cuda_graphs is False  # torch backend: unchecked
    assert asked == []
    target.attention_backend = "triton"
    try:
        assert Engine(target, head, SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6)).cuda_graphs is True
        verdict["ok"] = False
        assert Engine(target, head, SpecConfig("vanilla")).cuda_graphs is False
    finally:
        target.attention_backend = "torch"
    assert asked == [head, None]  # the draft is checked for a speculative engine only


@pytest.mark.parametrize("fake_cuda", [True, False])
def test_engine_steps_are_serialised_on_cuda(pair, monkeypatch, fake_cuda):
    """App sessions step in threads; a capture must not see another thread's allocations. With
    the CUDA flag (faked) two engines never step at once; without it (the CPU) they may."""
    import threading
    import time

    from workbench.engine import graphs

    monkeypatch.setattr(graphs, "is_cuda", lambda device: fake_cuda)
    target, _ = pair
    inside, most, guard = [0], [0], threading.Lock()
    step = Engine._vanilla_step

    def tracked(self, *args):
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)  # let the other thread try to enter
        try:
            return step(self, *args)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(Engine, "_vanilla_step", tracked)
    engines = [Engine(target, None, SpecConfig("vanilla")) for _ in range(2)]
    for i, eng in enumerate(engines):
        eng.add_requests(random_prompts(1, 16, seed=20 + i), 6)
    threads = [threading.Thread(target=eng.run) for eng in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(eng.done for eng in engines)
    assert most[0] == (1 if fake_cuda else 2)


def test_graphs_hold_the_rope_tables_they_read(triton_pair, eager_graphs):
    """The table holds the context before the first capture (grown once if it did not); a later
    rebuild (an eager forward past the table) makes new tables, and the graph still holds the
    old ones."""
    from workbench.engine.graphs import GraphedTarget

    target, _ = triton_pair
    context = target.config.max_position_embeddings
    prompts = random_prompts(2, 16, seed=21)
    kv, alloc, slots = prefilled(target, prompts, spare=8)
    runner = GraphedTarget(target, kv, alloc.num_slots, alloc.num_slots + 1, make_buckets((1, 2, 4), (2, 4)))
    batch = decode_batch(prompts, alloc, slots)
    runner(batch)
    (cap,) = runner.graphs.values()
    cos, sin = cap.reads
    assert cos is target.rotary.cos and sin is target.rotary.sin and cos.shape[0] >= context
    second = GraphedTarget(target, kv, alloc.num_slots, alloc.num_slots + 1, make_buckets((1, 2, 4), (8,)))
    second(verify_batch(prompts, alloc, slots))
    assert next(iter(second.graphs.values())).reads[0] is cos  # no regrowth for a second runner
    target.rope(torch.tensor([cos.shape[0] + 5]), torch.float32)  # an eager forward past the table
    assert target.rotary.cos is not cos and cap.reads[0] is cos  # rebuilt; the graph keeps its own
    _, got = runner(batch)
    torch.testing.assert_close(got, runner.run_eager(batch)[1])
    assert runner.replays == 2


def test_a_request_past_the_context_runs_eagerly(pair):
    """Its positions are past the RoPE table a graph reads: no bucket."""
    from workbench.engine.graphs import GraphedTarget

    target, _ = pair
    target.attention_backend = "triton"
    try:
        context = target.config.max_position_embeddings
        kv = target.new_kv_pool(context + 8)
        runner = GraphedTarget(target, kv, context + 7, context + 8)
        inside = extend_batch(tokens=[[4]], prefix_slots=[list(range(context - 1))], new_slots=[[context]],
                              device="cpu")
        past = extend_batch(tokens=[[4]], prefix_slots=[list(range(context))], new_slots=[[context]], device="cpu")
        assert runner.bucket_for(inside) == Bucket(1, 1) and runner.bucket_for(past) is None
    finally:
        target.attention_backend = "torch"


def test_a_sticky_fault_in_a_capture_is_fatal(triton_pair, monkeypatch):
    """The eager fallback cannot run after an illegal address: one fatal line instead."""
    from workbench.attention import selfcheck
    from workbench.engine import graphs

    def fault(runner, cap):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(graphs.GraphedForward, "_record", fault)
    monkeypatch.setattr(selfcheck, "device_lost", lambda device, exc: True)
    target, _ = triton_pair
    prompts = random_prompts(2, 16, seed=22)
    kv, alloc, slots = prefilled(target, prompts, spare=8)
    runner = graphs.GraphedTarget(target, kv, alloc.num_slots, alloc.num_slots + 1, make_buckets((1, 2, 4), (2, 4)))
    with pytest.raises(selfcheck.DeviceFault, match="^fatal: the GPU faulted while capturing or replaying a CUDA "
                                                    "graph of the target forward"):
        runner(decode_batch(prompts, alloc, slots))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_start_up_check_and_one_pool_per_runner_on_gpu(pair):
    from workbench.engine import graph_check
    from workbench.engine.graphs import GraphedTarget

    target, head = pair
    target, head = target.cuda(), head.cuda()
    target.attention_backend = "triton"
    try:
        check = graph_check.check_graphs(target, head)
        assert check.ok, check.message
        assert graph_check.graphs_by_default(target, head)
        prompts = random_prompts(2, 16, seed=23)
        alloc = SlotAllocator(sum(map(len, prompts)) + 8)
        kv = target.new_kv_pool(alloc.num_slots + 1)
        slots = [alloc.alloc(len(p)) for p in prompts]
        target(extend_batch(tokens=prompts, prefix_slots=[[] for _ in prompts], new_slots=slots, device="cuda"), kv)
        runner = GraphedTarget(target, kv, alloc.num_slots, alloc.num_slots + 1, make_buckets((1, 2, 4), (2, 4, 8)))
        decode = extend_batch(tokens=[[5] for _ in prompts], prefix_slots=slots,
                              new_slots=[alloc.alloc(1) for _ in prompts], device="cuda")
        runner(decode)
        runner(verify_batch(prompts, alloc, slots, device="cuda"))
        assert runner.replays == 2 and len(runner.graphs) == 2
        assert runner.pool is not None and all(cap.graph.pool() == runner.pool for cap in runner.graphs.values())
    finally:
        target.attention_backend = "torch"
        target.cpu(), head.cpu()


def test_every_backend_says_whether_it_can_be_graphed_and_checked():
    from workbench.attention import BACKEND, BACKENDS

    assert set(BACKEND) == set(BACKENDS) and all(BACKEND[b].name == b for b in BACKENDS)
    assert [b for b in BACKENDS if BACKEND[b].graphable] == ["triton"]  # the torch backends loop on the host
    assert [b for b in BACKENDS if BACKEND[b].self_check] == ["triton"]
