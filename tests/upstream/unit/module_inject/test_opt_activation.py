# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import HFOPTLayerPolicy
from deepspeed.module_inject.policy import TransformerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container
from deepspeed.utils.types import ActivationFuncType

transformers = pytest.importorskip("transformers")


def tiny_opt(activation_function):
    config = transformers.OPTConfig(vocab_size=64,
                                    hidden_size=32,
                                    num_hidden_layers=1,
                                    num_attention_heads=4,
                                    ffn_dim=128,
                                    max_position_embeddings=64,
                                    word_embed_proj_dim=32,
                                    activation_function=activation_function)
    return transformers.OPTForCausalLM(config).eval()


def inference_config_of(model):
    """The config the injected layer is built from, as the Hybrid Engine builds it: without init_inference(),
    which is what sets TransformerPolicy.hf_model_config."""
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
    return container.ds_model_config


@pytest.mark.parametrize("activation_function, mlp_act_func_type", [
    ("relu", ActivationFuncType.ReLU),
    ("gelu", ActivationFuncType.GELU),
])
def test_inference_config_uses_the_models_activation(activation_function, mlp_act_func_type, monkeypatch):
    monkeypatch.delattr(TransformerPolicy, "hf_model_config", raising=False)
    model = tiny_opt(activation_function)

    assert inference_config_of(model).mlp_act_func_type == mlp_act_func_type


# TransformerPolicy.hf_model_config is class-wide: an earlier init_inference() leaves another model's config there.
def test_the_layers_own_activation_wins_over_another_models_config(monkeypatch):
    monkeypatch.setattr(TransformerPolicy, "hf_model_config", tiny_opt("gelu").config, raising=False)
    model = tiny_opt("relu")

    assert inference_config_of(model).mlp_act_func_type == ActivationFuncType.ReLU
