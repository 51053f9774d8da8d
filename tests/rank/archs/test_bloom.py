"""BLOOM's adapter: a fused, head-interleaved QKV with biases (read as it is: no layout transform, so no layout
evidence), ALiBi, and LayerNorms outside the layers on both ends."""

import torch

from repro.rank.archs import bloom

ARCH = bloom.ADAPTER


def test_fused_qkv_with_bias_and_alibi_heads():
    model = ARCH.build(1)
    attention = ARCH.layer_list(model)[0].self_attention
    assert attention.query_key_value.weight.shape == (3 * 256, 256) and attention.query_key_value.bias is not None
    assert ARCH.fused_qkv is None  # DeepSpeed reads BLOOM's QKV in its own layout: nothing to convert
    assert model.config.n_head == 4


def test_the_final_norm_twin_covers_both_layer_norms_outside_the_layers():
    model = ARCH.build(1, {"layer_norm_epsilon": 1e-3})
    twin = ARCH.twins(model)["outer_layer_norm_at_eps_1e-5"]
    assert twin.transformer.ln_f.eps == twin.transformer.word_embeddings_layernorm.eps == 1e-5
    assert twin.transformer.h[0].input_layernorm.eps == 1e-3


def test_the_residual_twin_takes_the_residual_before_the_layer_norm(logits):
    assert "residual_before_layer_norm" not in ARCH.twins(ARCH.build(1))
    post = ARCH.build(1, {"apply_residual_connection_post_layernorm": True})
    twin = ARCH.twins(post)["residual_before_layer_norm"]
    torch.testing.assert_close(logits(twin), logits(ARCH.build(1)))  # the same weights, the default residual
    assert (logits(twin) - logits(post)).abs().max() > 1e-2
