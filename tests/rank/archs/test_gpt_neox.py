"""GPT-NeoX's adapter: the reproduction's tiny Pythia, its fused QKV, and a twin for each setting the Hybrid
Engine has been seen to ignore, present only when the model has that setting."""

import torch

from repro.model_registry import TINY
from repro.rank.archs import gpt_neox

ARCH = gpt_neox.ADAPTER


def test_the_tiny_default_is_the_reproductions():
    assert ARCH.tiny == TINY and ARCH.config().use_parallel_residual is True


def test_the_fused_qkv_is_a_parameter_of_three_hidden_rows():
    layer = ARCH.layer_list(ARCH.build(1))[0]
    assert layer.get_parameter(ARCH.fused_qkv).shape == (3 * TINY["hidden_size"], TINY["hidden_size"])


def test_no_twin_for_a_model_at_deepspeeds_defaults():
    assert ARCH.twins(ARCH.build(1)) == {}


def test_a_sequential_residual_model_has_its_parallel_residual_twin(logits):
    model = ARCH.build(1, {"use_parallel_residual": False})
    twin = ARCH.twins(model)["parallel_residual"]
    assert all(layer.use_parallel_residual for layer in twin.gpt_neox.layers)
    assert not any(layer.use_parallel_residual for layer in model.gpt_neox.layers)
    assert (logits(twin) - logits(model)).abs().max() > 1e-2


def test_a_rotary_base_other_than_10000_has_its_base_10000_twin(logits):
    model = ARCH.build(1, {"rotary_emb_base": 1_000_000, "rotary_pct": 1.0})
    twins = ARCH.twins(model)
    assert list(twins) == ["rotary_base_10000"]
    default = ARCH.build(1, {"rotary_pct": 1.0})  # the same weights at base 10000
    torch.testing.assert_close(logits(twins["rotary_base_10000"]), logits(default), rtol=0, atol=1e-5)
    assert (logits(twins["rotary_base_10000"]) - logits(model)).abs().max() > 1e-3


def test_a_layer_norm_eps_other_than_1e5_has_its_outer_norm_twin():
    model = ARCH.build(1, {"layer_norm_eps": 1e-3})
    twin = ARCH.twins(model)["outer_layer_norm_at_eps_1e-5"]
    assert twin.gpt_neox.final_layer_norm.eps == 1e-5 and twin.gpt_neox.layers[0].input_layernorm.eps == 1e-3


def test_a_relu_model_has_its_gelu_twin(logits):
    model = ARCH.build(1, {"hidden_act": "relu"})
    twins = ARCH.twins(model)
    assert list(twins) == ["gelu_activation"]
    default = ARCH.build(1)  # the same weights with Pythia's gelu
    torch.testing.assert_close(logits(twins["gelu_activation"]), logits(default), rtol=0, atol=1e-5)
    assert (logits(twins["gelu_activation"]) - logits(model)).abs().max() > 1e-3


def test_a_scaled_rotary_has_its_unscaled_twin(logits):
    model = ARCH.build(1, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rotary_pct": 1.0})
    twins = ARCH.twins(model)
    assert list(twins) == ["unscaled_rotary"]
    default = ARCH.build(1, {"rotary_pct": 1.0})  # the same weights, rotated unscaled
    torch.testing.assert_close(logits(twins["unscaled_rotary"]), logits(default), rtol=0, atol=1e-5)
    assert (logits(twins["unscaled_rotary"]) - logits(model)).abs().max() > 1e-3
