# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import GPTNEOXLayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container

transformers = pytest.importorskip("transformers")


def tiny_gpt_neox(use_parallel_residual):
    config = transformers.GPTNeoXConfig(vocab_size=64,
                                        hidden_size=32,
                                        num_hidden_layers=2,
                                        num_attention_heads=4,
                                        intermediate_size=128,
                                        max_position_embeddings=64,
                                        rotary_pct=0.25,
                                        use_parallel_residual=use_parallel_residual)
    return transformers.GPTNeoXForCausalLM(config).eval()


def inference_container(model, layer_id):
    """Builds a layer's container as DeepSpeedHybridEngine.new_inference_container() does."""
    layer = model.gpt_neox.layers[layer_id]
    container = policy_to_ds_container(policy=GPTNEOXLayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=layer_id,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    return container


# GPT-NeoX computes x = x + attn(ln1(x)) + mlp(ln2(x)) with the parallel residual and
# x = x + attn(ln1(x)); x = x + mlp(ln2(x)) without it, which is DeepSpeed's mlp_after_attn.
@pytest.mark.parametrize("use_parallel_residual", [True, False])
def test_mlp_after_attn_follows_use_parallel_residual(use_parallel_residual):
    model = tiny_gpt_neox(use_parallel_residual)

    for layer_id in range(model.config.num_hidden_layers):
        container = inference_container(model, layer_id)
        assert container.rotary_dim == 2
        assert container.ds_model_config.mlp_after_attn == (not use_parallel_residual)
