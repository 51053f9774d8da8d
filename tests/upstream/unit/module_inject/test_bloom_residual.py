# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest

from deepspeed.module_inject.containers import BLOOMLayerPolicy

transformers = pytest.importorskip("transformers")


def tiny_bloom_layer(residual_post_layernorm):
    config = transformers.BloomConfig(vocab_size=64,
                                      hidden_size=32,
                                      n_layer=1,
                                      n_head=4,
                                      apply_residual_connection_post_layernorm=residual_post_layernorm)
    return transformers.BloomForCausalLM(config).eval().transformer.h[0]


def test_the_residual_before_the_layer_norm_is_served():
    layer = tiny_bloom_layer(False)

    qkvw, *_ = BLOOMLayerPolicy(layer, inference=True).attention()

    assert qkvw is layer.self_attention.query_key_value.weight


# The injected layer adds each residual from before its LayerNorm: a model that takes it from the LayerNorm's
# output is refused by name instead of computed wrong.
def test_the_residual_after_the_layer_norm_is_refused_by_name():
    layer = tiny_bloom_layer(True)

    with pytest.raises(ValueError, match="apply_residual_connection_post_layernorm=True"):
        BLOOMLayerPolicy(layer, inference=True)
