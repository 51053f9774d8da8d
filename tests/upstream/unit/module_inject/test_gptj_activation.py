# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import HFGPTJLayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container
from deepspeed.utils.types import ActivationFuncType

transformers = pytest.importorskip("transformers")


def tiny_gptj(activation_function):
    config = transformers.GPTJConfig(vocab_size=64,
                                     n_embd=32,
                                     n_layer=1,
                                     n_head=4,
                                     n_positions=64,
                                     rotary_dim=4,
                                     activation_function=activation_function)
    return transformers.GPTJForCausalLM(config).eval()


def inference_config_of(model):
    """The config the injected layer is built from, as the Hybrid Engine and init_inference() build it."""
    layer = model.transformer.h[0]
    container = policy_to_ds_container(policy=HFGPTJLayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=0,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    return container.ds_model_config


# GPT-J's MLP runs through fused_gemm_gelu: GELU, the activation of every GPT-J checkpoint (gelu_new), is served.
@pytest.mark.parametrize("activation_function", ["gelu_new", "gelu"])
def test_gelu_activations_are_served(activation_function):
    model = tiny_gptj(activation_function)

    assert inference_config_of(model).mlp_act_func_type == ActivationFuncType.GELU


# Any other activation would be computed as GELU: the policy refuses the model by name.
@pytest.mark.parametrize("activation_function", ["relu", "silu"])
def test_an_activation_the_mlp_lacks_is_refused_by_name(activation_function):
    model = tiny_gptj(activation_function)

    with pytest.raises(ValueError, match=f"activation_function='{activation_function}'"):
        inference_config_of(model)
