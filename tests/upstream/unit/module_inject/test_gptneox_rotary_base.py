# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import GPTNEOXLayerPolicy
from deepspeed.module_inject.containers import gptneox
from deepspeed.module_inject.utils import policy_to_ds_container

transformers = pytest.importorskip("transformers")


def tiny_gpt_neox(rotary_emb_base=10000, rope_scaling=None):
    config = transformers.GPTNeoXConfig(vocab_size=64,
                                        hidden_size=32,
                                        num_hidden_layers=1,
                                        num_attention_heads=4,
                                        intermediate_size=128,
                                        max_position_embeddings=64,
                                        rotary_pct=0.25,
                                        rotary_emb_base=rotary_emb_base,
                                        rope_scaling=rope_scaling)
    return transformers.GPTNeoXForCausalLM(config).eval()


class InferenceLayerStub(torch.nn.Module):
    """Stands in for DeepSpeedGPTInference: keeps the config it is built with, loads no kernel."""

    def __init__(self, config, mp_group=None):
        super().__init__()
        self.config = config


def inference_config_of(model, monkeypatch):
    """The config DS_GPTNEOXContainer.create_module() hands the inference layer (the layer itself, and its
    compiled kernels, are not needed to read it)."""
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
    monkeypatch.setattr(gptneox, "DeepSpeedGPTInference", InferenceLayerStub)
    return container.create_module().config


# GPT-NeoX rotates with the base in its config (Pythia's 10000; transformers reads it from rope_parameters
# since 5.0, from rope_theta/rotary_emb_base before); the inference layer must use the same one.
@pytest.mark.parametrize("rotary_emb_base", [10000, 1000000])
def test_inference_config_uses_the_models_rotary_base(rotary_emb_base, monkeypatch):
    model = tiny_gpt_neox(rotary_emb_base)

    assert inference_config_of(model, monkeypatch).rope_theta == rotary_emb_base


# The injected attention builds its rotary embedding from the base alone: a scaled variant would run with
# unscaled positions, so it is refused by name.
@pytest.mark.parametrize("rope_type", ["linear"])
def test_scaled_rotary_is_refused_by_name(rope_type, monkeypatch):
    model = tiny_gpt_neox(rope_scaling={"type": rope_type, "factor": 2.0})

    with pytest.raises(ValueError, match=f"rope_type='{rope_type}'"):
        inference_config_of(model, monkeypatch)
