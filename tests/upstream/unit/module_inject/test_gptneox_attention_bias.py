# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import GPTNEOXLayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container

transformers = pytest.importorskip("transformers")


def tiny_gpt_neox(attention_bias):
    config = transformers.GPTNeoXConfig(vocab_size=64,
                                        hidden_size=32,
                                        num_hidden_layers=1,
                                        num_attention_heads=4,
                                        intermediate_size=128,
                                        max_position_embeddings=64,
                                        rotary_pct=0.25,
                                        attention_bias=attention_bias)
    return transformers.GPTNeoXForCausalLM(config).eval()


def build_container(model):
    """The layer's container, as the Hybrid Engine builds it, in the inference layout."""
    layer = model.gpt_neox.layers[0]
    container = policy_to_ds_container(policy=GPTNEOXLayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=0,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    container.transform_for_inference()
    return container


def test_attention_biases_are_taken():
    model = tiny_gpt_neox(attention_bias=True)

    container = build_container(model)

    assert container.qkvb is model.gpt_neox.layers[0].attention.query_key_value.bias
    assert container.dense_b is model.gpt_neox.layers[0].attention.dense.bias


# Without attention biases (transformers' attention_bias=False) the injected layer cannot be built: the
# container refuses the model by name instead of failing on a None bias.
def test_a_model_without_attention_biases_is_refused_by_name():
    model = tiny_gpt_neox(attention_bias=False)
    if model.gpt_neox.layers[0].attention.query_key_value.bias is not None:
        pytest.skip("this transformers version has no attention_bias for GPT-NeoX")

    with pytest.raises(ValueError, match="attention_bias=False"):
        build_container(model)
