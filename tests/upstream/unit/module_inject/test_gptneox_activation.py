# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import GPTNEOXLayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container
from deepspeed.utils.types import ActivationFuncType

transformers = pytest.importorskip("transformers")


def tiny_gpt_neox(hidden_act):
    config = transformers.GPTNeoXConfig(vocab_size=64,
                                        hidden_size=32,
                                        num_hidden_layers=1,
                                        num_attention_heads=4,
                                        intermediate_size=128,
                                        max_position_embeddings=64,
                                        rotary_pct=0.25,
                                        hidden_act=hidden_act)
    return transformers.GPTNeoXForCausalLM(config).eval()


def inference_config_of(model):
    """The config the injected layer is built from, as the Hybrid Engine and init_inference() build it."""
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
    return container.ds_model_config


# The injected MLP computes the activation the config names: GELU (its tanh approximation) for GELU variants,
# ReLU for relu; Pythia is gelu.
@pytest.mark.parametrize("hidden_act, mlp_act_func_type", [
    ("gelu", ActivationFuncType.GELU),
    ("gelu_new", ActivationFuncType.GELU),
    ("relu", ActivationFuncType.ReLU),
])
def test_inference_config_uses_the_models_activation(hidden_act, mlp_act_func_type):
    model = tiny_gpt_neox(hidden_act)

    assert inference_config_of(model).mlp_act_func_type == mlp_act_func_type


# The kernel has no other activation: one it cannot compute is refused by name, not replaced by GELU.
@pytest.mark.parametrize("hidden_act", ["silu"])
def test_an_activation_the_kernel_lacks_is_refused_by_name(hidden_act):
    model = tiny_gpt_neox(hidden_act)

    with pytest.raises(ValueError, match=f"hidden_act='{hidden_act}'"):
        inference_config_of(model)
