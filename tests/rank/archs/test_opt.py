"""OPT's adapter: DeepSpeed-Chat's model; its twins are what the injected layer may compute instead (the
LayerNorms before attention and MLP; ReLU), each present only when the model differs from it."""

import torch

from repro.rank.archs import opt

ARCH = opt.ADAPTER


def test_the_tiny_default_is_pre_layer_norm_relu_with_biases_and_no_dropout():
    config = ARCH.config()
    assert config.do_layer_norm_before and config.activation_function == "relu" and config.enable_bias
    assert config.dropout == 0.0 and ARCH.fused_qkv is None
    assert ARCH.twins(ARCH.build(1)) == {}


def test_a_post_layer_norm_model_has_its_pre_layer_norm_twin(logits):
    model = ARCH.build(1, {"do_layer_norm_before": False})
    twin = ARCH.twins(model)["pre_layer_norm"]
    assert all(layer.do_layer_norm_before for layer in twin.model.decoder.layers)
    assert (logits(twin) - logits(model)).abs().max() > 1e-2


def test_a_gelu_model_has_its_relu_twin(logits):
    model = ARCH.build(1, {"activation_function": "gelu"})
    twin = ARCH.twins(model)["relu_activation"]
    assert (logits(twin) - logits(model)).abs().max() > 1e-3
    torch.testing.assert_close(logits(twin), logits(ARCH.build(1)), rtol=0, atol=1e-5)  # same weights, ReLU
