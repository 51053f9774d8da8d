"""Layout evidence for a fused QKV: each state is named only when the tensor equals it (repro.rank.qkv_states)."""

import types

import pytest
import torch

from repro.rank import layout, qkv_states

HEADS = 4


@pytest.fixture()
def w():
    return torch.randn(3 * 32, 16, generator=torch.Generator().manual_seed(0))


def test_each_layout_of_the_qkv_weight_is_named(w):
    inference = layout.to_inference(w, HEADS)
    assert qkv_states.qkv_state(w, w, HEADS) == "training"
    assert qkv_states.qkv_state(inference, w, HEADS) == "inference"
    assert qkv_states.qkv_state(layout.to_inference(inference, HEADS), w, HEADS) == "inference_twice"
    assert qkv_states.qkv_state(layout.to_training(w, HEADS), w, HEADS) == "training_inverse"


def test_a_tensor_equal_to_no_layout_is_never_named_one(w):
    near = w + 1e-3
    assert qkv_states.qkv_state(near, w, HEADS).startswith("none (nearest training")
    assert qkv_states.qkv_state(torch.full_like(w, float("nan")), w, HEADS).startswith("none")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_lora_round_trip_keeps_the_training_layout_and_a_lost_transform_does_not(w, dtype):
    """(W + d) - d rounds once in half precision (one fp16 spacing measured under ZeRO-2 with LoRA): still the
    training layout, where fp32's tolerance would have named no layout."""
    half = (w * 0.02).to(dtype)  # the tiny models' init scale
    d = (torch.randn(w.shape, generator=torch.Generator().manual_seed(1)) * 0.01).to(dtype)
    round_trip = (half + d) - d
    assert (round_trip != half).any()
    assert (round_trip.float() - half.float()).abs().max() > qkv_states.STATE_TOL
    assert qkv_states.qkv_state(round_trip, half, HEADS) == "training"
    assert qkv_states.qkv_state(layout.to_inference(half, HEADS), half, HEADS) == "inference"
    assert qkv_states.qkv_state(half + 0.01, half, HEADS).startswith("none")


def test_gathered_vs_originals_names_changes_and_the_fused_qkv_layout(w):
    module = torch.nn.Module()
    module.attention = torch.nn.Module()
    module.attention.query_key_value = torch.nn.Linear(16, 3 * 32)
    module.attention.dense = torch.nn.Linear(32, 32)
    with torch.no_grad():
        module.attention.query_key_value.weight.copy_(w)
    originals = {n: p.detach().clone() for n, p in module.named_parameters()}
    engine = types.SimpleNamespace(module=module)
    fused = "query_key_value.weight"
    same = qkv_states.gathered_vs_originals(engine, originals, HEADS, fused)
    assert same["base"] == {"changed": [], "max_abs": 0.0, "bitwise_equal": True}
    assert same["qkv_layouts"] == ["training"]
    with torch.no_grad():
        module.attention.query_key_value.weight.copy_(layout.to_inference(w, HEADS))
        module.attention.dense.bias[0] += 0.25
    moved = qkv_states.gathered_vs_originals(engine, originals, HEADS, fused)
    assert moved["qkv_layouts"] == ["inference"] and not moved["base"]["bitwise_equal"]
    assert set(moved["base"]["changed"]) == {"attention.query_key_value.weight", "attention.dense.bias"}
    assert qkv_states.gathered_vs_originals(engine, originals, HEADS, None)["qkv_layouts"] == []  # no fused QKV


def test_a_ranks_slice_split_by_the_models_head_count_is_named_only_given_that_count(w):
    """`w`: a rank's slice holding HEADS // 2 of the model's HEADS heads (an mpu over 2 ranks)."""
    held = HEADS // 2
    by_model = layout.to_inference(w, HEADS)
    assert qkv_states.qkv_state(by_model, w, held, model_heads=HEADS) == qkv_states.BY_MODEL_HEADS
    assert qkv_states.qkv_state(layout.to_inference(w, held), w, held, model_heads=HEADS) == "inference"
    assert qkv_states.qkv_state(by_model, w, held).startswith("none")  # without the model's count: unnamed
