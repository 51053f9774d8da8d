# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import LLAMALayerPolicy
from deepspeed.module_inject.containers import llama
from deepspeed.module_inject.utils import policy_to_ds_container

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=64,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=64,
            max_position_embeddings=64)


class InferenceLayerStub(torch.nn.Module):
    """Stands in for DeepSpeedGPTInference: keeps the config it is built with, loads no kernel."""

    def __init__(self, config, mp_group=None):
        super().__init__()
        self.config = config


def build_inference_layer(**overrides):
    """A Llama layer's inference layer, built the way the Hybrid Engine and kernel injection build it."""
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**TINY, **overrides})).eval()
    layer = model.model.layers[0]
    container = policy_to_ds_container(policy=LLAMALayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=0,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    return container.create_module()


@pytest.fixture(autouse=True)
def no_kernels(monkeypatch):
    monkeypatch.setattr(llama, "DeepSpeedGPTInference", InferenceLayerStub)


def refusal(**overrides):
    """The container's refusal for a configuration, or None when it accepts it."""
    try:
        build_inference_layer(**overrides)
    except ValueError as exc:
        return str(exc)
    return None


def test_servable_configuration_is_accepted():
    assert refusal() is None


# The injected layer gates with SiLU, takes no biases and uses heads of hidden_size // num_attention_heads: anything
# else must be refused by name, not computed wrongly.
UNSERVABLE = [
    pytest.param({"hidden_act": "gelu"}, "hidden_act", id="gelu"),
    pytest.param({"attention_bias": True}, "attention_bias", id="attention_bias"),
    pytest.param({"mlp_bias": True}, "mlp_bias", id="mlp_bias"),
    pytest.param({"head_dim": 16}, "head_dim", id="head_dim"),
]


@pytest.mark.parametrize("overrides, named", UNSERVABLE)
def test_unservable_configuration_is_refused_by_name(overrides, named):
    message = refusal(**overrides)

    assert message is not None and named in message
