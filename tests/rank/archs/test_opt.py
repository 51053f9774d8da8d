"""OPT's adapter: DeepSpeed-Chat's model; its twins are what the injected layer may compute instead (a post-LayerNorm
model's two LayerNorms swapped; ReLU), each present only when the model differs from it."""

import torch

from repro.rank.archs import opt

ARCH = opt.ADAPTER


def test_the_tiny_default_is_pre_layer_norm_relu_with_biases_and_no_dropout():
    config = ARCH.config()
    assert config.do_layer_norm_before and config.activation_function == "relu" and config.enable_bias
    assert config.dropout == 0.0 and ARCH.fused_qkv is None
    assert ARCH.twins(ARCH.build(1)) == {}


def test_a_post_layer_norm_model_has_its_swapped_layer_norms_twin(logits):
    model = ARCH.build(1, {"do_layer_norm_before": False})
    twin = ARCH.twins(model)["swapped_layer_norms"]
    for layer, twin_layer in zip(model.model.decoder.layers, twin.model.decoder.layers, strict=True):
        assert torch.equal(twin_layer.self_attn_layer_norm.weight, layer.final_layer_norm.weight)
        assert torch.equal(twin_layer.final_layer_norm.weight, layer.self_attn_layer_norm.weight)
        assert not twin_layer.do_layer_norm_before
    assert (logits(twin) - logits(model)).abs().max() > 1e-3


def test_a_post_layer_norm_model_has_its_twin_without_qkv_biases(logits):
    model = ARCH.build(1, {"do_layer_norm_before": False})
    twin = ARCH.twins(model)["no_qkv_bias"]
    for layer in twin.model.decoder.layers:
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
            assert not proj.bias.any()
        assert layer.self_attn.out_proj.bias.any()  # only the q/k/v biases
    assert model.model.decoder.layers[0].self_attn.q_proj.bias.any()  # the model keeps its own
    assert (logits(twin) - logits(model)).abs().max() > 1e-3


def test_a_gelu_model_has_its_relu_twin(logits):
    model = ARCH.build(1, {"activation_function": "gelu"})
    twin = ARCH.twins(model)["relu_activation"]
    assert (logits(twin) - logits(model)).abs().max() > 1e-3
    torch.testing.assert_close(logits(twin), logits(ARCH.build(1)), rtol=0, atol=1e-5)  # same weights, ReLU
