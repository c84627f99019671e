"""The ``torch`` attention backend (fused SDPA per request) against the specification
(``attention_reference``): tree masks, causal extends after a prefix, prefill, one-query
decode, GQA, half dtypes, a row with no visible key; and the ``padded`` backend (a decoding
batch in one SDPA call) likewise."""

import pytest
import torch

from workbench.attention import attend, attention_padded, attention_reference, attention_sdpa, build_meta

TOL = {torch.float32: (2e-5, 1e-5), torch.bfloat16: (2e-2, 1e-2), torch.float16: (2e-3, 2e-3)}


def ragged_case(q_lens, prefix_lens, extra_lens=None, *, hq=4, hkv=2, dh=16, dtype=torch.float32, causal=False,
                seed=0):
    """Shuffled pool slots; tree-like masks (each row sees itself and a random subset before it)."""
    gen = torch.Generator().manual_seed(seed)
    extra_lens = list(q_lens) if extra_lens is None else list(extra_lens)
    n_slots = sum(prefix_lens) + sum(extra_lens) + 7
    perm = torch.randperm(n_slots, generator=gen).tolist()
    pre, ext, masks, pos = [], [], [], 0
    for n, p, e in zip(q_lens, prefix_lens, extra_lens):
        pre.append(perm[pos : pos + p])
        ext.append(perm[pos + p : pos + p + e])
        pos += p + e
        m = (torch.rand(n, e, generator=gen) < 0.5).tril(e - n)
        m[torch.arange(n), torch.arange(e - n, e)] = True
        masks.append(m)
    meta = build_meta(list(q_lens), pre, extra_slots=ext, masks=None if causal else masks)
    q = torch.randn(sum(q_lens), hq, dh, generator=gen).to(dtype)
    k = torch.randn(n_slots, hkv, dh, generator=gen).to(dtype)
    v = torch.randn(n_slots, hkv, dh, generator=gen).to(dtype)
    return q, k, v, meta


def assert_matches_reference(q, k, v, meta, scale=None, backend=attention_sdpa):
    out = backend(q, k, v, meta, scale=scale)
    ref = attention_reference(q, k, v, meta, scale=scale)
    assert out.shape == ref.shape and out.dtype == q.dtype
    atol, rtol = TOL[q.dtype]
    err = (out.float() - ref.float()).abs()
    assert (err <= atol + rtol * ref.float().abs()).all(), f"max abs error {err.max().item():.3g}"


@pytest.mark.parametrize("prefix", [0, 1, 37])
@pytest.mark.parametrize("hq,hkv", [(2, 2), (6, 2), (9, 3)])
def test_tree_masks_after_a_prefix(prefix, hq, hkv):
    assert_matches_reference(*ragged_case([5, 3], [prefix, prefix + 4], [5, 6], hq=hq, hkv=hkv))


@pytest.mark.parametrize("q_lens,prefix_lens", [([7], [0]), ([1, 1, 1], [5, 0, 12]), ([4, 1, 6], [9, 3, 0])])
def test_causal_prefill_decode_and_extend(q_lens, prefix_lens):
    assert_matches_reference(*ragged_case(q_lens, prefix_lens, causal=True, hq=6, hkv=2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_dtypes(dtype):
    assert_matches_reference(*ragged_case([4, 2], [11, 3], [6, 2], dtype=dtype), scale=0.3)


def test_row_without_keys_gets_zeros_and_empty_requests_are_skipped():
    q, k, v, meta = ragged_case([3, 0, 2], [0, 4, 0], [3, 0, 2])
    meta.mask[:3] = False  # request 0, query 0 sees nothing
    out = attention_sdpa(q, k, v, meta)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert_matches_reference(q, k, v, meta)


def test_torch_backend_is_sdpa():
    q, k, v, meta = ragged_case([3], [5], [4])
    assert torch.equal(attend(q, k, v, meta, scale=0.25, backend="torch"), attention_sdpa(q, k, v, meta, scale=0.25))


def test_contiguous_slots_are_read_as_a_view():
    from workbench.attention.sdpa import contiguous_run

    q, k, v, _ = ragged_case([2], [5], [2])
    meta = build_meta([2, 1], [[3, 4, 5, 6, 7], [9, 1]], extra_slots=[[8, 10], [2]], masks=None)  # 3..8, then a gap
    assert contiguous_run(meta, 0, meta.kv_slots[:7]) is None
    meta = build_meta([2, 1], [[3, 4, 5, 6, 7], [9, 1]], extra_slots=[[8, 9], [2]], masks=None)
    assert contiguous_run(meta, 0, meta.kv_slots[:7]) == slice(3, 10)
    assert contiguous_run(meta, 1, meta.kv_slots[7:]) is None  # 9, 1, 2: not ascending
    q = torch.randn(3, 4, 16)
    assert_matches_reference(q, k, v, meta)


@pytest.mark.parametrize("prefix_lens", [[5, 0, 12], [0], [40, 1, 7, 300, 2, 9]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_padded_decode_batch_matches_the_reference(prefix_lens, dtype):
    """A plain-decoding step: one causal query per request after prefixes of any length
    (shuffled slots, so each request's keys are gathered; the padding must stay invisible)."""
    case = ragged_case([1] * len(prefix_lens), prefix_lens, causal=True, hq=9, hkv=3, dtype=dtype)
    assert_matches_reference(*case, scale=0.2, backend=attention_padded)
    q, k, v, meta = case
    assert "padded" in meta.cache  # it took the one-call path


@pytest.mark.parametrize("case", [dict(q_lens=[3, 2], prefix_lens=[4, 0], extra_lens=[3, 5]),  # tree masks
                                  dict(q_lens=[1, 4], prefix_lens=[6, 2], causal=True)])  # an extend
def test_padded_serves_any_other_forward_as_the_torch_backend(case):
    q, k, v, meta = ragged_case(**case)
    out = attend(q, k, v, meta, scale=0.25, backend="padded")
    assert "padded" not in meta.cache and torch.equal(out, attention_sdpa(q, k, v, meta, scale=0.25))
    assert_matches_reference(q, k, v, meta, 0.25, backend=attention_padded)


def test_padded_decodes_a_batch_in_one_sdpa_call_per_layer(monkeypatch):
    """Why the padded backend exists: per layer, plain decoding of B requests costs B fused calls
    (and their gathers) through the torch backend, one through padded."""
    import torch.nn.functional as F

    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    q, k, v, meta = ragged_case([1] * 6, [3, 9, 1, 4, 7, 2], causal=True)
    attention_sdpa(q, k, v, meta)
    assert len(calls) == 6
    calls.clear()
    attention_padded(q, k, v, meta)
    assert len(calls) == 1
