# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch
import torch.nn.functional as F

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import LLAMALayerPolicy
from deepspeed.module_inject.containers import internlm
from deepspeed.module_inject.containers import llama
from deepspeed.module_inject.containers.internlm import InternLMLayerPolicy
from deepspeed.module_inject.containers.llama2 import LLAMA2LayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from unit.common import DistributedTest

transformers = pytest.importorskip("transformers")


def inference_layers_available():
    # The compiled transformer_inference op, or its PyTorch fallbacks where the op cannot be built.
    if deepspeed.ops.__compatible_ops__[InferenceBuilder.NAME]:
        return True
    try:
        BaseOp(DeepSpeedInferenceConfig())
    except ValueError:
        return False
    return True


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


class InferenceModuleStub(torch.nn.Module):
    """Stands in for DeepSpeedGPTInference: holds what set_params_wo_copy() hands the inference layer, loads
    no kernel."""

    def __init__(self, config, mp_group=None):
        super().__init__()
        self.config = config
        self.attention = torch.nn.Module()
        self.mlp = torch.nn.Module()


@pytest.mark.parametrize("policy_cls", POLICIES)
def test_inference_module_sees_fused_lora(policy_cls, monkeypatch):
    """What the injected layer computes with, as the Hybrid Engine builds it without ZeRO-3."""
    monkeypatch.setattr(llama, "DeepSpeedGPTInference", InferenceModuleStub)
    monkeypatch.setattr(internlm, "DeepSpeedGPTInference", InferenceModuleStub)
    model, layer, loras = llama_layer_with_lora(attention_bias=policy_cls is InternLMLayerPolicy)
    fused = {name: m.weight.detach().clone() + m.delta() for name, m in loras.items()}
    container = make_container(model, layer, policy_cls)
    container.create_ds_model_config()
    container.create_module()
    container.set_params_wo_copy(Z3_enabled=False)

    container.fuse_lora()

    attention, mlp = container.module.attention, container.module.mlp
    qkv = torch.cat([fused["self_attn.q_proj"], fused["self_attn.k_proj"], fused["self_attn.v_proj"]])
    assert torch.allclose(attention.attn_qkvw, qkv, atol=RESTORE_ATOL)
    assert torch.allclose(attention.attn_ow, fused["self_attn.o_proj"], atol=RESTORE_ATOL)
    assert torch.allclose(mlp.inter_w, torch.cat([fused["mlp.up_proj"], fused["mlp.gate_proj"]]), atol=RESTORE_ATOL)
    assert torch.allclose(mlp.output_w, fused["mlp.down_proj"], atol=RESTORE_ATOL)


class MetaLlamaBlock(torch.nn.Module):
    """The layout of Meta's Llama 2 TransformerBlock (the llama package), which LLAMA2LayerPolicy reads."""

    def __init__(self, hidden=32, heads=4, intermediate=64):
        super().__init__()
        self.n_heads = heads
        self.attention = torch.nn.Module()
        self.attention.n_kv_heads = heads
        for name in ("wq", "wk", "wv", "wo"):
            setattr(self.attention, name, LinearLayer_LoRA(torch.nn.Linear(hidden, hidden, bias=False)))
        self.feed_forward = torch.nn.Module()
        self.feed_forward.w1 = LinearLayer_LoRA(torch.nn.Linear(hidden, intermediate, bias=False))
        self.feed_forward.w2 = LinearLayer_LoRA(torch.nn.Linear(intermediate, hidden, bias=False))
        self.feed_forward.w3 = LinearLayer_LoRA(torch.nn.Linear(hidden, intermediate, bias=False))
        self.attention_norm = transformers.models.llama.modeling_llama.LlamaRMSNorm(hidden)
        self.ffn_norm = transformers.models.llama.modeling_llama.LlamaRMSNorm(hidden)
        self.ffn_norm.eps = self.ffn_norm.variance_epsilon


def test_lora_params_are_found_on_every_llama2_target():
    block = MetaLlamaBlock()
    container = policy_to_ds_container(policy=LLAMA2LayerPolicy(block, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=None,
                                       layer_id=0,
                                       child=block)
    container.initialize_tensors(enable_training=True)

    found = [params for params in container.get_lora_params() if len(params) == 3]

    assert len(found) == 7


def greedy(model, input_ids):
    output = model.generate(input_ids,
                            attention_mask=torch.ones_like(input_ids),
                            max_new_tokens=4,
                            min_new_tokens=4,
                            do_sample=False,
                            pad_token_id=0,
                            return_dict_in_generate=True,
                            output_logits=True)
    return output.sequences[:, input_ids.shape[1]:], torch.stack(output.logits)


def hybrid_engine(model, stage=2):
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": stage
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
            "max_out_tokens": 256
        },
    }
    engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
    return engine


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineLlamaLoRAGenerate(DistributedTest):
    world_size = 1

    # End to end: with DeepSpeed-Chat's LoRA on every Linear of a Llama's layers, the Hybrid Engine's generate(),
    # through the injected layers (their kernels, or on CPU the PyTorch fallbacks), computes the model with its LoRA.
    def test_generate_computes_the_model_with_its_lora(self):
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=1024,
                                          hidden_size=256,
                                          num_hidden_layers=2,
                                          num_attention_heads=4,
                                          num_key_value_heads=4,
                                          intermediate_size=512,
                                          max_position_embeddings=256)
        model = transformers.LlamaForCausalLM(config).eval()
        for layer in model.model.layers:
            for name in LORA_TARGETS:
                parent_name, leaf = name.split(".")
                parent = getattr(layer, parent_name)
                lora = LinearLayer_LoRA(getattr(parent, leaf))
                with torch.no_grad():  # a delta the size of a trained one, not of the base weight
                    lora.lora_right_weight.mul_(0.1)
                    lora.lora_left_weight.mul_(0.1)
                setattr(parent, leaf, lora)
        device = get_accelerator().current_device_name()
        model = model.to(device)
        input_ids = torch.arange(10, 74, device=device).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
        engine = hybrid_engine(model)

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
