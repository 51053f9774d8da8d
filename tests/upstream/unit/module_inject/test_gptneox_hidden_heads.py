# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest

from deepspeed.module_inject.containers import GPTNEOXLayerPolicy

transformers = pytest.importorskip("transformers")


def test_get_hidden_heads_reads_the_layer_config():
    config = transformers.GPTNeoXConfig(vocab_size=64,
                                        hidden_size=32,
                                        num_hidden_layers=1,
                                        num_attention_heads=4,
                                        intermediate_size=64,
                                        max_position_embeddings=64,
                                        layer_norm_eps=1e-3)
    layer = transformers.GPTNeoXForCausalLM(config).gpt_neox.layers[0]

    hidden_size, num_attention_heads, layer_norm_eps, _ = GPTNEOXLayerPolicy(layer).get_hidden_heads()

    assert (hidden_size, num_attention_heads, layer_norm_eps) == (32, 4, 1e-3)
