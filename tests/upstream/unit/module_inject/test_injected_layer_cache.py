# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.model_implementations.transformers.ds_transformer import DeepSpeedTransformerInference
from deepspeed.ops.transformer.inference.config import DeepSpeedInferenceConfig

cache_utils = pytest.importorskip("transformers.cache_utils")


class IdentityAttention(torch.nn.Module):
    """Returns its input, with the input as key and value."""
    attn_ob = None

    def forward(self, input, *args, **kwargs):
        return input, input.unsqueeze(1), input.unsqueeze(1), None, input


class IdentityMLP(torch.nn.Module):

    def forward(self, attention_output, input, inp_norm, attn_ob):
        return attention_output


def injected_layer():
    """DeepSpeedTransformerInference with identities for its attention and MLP kernels: what is left is how
    the injected layer hands its output and cache back."""
    layer = DeepSpeedTransformerInference.__new__(DeepSpeedTransformerInference)
    torch.nn.Module.__init__(layer)
    layer.config = DeepSpeedInferenceConfig(hidden_size=8, heads=2, dtype=torch.float32)
    layer.config.layer_id = 0  # what __init__ gives the model's first layer
    layer.attention = IdentityAttention()
    layer.mlp = IdentityMLP()
    layer.norm_w = layer.norm_b = None
    layer.layer_past = None
    layer._should_allocate_workspace = False
    return layer


# transformers 4.45 to 4.53 hand every GPT-Neo and GPT-NeoX layer one Cache and return the last layer's second
# output as the model's cache: a layer that returns its key and value there breaks the next generate step
# (DynamicCache.from_legacy_cache unpacks the key tensor: "not enough values to unpack").
def test_a_cache_passed_in_is_handed_back():
    cache = cache_utils.DynamicCache()

    output = injected_layer()(torch.randn(1, 3, 8), layer_past=cache, use_cache=True)

    assert output[1] is cache


def test_without_a_cache_the_key_and_value_are_handed_back():
    hidden_states = torch.randn(1, 3, 8)

    output = injected_layer()(hidden_states, use_cache=True)

    key, value = output[1]
    assert torch.equal(key, hidden_states.unsqueeze(1)) and torch.equal(value, hidden_states.unsqueeze(1))
