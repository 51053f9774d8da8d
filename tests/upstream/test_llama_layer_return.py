# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch
from packaging import version as pkg_version

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import LLAMALayerPolicy
from deepspeed.module_inject.containers import llama
from deepspeed.module_inject.utils import policy_to_ds_container

transformers = pytest.importorskip("transformers")


def tiny_llama():
    config = transformers.LlamaConfig(vocab_size=64,
                                      hidden_size=32,
                                      num_hidden_layers=1,
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


def inference_config_of(model, monkeypatch):
    """The config DS_LLAMAContainer.create_module() hands the inference layer."""
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
    monkeypatch.setattr(llama, "DeepSpeedGPTInference", InferenceLayerStub)
    return container.create_module().config


# Since transformers 4.54 LlamaModel hands each decoder layer's return value to the next layer and to the
# final norm as it is; before, it took the hidden states out of a tuple.
def test_injected_layer_returns_what_llama_model_expects(monkeypatch):
    expects_tuple = pkg_version.parse(transformers.__version__) < pkg_version.parse("4.54.0")

    assert inference_config_of(tiny_llama(), monkeypatch).return_tuple == expects_tuple
