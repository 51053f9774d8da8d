# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch
from packaging import version

import deepspeed
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import HFOPTLayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container
from unit.common import DistributedTest

transformers = pytest.importorskip("transformers")


def tiny_opt(enable_bias):
    config = transformers.OPTConfig(vocab_size=64,
                                    hidden_size=32,
                                    num_hidden_layers=1,
                                    num_attention_heads=4,
                                    ffn_dim=128,
                                    max_position_embeddings=64,
                                    word_embed_proj_dim=32,
                                    enable_bias=enable_bias)
    return transformers.OPTForCausalLM(config).eval()


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


def test_biases_are_taken():
    model = tiny_opt(enable_bias=True)
    attention = model.model.decoder.layers[0].self_attn

    container = build_container(model)

    expected = torch.cat((attention.q_proj.bias, attention.k_proj.bias, attention.v_proj.bias))
    assert torch.equal(container.qkvb, expected)
    assert container.dense_b is attention.out_proj.bias


# Without biases (transformers' enable_bias=False) the injected layer cannot be built: the policy refuses the
# model by name instead of failing on a None bias.
def test_a_model_without_biases_is_refused_by_name():
    model = tiny_opt(enable_bias=False)
    if model.model.decoder.layers[0].self_attn.q_proj.bias is not None:
        pytest.skip("this transformers version has no enable_bias for OPT")

    with pytest.raises(ValueError, match="enable_bias=False"):
        build_container(model)


@pytest.mark.skipif(version.parse("4.49") <= version.parse(transformers.__version__) < version.parse("5.24"),
                    reason="DeepSpeed leaves OPT to transformers from 4.49 to 5.23")
class TestHybridEngineOPTBiasRefusal(DistributedTest):
    world_size = 1

    # End to end: the model the injected layer cannot be built for is refused where the user sets the Hybrid
    # Engine up, by name. DeepSpeed injects OPT on transformers < 4.49 and >= 5.24.
    def test_a_model_without_biases_is_refused_at_initialize(self):
        model = tiny_opt(enable_bias=False)
        ds_config = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {
                "stage": 2
            },
            "optimizer": {
                "type": "Adam",
                "params": {
                    "lr": 1e-3,
                    "torch_adam": True
                }
            },
            "hybrid_engine": {
                "enabled": True,
                "max_out_tokens": 64
            },
        }

        with pytest.raises(ValueError, match="enable_bias=False"):
            deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
