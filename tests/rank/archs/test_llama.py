"""Llama's adapter: the twins are what DeepSpeed's injected layer hard-codes (SiLU gating, no biases), each
present only when the model differs from it, and each really computes something else."""

import torch

from repro.rank.archs import llama

ARCH = llama.ADAPTER


def test_no_twin_for_a_model_the_injected_layer_computes():
    assert ARCH.fused_qkv is None
    assert ARCH.twins(ARCH.build(1)) == {}
    assert ARCH.twins(ARCH.build(1, {"num_key_value_heads": 2})) == {}  # grouped-query: served by 0037, no twin


def test_gelu_gating_has_its_silu_twin(logits):
    model = ARCH.build(1, {"hidden_act": "gelu"})
    twin = ARCH.twins(model)["silu_gating"]
    assert (logits(twin) - logits(model)).abs().max() > 1e-3
    assert (logits(twin) - logits(ARCH.build(1))).abs().max() < 1e-5  # the same weights, SiLU-gated


def test_layer_biases_have_their_biasless_twin(logits):
    for field in ("attention_bias", "mlp_bias"):
        model = ARCH.build(1, {field: True})
        twin = ARCH.twins(model)["no_layer_biases"]
        biases = [p for n, p in twin.model.layers.named_parameters() if n.endswith(".bias")]
        assert biases and all(torch.count_nonzero(b) == 0 for b in biases)
        assert (logits(twin) - logits(model)).abs().max() > 1e-3
