"""GPT-J's adapter: separate Q, K, V without bias, a partial interleaved rotary, and the gelu_new twin that names
an activation the injected MLP ignores."""

import torch

from repro.rank.archs import gptj

ARCH = gptj.ADAPTER


def test_separate_qkv_without_bias_and_a_partial_rotary():
    model = ARCH.build(1)
    assert ARCH.fused_qkv is None
    attention = ARCH.layer_list(model)[0].attn
    assert attention.q_proj.bias is None and attention.k_proj.bias is None and attention.v_proj.bias is None
    assert attention.rotary_dim == 16 < attention.head_dim == 64  # GPT-J 6B rotates 64 of 256


def test_the_gelu_new_twin_exists_only_for_another_activation_and_computes_gelu_new(logits):
    assert set(ARCH.twins(ARCH.build(1))) == set()  # gelu_new: nothing to tell apart
    relu = ARCH.build(1, {"activation_function": "relu"})
    twin = ARCH.twins(relu)["tanh_gelu_activation"]
    gelu_new = ARCH.build(1, {"activation_function": "gelu_new"})
    torch.testing.assert_close(logits(twin), logits(gelu_new))
    assert (logits(twin) - logits(relu)).abs().max() > 1e-2
