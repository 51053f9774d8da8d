# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch
import torch.nn.functional as F

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import LLAMALayerPolicy
from deepspeed.module_inject.containers.internlm import InternLMLayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container

transformers = pytest.importorskip("transformers")

LORA_DIM = 2
LORA_SCALING = 0.5
LORA_TARGETS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                "mlp.up_proj", "mlp.down_proj")
# (W + delta) - delta equals W up to one fp32 rounding per element.
RESTORE_ATOL = 1e-5


class LinearLayer_LoRA(torch.nn.Module):
    """DeepSpeed-Chat's LoRA linear: the base Linear's weight and bias, plus right [in, r] and left [r, out]."""

    def __init__(self, base):
        super().__init__()
        self.weight = base.weight
        self.bias = base.bias
        self.lora_right_weight = torch.nn.Parameter(torch.randn(base.in_features, LORA_DIM))
        self.lora_left_weight = torch.nn.Parameter(torch.randn(LORA_DIM, base.out_features))
        self.lora_scaling = LORA_SCALING

    def delta(self):
        return self.lora_scaling * torch.matmul(self.lora_left_weight.t(), self.lora_right_weight.t())

    def forward(self, x):
        lora = (x @ self.lora_right_weight @ self.lora_left_weight) * self.lora_scaling
        return F.linear(x, self.weight, self.bias) + lora


def llama_layer_with_lora(attention_bias=False):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64,
                                      hidden_size=32,
                                      num_hidden_layers=1,
                                      num_attention_heads=4,
                                      num_key_value_heads=4,
                                      intermediate_size=64,
                                      max_position_embeddings=64,
                                      attention_bias=attention_bias)
    model = transformers.LlamaForCausalLM(config).eval()
    layer = model.model.layers[0]
    loras = {}
    for name in LORA_TARGETS:
        parent_name, leaf = name.split(".")
        parent = getattr(layer, parent_name)
        loras[name] = LinearLayer_LoRA(getattr(parent, leaf))
        setattr(parent, leaf, loras[name])
    return model, layer, loras


def make_container(model, layer, policy_cls):
    if policy_cls is InternLMLayerPolicy:
        # InternLM (remote code) has Llama's layer layout; its policy reads the head count from the attention.
        layer.self_attn.num_heads = model.config.num_attention_heads
    container = policy_to_ds_container(policy=policy_cls(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=0,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    return container


# InternLM's container has the same LoRA lookup as Llama's. Its layer is Llama's layout with q/k/v/o biases,
# so a Llama layer with attention_bias stands in for it (InternLM's modeling code is remote code).
POLICIES = [pytest.param(LLAMALayerPolicy, id="llama"), pytest.param(InternLMLayerPolicy, id="internlm")]


@pytest.mark.parametrize("policy_cls", POLICIES)
def test_lora_params_are_found_on_every_target(policy_cls):
    model, layer, loras = llama_layer_with_lora(attention_bias=policy_cls is InternLMLayerPolicy)
    container = make_container(model, layer, policy_cls)

    found = [params for params in container.get_lora_params() if len(params) == 3]

    assert len(found) == len(LORA_TARGETS)


@pytest.mark.parametrize("policy_cls", POLICIES)
def test_fuse_lora_adds_each_delta_and_unfuse_removes_it(policy_cls):
    model, layer, loras = llama_layer_with_lora(attention_bias=policy_cls is InternLMLayerPolicy)
    originals = {name: m.weight.detach().clone() for name, m in loras.items()}
    container = make_container(model, layer, policy_cls)

    container.fuse_lora()
    for name, m in loras.items():
        assert torch.allclose(m.weight, originals[name] + m.delta(), atol=RESTORE_ATOL), name

    container.unfuse_lora()
    for name, m in loras.items():
        assert torch.allclose(m.weight, originals[name], atol=RESTORE_ATOL), name
