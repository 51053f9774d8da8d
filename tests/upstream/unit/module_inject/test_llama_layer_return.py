# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.model_implementations.transformers.ds_transformer import DeepSpeedTransformerInference
from deepspeed.module_inject.containers import LLAMALayerPolicy
from deepspeed.module_inject.containers import llama
from deepspeed.module_inject.utils import policy_to_ds_container

transformers = pytest.importorskip("transformers")


def tiny_llama():
    config = transformers.LlamaConfig(vocab_size=64,
                                      hidden_size=32,
                                      num_hidden_layers=2,
                                      num_attention_heads=4,
                                      num_key_value_heads=4,
                                      intermediate_size=64,
                                      max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config).eval()


class InferenceLayerStub(torch.nn.Module):
    """Stands in for DeepSpeedGPTInference: keeps the config it is built with, loads no kernel."""

    def __init__(self, config, mp_group=None):
        super().__init__()
        self.config = config


def inference_config_of(model, layer_id, monkeypatch):
    """The config DS_LLAMAContainer.create_module() hands the inference layer."""
    layer = model.model.layers[layer_id]
    container = policy_to_ds_container(policy=LLAMALayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=layer_id,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    monkeypatch.setattr(llama, "DeepSpeedGPTInference", InferenceLayerStub)
    return container.create_module().config


class IdentityAttention(torch.nn.Module):
    attn_ob = None

    def forward(self, input, *args, **kwargs):
        return input, None, None, None, input


class IdentityMLP(torch.nn.Module):

    def forward(self, attention_output, input, inp_norm, attn_ob):
        return attention_output


def injected_layer(config):
    """DeepSpeedTransformerInference with identities for its attention and MLP kernels: what is left is how
    the injected layer hands its output back, which is what LlamaModel reads."""
    layer = DeepSpeedTransformerInference.__new__(DeepSpeedTransformerInference)
    torch.nn.Module.__init__(layer)
    layer.config = config
    layer.attention = IdentityAttention()
    layer.mlp = IdentityMLP()
    layer.norm_w = layer.norm_b = None
    layer.layer_past = None
    layer._should_allocate_workspace = False
    return layer


def test_llama_model_runs_on_the_injected_layers_output(monkeypatch):
    model = tiny_llama()
    configs = [inference_config_of(model, layer_id, monkeypatch) for layer_id in range(2)]
    for layer_id, config in enumerate(configs):
        model.model.layers[layer_id] = injected_layer(config)
    input_ids = torch.tensor([[1, 2, 3]])

    with torch.no_grad():
        hidden_states = model.model(input_ids).last_hidden_state
        expected = model.model.norm(model.model.embed_tokens(input_ids))

    assert torch.equal(hidden_states, expected)
