"""Our Llama-family forward against transformers, on tiny random checkpoints (Llama, Llama-3
RoPE scaling, tied embeddings, Qwen2-style GQA with q/k/v bias) and on SmolLM2 at fp32.

Tolerance: max |logit difference| <= 1e-4 at fp32 (the two implementations differ only in the
order of floating-point operations; observed ~5e-6 on tiny models)."""

import pytest
import torch

from helpers import fresh_prefill
from workbench.attention.batch import extend_batch
from workbench.kv import SlotAllocator
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
CASES = {
    "llama-gqa": dict(style="llama", num_heads=4, num_kv_heads=2),
    "llama3-scaling": dict(style="llama", rope_scaling=LLAMA3),
    "llama-tied": dict(style="llama", tie=True),
    "qwen2-gqa-bias": dict(style="qwen2", num_heads=4, num_kv_heads=1),
}
TOL = 1e-4


def hf_logits(path, ids: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    with torch.no_grad():
        return hf(ids[None]).logits[0].float()


@pytest.mark.parametrize("name", CASES)
def test_tiny_forward_matches_transformers(name, tmp_path):
    path = make_tiny_checkpoint(tmp_path, **CASES[name])
    ours = load_target(path)
    ids = torch.randint(0, 96, (90,), generator=torch.Generator().manual_seed(1))
    ref = hf_logits(path, ids)
    # Prefill 50, then extend 40 through the cache: the same numbers as one pass.
    kv, alloc = ours.new_kv_pool(90), SlotAllocator(90)
    a, b = alloc.alloc(50), alloc.alloc(40)
    h1 = ours(extend_batch(tokens=[ids[:50].tolist()], prefix_slots=[[]], new_slots=[a], device="cpu"), kv)
    h2 = ours(extend_batch(tokens=[ids[50:].tolist()], prefix_slots=[a], new_slots=[b], device="cpu"), kv)
    got = ours.logits(torch.cat([h1, h2]))
    assert (got - ref).abs().max() <= TOL


def test_load_is_strict(tmp_path):
    from safetensors.torch import load_file, save_file

    path = make_tiny_checkpoint(tmp_path)
    state = load_file(str(path / "model.safetensors"))
    state["model.layers.0.mlp.extra.weight"] = torch.zeros(2)
    save_file(state, str(path / "model.safetensors"))
    with pytest.raises(ValueError, match="unexpected.*extra"):
        load_target(path)


@pytest.mark.slow
def test_smollm2_forward_matches_transformers(smollm2_dir):
    ours = load_target(smollm2_dir)
    assert ours.config.num_layers == 30 and ours.config.hidden_size == 576 and ours.config.vocab_size == 49152
    ids = torch.randint(0, 49152, (48,), generator=torch.Generator().manual_seed(0))
    _, _, hidden = fresh_prefill(ours, ids.tolist())
    got = ours.logits(hidden)
    ref = hf_logits(smollm2_dir, ids)
    assert (got - ref).abs().max() <= TOL * ref.abs().max().clamp_min(1)


def test_no_init_skips_the_draws_and_puts_them_back():
    """``load_target`` builds its modules under ``no_init``: no random draw touches a parameter
    (every one is read from the checkpoint next), and the draws work again afterwards, after an
    error too."""
    from torch import nn

    from workbench.models.loading import no_init

    w = torch.zeros(64)
    with no_init():
        nn.init.normal_(w)
        layer = nn.Linear(4, 3)
    assert torch.count_nonzero(w) == 0 and layer.weight.shape == (3, 4)
    with pytest.raises(RuntimeError, match="inside"):
        with no_init():
            raise RuntimeError("inside")
    nn.init.normal_(w)
    assert torch.count_nonzero(w) > 0
