# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.model_implementations.transformers.ds_transformer import DeepSpeedTransformerInference
from deepspeed.module_inject.containers import LLAMALayerPolicy
from deepspeed.module_inject.containers import llama
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
class TestHybridEngineLlamaGenerate(DistributedTest):
    world_size = 1

    # End to end: the Hybrid Engine's generate(), through the injected Llama layers (their kernels, or on CPU the
    # PyTorch fallbacks), computes the model on the installed transformers.
    def test_generate_computes_the_model(self):
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=1024,
                                          hidden_size=256,
                                          num_hidden_layers=2,
                                          num_attention_heads=4,
                                          num_key_value_heads=4,
                                          intermediate_size=512,
                                          max_position_embeddings=256)
        device = get_accelerator().current_device_name()
        model = transformers.LlamaForCausalLM(config).to(device).eval()
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
