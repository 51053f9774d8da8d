# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import sys

import pytest
import torch
from packaging import version

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.transformer.inference.config import DeepSpeedInferenceConfig
from deepspeed.model_implementations.transformers.ds_transformer import DeepSpeedTransformerInference
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


HEADS, HEAD_DIM = 4, 8


class WorkspaceAttention(torch.nn.Module):
    """Stands in for the injected attention: keeps every step's keys and values as its workspace does and hands
    back all of them, [batch, heads, tokens so far, head dim]."""
    attn_ob = None

    def __init__(self):
        super().__init__()
        self.keys = None

    def forward(self, input, *args, **kwargs):
        step = input.view(input.shape[0], input.shape[1], HEADS, HEAD_DIM).transpose(1, 2)
        self.keys = step if self.keys is None or input.shape[1] > 1 else torch.cat([self.keys, step], dim=2)
        return input, self.keys, -self.keys, None, input


class IdentityMLP(torch.nn.Module):

    def forward(self, attention_output, input, inp_norm, attn_ob):
        return attention_output


def injected_layer(cache_layer_id, layer_id):
    """DeepSpeedTransformerInference with stand-ins for its attention and MLP kernels: what is left is what the
    layer does with the cache it is handed. `cache_layer_id` is what the container sets (the layer's position in
    its own model, for a model that reads its Cache's length; else None); `layer_id` is DeepSpeed's count of every
    injected layer in the process."""
    layer = DeepSpeedTransformerInference.__new__(DeepSpeedTransformerInference)
    torch.nn.Module.__init__(layer)
    layer.config = DeepSpeedInferenceConfig(hidden_size=HEADS * HEAD_DIM, heads=HEADS, dtype=torch.float32)
    layer.config.layer_id = layer_id
    layer.config.cache_layer_id = cache_layer_id
    layer.attention = WorkspaceAttention()
    layer.mlp = IdentityMLP()
    layer.norm_w = layer.norm_b = None
    layer.layer_past = None
    layer._should_allocate_workspace = False
    return layer


def generate(layers, argument, cache):
    prompt, step = torch.randn(2, 5, HEADS * HEAD_DIM), torch.randn(2, 1, HEADS * HEAD_DIM)
    with torch.no_grad():
        for hidden_states in (prompt, step, step):
            for layer in layers:
                layer(hidden_states, use_cache=True, **{argument: cache})


def cache_layers(cache):
    """Each layer's keys and values as a Cache holds them: transformers >= 4.56 keeps them per layer, older ones in
    two lists."""
    if hasattr(cache, "layers"):
        return cache.layers
    return [type("Layer", (), {"keys": k, "values": v}) for k, v in zip(cache.key_cache, cache.value_cache)]


# How transformers hands a layer its Cache: GPT-Neo as `layer_past`, OPT from 5.24 and the other models from 5.x as
# `cache`, 4.x models as `past_key_value(s)`.
@pytest.mark.parametrize("argument", ["layer_past", "cache", "past_key_value", "past_key_values"])
def test_the_transformers_cache_holds_what_the_layers_attended_to(argument):
    layers = [injected_layer(0, 0), injected_layer(1, 1)]
    cache = transformers.DynamicCache()
    generate(layers, argument, cache)
    assert cache.get_seq_length() == 7
    assert [cache.get_seq_length(i) for i in range(len(cache))] == [7, 7]
    for held, layer in zip(cache_layers(cache), layers):
        assert torch.equal(held.keys, layer.attention.keys) and torch.equal(held.values, -layer.attention.keys)


def test_a_second_model_in_the_process_keeps_its_own_layers():
    """DeepSpeed numbers every injected layer of the process (config.layer_id); a model's Cache is indexed by the
    layer's position in that model."""
    first, second = [injected_layer(0, 0), injected_layer(1, 1)], [injected_layer(0, 2), injected_layer(1, 3)]
    for layers in (first, second):
        cache = transformers.DynamicCache()
        generate(layers, "past_key_values", cache)
        assert len(cache) == 2 and cache.get_seq_length(1) == 7


def test_a_model_that_does_not_read_the_cache_length_keeps_its_cache_as_it_was():
    """Llama and the other models place their steps by cache_position: their Cache gets nothing from the injected
    layers, so their generate holds no more than without this change."""
    layers = [injected_layer(None, 0), injected_layer(None, 1)]
    cache = transformers.DynamicCache()
    generate(layers, "past_key_values", cache)
    assert cache.get_seq_length() == 0
    assert sum(layer.keys.numel() for layer in cache_layers(cache) if layer.keys is not None) == 0


# The transformers releases in which each model reads its Cache's length, one release either side of each bound.
@pytest.mark.parametrize("release, gptneo_and_opt, gptj", [("4.57.0", False, False), ("5.1.0", False, False),
                                                           ("5.2.0", False, True), ("5.3.0", False, True),
                                                           ("5.4.0", True, True), ("5.23.0", True, True),
                                                           ("5.24.0", True, False)])
def test_only_the_containers_of_models_that_read_the_cache_length_ask_for_it(monkeypatch, release, gptneo_and_opt,
                                                                             gptj):
    from deepspeed.module_inject.containers import (DS_GPTJContainer, DS_GPTNEOContainer, DS_LLAMAContainer,
                                                    DS_OPTContainer)
    from deepspeed.module_inject.containers.base import BaseTransformerContainer

    def asks(container):
        return getattr(container, "reads_cache_length", lambda: False)()

    # The module the containers import (importing the models can replace the one importorskip returned).
    monkeypatch.setattr(sys.modules["transformers"], "__version__", release)
    assert asks(DS_GPTNEOContainer) == gptneo_and_opt and asks(DS_OPTContainer) == gptneo_and_opt
    assert asks(DS_GPTJContainer) == gptj
    assert not asks(BaseTransformerContainer) and not asks(DS_LLAMAContainer)


def test_without_a_cache_the_layer_keeps_its_own():
    layer = injected_layer(0, 0)
    with torch.no_grad():
        layer(torch.randn(1, 3, HEADS * HEAD_DIM), use_cache=True)
    assert layer.layer_past[0].shape == (1, HEADS, 3, HEAD_DIM)


def greedy(model, input_ids):
    output = model.generate(input_ids,
                            attention_mask=torch.ones_like(input_ids),
                            max_new_tokens=4,
                            min_new_tokens=4,
                            do_sample=False,
                            pad_token_id=0,
                            return_dict_in_generate=True,
                            output_logits=True)
    return output.sequences[:, input_ids.shape[1]:], torch.stack(output.logits), output.past_key_values


def assert_cache_as_native(cache, native):
    """The Cache generate() hands back holds what the model's own generate() leaves in it, and transformers' own
    operations on it (crop, as assisted decoding does; reorder_cache, as beam search does) act as on that one."""
    for step in range(3):
        assert len(cache) == len(native) and cache.get_seq_length() == native.get_seq_length()
        for ours, theirs in zip(cache_layers(cache), cache_layers(native)):
            assert ours.keys.shape == theirs.keys.shape and ours.values.shape == theirs.values.shape
            assert torch.allclose(ours.keys, theirs.keys, atol=1e-3)
            assert torch.allclose(ours.values, theirs.values, atol=1e-3)
        for held in (cache, native):
            if step == 0:
                held.crop(-2)  # two tokens off the end, in every release's crop()
            elif step == 1:
                held.reorder_cache(torch.zeros(1, dtype=torch.long, device=cache_layers(held)[0].keys.device))


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
class TestHybridEngineCacheLengthGenerate(DistributedTest):
    world_size = 1

    # End to end: the Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU the PyTorch
    # fallbacks), computes a GPT-Neo on transformers >= 5.4, which places each decode step by its Cache's length.
    def test_generate_computes_the_model(self):
        if version.parse(transformers.__version__) < version.parse("5.4.0"):
            pytest.skip("transformers < 5.4 places GPT-Neo's decode steps by cache_position")
        torch.manual_seed(0)
        config = transformers.GPTNeoConfig(vocab_size=1024,
                                           hidden_size=256,
                                           num_layers=2,
                                           num_heads=4,
                                           intermediate_size=1024,
                                           max_position_embeddings=256,
                                           window_size=256,
                                           attention_types=[[["global", "local"], 1]])
        engine, (expected_tokens, expected_logits, native_cache), (tokens, logits, cache) = \
            generate_with_and_without_the_hybrid_engine(transformers.GPTNeoForCausalLM(config))

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
        assert_cache_as_native(cache, native_cache)

    # GPT-J on transformers 5.2 to 5.23 sizes each decode step's attention mask by its Cache's length; from 5.24 it
    # generates correctly either way, so the test checks the result there too.
    def test_gptj_generate_computes_the_model(self):
        if version.parse(transformers.__version__) < version.parse("5.2.0"):
            pytest.skip("transformers < 5.2 places GPT-J's decode steps by cache_position")
        torch.manual_seed(0)
        config = transformers.GPTJConfig(vocab_size=1024,
                                         n_embd=256,
                                         n_layer=2,
                                         n_head=4,
                                         rotary_dim=16,
                                         n_positions=256)
        engine, (expected_tokens, expected_logits, native_cache), (tokens, logits, cache) = \
            generate_with_and_without_the_hybrid_engine(transformers.GPTJForCausalLM(config))

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
        if engine._inference_containers[0].reads_cache_length():
            assert_cache_as_native(cache, native_cache)
