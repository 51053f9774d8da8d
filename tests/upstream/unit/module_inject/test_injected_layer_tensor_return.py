# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import sys

import pytest
import torch
from packaging import version

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.model_implementations.transformers.ds_transformer import DeepSpeedTransformerInference
from deepspeed.module_inject.containers import GPTNEOXLayerPolicy, HFGPTJLayerPolicy, HFOPTLayerPolicy
from deepspeed.module_inject.containers import gptj, gptneox, opt
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


def tiny_gpt_neox():
    config = transformers.GPTNeoXConfig(vocab_size=64,
                                        hidden_size=32,
                                        num_hidden_layers=2,
                                        num_attention_heads=4,
                                        intermediate_size=64,
                                        max_position_embeddings=64)
    model = transformers.GPTNeoXModel(config).eval()
    return model, model.layers


def tiny_opt():
    config = transformers.OPTConfig(vocab_size=64,
                                    hidden_size=32,
                                    num_hidden_layers=2,
                                    num_attention_heads=4,
                                    ffn_dim=64,
                                    max_position_embeddings=64)
    model = transformers.OPTModel(config).eval()
    return model, model.decoder.layers


def tiny_gptj():
    config = transformers.GPTJConfig(vocab_size=64, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64)
    model = transformers.GPTJModel(config).eval()
    return model, model.h


# (tiny model, policy, container module and its inference layer class, first transformers whose model passes
# what a layer returns straight to the next layer)
MODELS = {
    "gpt-neox": (tiny_gpt_neox, GPTNEOXLayerPolicy, gptneox, "DeepSpeedGPTInference", "5.2.0"),
    "opt": (tiny_opt, HFOPTLayerPolicy, opt, "DeepSpeedOPTInference", "5.4.0"),
    "gptj": (tiny_gptj, HFGPTJLayerPolicy, gptj, "DeepSpeedGPTInference", "5.24.0"),
}


class InferenceLayerStub(torch.nn.Module):
    """Stands in for the inference layer: keeps the config it is built with, loads no kernel."""

    def __init__(self, config, mp_group=None):
        super().__init__()
        self.config = config


def inference_config_of(name, model, layers, layer_id, monkeypatch):
    """The config the container's create_module() hands the inference layer."""
    _, policy, module, layer_class, _ = MODELS[name]
    layer = layers[layer_id]
    container = policy_to_ds_container(policy=policy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=layer_id,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    monkeypatch.setattr(module, layer_class, InferenceLayerStub)
    return container.create_module().config


class IdentityAttention(torch.nn.Module):
    """What DeepSpeedSelfAttention hands back (output, keys, values, context, input norm), the input as each: the
    keys and values as the attention keeps them, [batch, heads, tokens so far, head size]."""
    attn_ob = None

    def __init__(self, heads):
        super().__init__()
        self.heads = heads

    def forward(self, input, *args, **kwargs):
        batch, tokens, hidden = input.shape
        keys = input.view(batch, tokens, self.heads, hidden // self.heads).transpose(1, 2)
        return input, keys, keys, None, input


class IdentityMLP(torch.nn.Module):

    def forward(self, attention_output, input, inp_norm, attn_ob):
        return attention_output


def injected_layer(config):
    """DeepSpeedTransformerInference with identities for its attention and MLP kernels: what is left is how
    the injected layer hands its output back, which is what the model reads."""
    layer = DeepSpeedTransformerInference.__new__(DeepSpeedTransformerInference)
    torch.nn.Module.__init__(layer)
    layer.config = config
    layer.attention = IdentityAttention(config.heads)
    layer.mlp = IdentityMLP()
    layer.norm_w = layer.norm_b = None
    layer.layer_past = None
    layer._should_allocate_workspace = False
    return layer


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("use_cache", [False, True])
def test_model_runs_on_the_injected_layers_output(name, use_cache, monkeypatch):
    model, layers = MODELS[name][0]()
    configs = [inference_config_of(name, model, layers, layer_id, monkeypatch) for layer_id in range(2)]
    for layer_id, config in enumerate(configs):
        layers[layer_id] = injected_layer(config)
    input_ids = torch.tensor([[1, 2, 3]])

    with torch.no_grad():
        hidden_states = model(input_ids, use_cache=use_cache).last_hidden_state

    assert hidden_states.shape == (1, 3, 32)


@pytest.mark.parametrize("name", MODELS)
def test_the_layer_returns_what_each_transformers_expects(name, monkeypatch):
    model, layers = MODELS[name][0]()
    first_tensor_release = MODELS[name][4]
    major, minor, _ = (int(part) for part in first_tensor_release.split("."))
    # The module the containers import (importing the models can replace the one importorskip returned).
    installed = sys.modules["transformers"]

    monkeypatch.setattr(installed, "__version__", f"{major}.{minor - 1}.0")
    assert inference_config_of(name, model, layers, 0, monkeypatch).return_tuple is True
    monkeypatch.setattr(installed, "__version__", first_tensor_release)
    assert inference_config_of(name, model, layers, 0, monkeypatch).return_tuple is False


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


def generate_with_and_without_the_hybrid_engine(model):
    device = get_accelerator().current_device_name()
    model = model.to(device).eval()
    input_ids = torch.arange(10, 74, device=device).unsqueeze(0)
    with torch.no_grad():
        expected = greedy(model, input_ids)
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": 2
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
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    engine.eval()
    with torch.no_grad():
        return engine, expected, greedy(engine, input_ids)


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineTensorReturnGenerate(DistributedTest):
    world_size = 1

    # End to end: the Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU the PyTorch
    # fallbacks), computes a GPT-NeoX on transformers >= 5.2, which hands what each layer returns to the next.
    def test_generate_computes_the_model(self):
        if version.parse(transformers.__version__) < version.parse("5.2.0"):
            pytest.skip("transformers < 5.2 indexes what a GPT-NeoX layer returns")
        torch.manual_seed(0)
        config = transformers.GPTNeoXConfig(vocab_size=1024,
                                            hidden_size=256,
                                            num_hidden_layers=2,
                                            num_attention_heads=4,
                                            intermediate_size=1024,
                                            max_position_embeddings=256)
        engine, (expected_tokens, expected_logits), (tokens, logits) = generate_with_and_without_the_hybrid_engine(
            transformers.GPTNeoXForCausalLM(config))

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
