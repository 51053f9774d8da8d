# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import HFOPTLayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container

transformers = pytest.importorskip("transformers")


def tiny_opt(layer_norm_elementwise_affine):
    config = transformers.OPTConfig(vocab_size=64,
                                    hidden_size=32,
                                    num_hidden_layers=1,
                                    num_attention_heads=4,
                                    ffn_dim=128,
                                    max_position_embeddings=64,
                                    word_embed_proj_dim=32)
    model = transformers.OPTForCausalLM(config).eval()
    if not layer_norm_elementwise_affine:
        # What OPTConfig(layer_norm_elementwise_affine=False) builds; some transformers versions (4.57) fail to
        # initialise such a model, so the LayerNorms are replaced here.
        layer = model.model.decoder.layers[0]
        layer.self_attn_layer_norm = torch.nn.LayerNorm(32, elementwise_affine=False)
        layer.final_layer_norm = torch.nn.LayerNorm(32, elementwise_affine=False)
    return model


def build_container(model):
    """The layer's container, as the Hybrid Engine and init_inference() build it."""
    layer = model.model.decoder.layers[0]
    container = policy_to_ds_container(policy=HFOPTLayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=0,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    return container


def test_layer_norm_weights_are_taken():
    model = tiny_opt(layer_norm_elementwise_affine=True)
    layer = model.model.decoder.layers[0]

    container = build_container(model)

    assert container.input_nw is layer.self_attn_layer_norm.weight
    assert container.attn_nw is layer.final_layer_norm.weight


# Without LayerNorm weights (transformers' layer_norm_elementwise_affine=False) the injected layer cannot compute
# the model: the policy refuses it by name instead of handing the layer None weights.
def test_a_model_without_layer_norm_weights_is_refused_by_name():
    model = tiny_opt(layer_norm_elementwise_affine=False)

    with pytest.raises(ValueError, match="layer_norm_elementwise_affine=False"):
        build_container(model)
