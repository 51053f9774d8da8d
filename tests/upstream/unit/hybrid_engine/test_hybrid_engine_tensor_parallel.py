# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import gptneox
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from deepspeed.runtime.zero import GatheredParameters
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


TP = 2
HEADS = 4
HEAD_SIZE = 8
HIDDEN = HEADS * HEAD_SIZE


class InferenceLayerStub(torch.nn.Module):
    """Stands in for DeepSpeedGPTInference: takes the weights the Hybrid Engine hands it, loads no kernel, and
    records what it holds when it runs."""

    def __init__(self, config, mp_group=None):
        super().__init__()
        self.config = config
        self.attention = torch.nn.Module()
        self.mlp = torch.nn.Module()
        self.held = []
        self.watch = None

    def forward(self, hidden_states, *args, **kwargs):
        self.held.append({name: weight.detach().clone() for name, weight in held_weights(self).items()})
        if self.watch is not None:
            self.watch()
        return hidden_states


def gpt_neox():
    torch.manual_seed(0)  # the same weights on every rank, spawned or forked
    config = transformers.GPTNeoXConfig(vocab_size=64,
                                        hidden_size=HIDDEN,
                                        num_hidden_layers=2,
                                        num_attention_heads=HEADS,
                                        intermediate_size=4 * HIDDEN,
                                        max_position_embeddings=64)
    model = transformers.GPTNeoXForCausalLM(config)
    for layer in model.gpt_neox.layers:
        # What GPTNEOXLayerPolicy.get_hidden_heads() reads, which GPTNeoXAttention lost in Transformers 4.48.
        layer.attention.hidden_size = HIDDEN
        layer.attention.num_attention_heads = HEADS
    return model


def initialize(model, zero_stage, pin_parameters):
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": zero_stage,
            "stage3_param_persistence_threshold": 0
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
            "inference_tp_size": TP,
            "pin_parameters": pin_parameters,
            "tp_gather_partition_size": 1
        },
    }
    return deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())


def rank_qkv(x, rank):
    """A rank's share of GPT-NeoX's head-interleaved QKV rows in the inference layout: its heads' Q, then K, then V."""
    heads = x.reshape(HEADS, 3, HEAD_SIZE, *x.shape[1:])[rank * HEADS // TP:(rank + 1) * HEADS // TP]
    return heads.transpose(0, 1).reshape(-1, *x.shape[1:])


def rank_slice(x, dim, rank):
    size = x.shape[dim] // TP
    return x.narrow(dim, rank * size, size)


def layer_weights(layer):
    """The weights of a GPT-NeoX layer and this rank's share of each under tensor parallelism."""
    return {
        "qkv": (layer.attention.query_key_value.weight, rank_qkv),
        "qkv_bias": (layer.attention.query_key_value.bias, rank_qkv),
        "out": (layer.attention.dense.weight, lambda x, rank: rank_slice(x, 1, rank)),
        "fc": (layer.mlp.dense_h_to_4h.weight, lambda x, rank: rank_slice(x, 0, rank)),
        "fc_bias": (layer.mlp.dense_h_to_4h.bias, lambda x, rank: rank_slice(x, 0, rank)),
        "proj": (layer.mlp.dense_4h_to_h.weight, lambda x, rank: rank_slice(x, 1, rank)),
    }


def held_weights(module):
    """What an injected layer holds in place of each weight of layer_weights()."""
    return {
        "qkv": module.attention.attn_qkvw,
        "qkv_bias": module.attention.attn_qkvb,
        "out": module.attention.attn_ow,
        "fc": module.mlp.inter_w,
        "fc_bias": module.mlp.inter_b,
        "proj": module.mlp.output_w
    }


@pytest.mark.parametrize("zero_stage, pin_parameters", [(2, True), (3, True), (3, False)])
class TestHybridEngineTensorParallelWithoutMpu(DistributedTest):
    world_size = 2

    # DeepSpeed-Chat sets inference_tp_size and passes no mpu: the training weights are whole, and each rank's
    # injected layers, built for its share of the heads, must generate with its slice of them.
    def test_each_rank_generates_with_its_slice(self, zero_stage, pin_parameters):
        model = gpt_neox()
        expected = [{
            name: (weight.detach().clone(), share)
            for name, (weight, share) in layer_weights(layer).items()
        } for layer in model.gpt_neox.layers]
        with pytest.MonkeyPatch.context() as monkeypatch:  # in the rank: the ranks may be spawned, not forked
            monkeypatch.setattr(gptneox, "DeepSpeedGPTInference", InferenceLayerStub)
            engine, *_ = initialize(model, zero_stage, pin_parameters)
        rank = deepspeed.comm.get_rank()
        layers = engine.module.gpt_neox.layers
        gathered = []  # which of a layer's training weights are gathered while it runs
        for layer, container in zip(layers, engine._inference_containers):
            container.module.watch = lambda layer=layer: gathered.append(
                [name for name, (weight, _) in layer_weights(layer).items() if weight.numel() > 0])

        def model_generate(input_ids, attention_mask=None, **kwargs):
            for layer in layers:  # each layer's forward, as the Hybrid Engine has replaced it
                layer.forward(torch.zeros(1, 1, HIDDEN, device=engine.device))
            return torch.cat([input_ids, input_ids[:, -1:]], dim=1)

        engine._generate = model_generate
        engine.eval()
        prompt = torch.full((1, 3), rank, dtype=torch.long, device=engine.device)
        out = engine.generate(prompt, attention_mask=torch.ones_like(prompt))

        assert out.tolist() == [[rank] * 4]
        held = [held for container in engine._inference_containers for held in container.module.held]
        assert len(held) == len(expected)
        for layer_held, layer_expected in zip(held, expected):
            for name, (weight, share) in layer_expected.items():
                assert torch.equal(layer_held[name], share(weight, rank).to(layer_held[name].device)), name
        if zero_stage == 3 and not pin_parameters:
            # As at inference_tp_size 1, the layer holds its weights for its forward only: its slices, without
            # its training weights gathered whole beside them.
            assert gathered == [[], []]

        # The training weights are given back as they were, and the layers hold them again, not the slices.
        engine.train()
        for layer, layer_expected in zip(engine.module.gpt_neox.layers, expected):
            weights = layer_weights(layer)
            with GatheredParameters([weight for weight, _ in weights.values()]):
                for name, (weight, _) in weights.items():
                    assert torch.equal(weight.detach(), layer_expected[name][0].to(weight.device)), name
        for container in engine._inference_containers:
            assert container.module.attention.attn_ow is container.dense_w
            assert container.module.mlp.output_w is container._4hh_w


def greedy(model, input_ids, lm_head):
    """Generated tokens and each step's last-position logits, read from the LM head (tensor-parallel generate
    returns this rank's prompts' token ids)."""
    logits = []
    hook = lm_head.register_forward_hook(lambda module, args, output: logits.append(output[:, -1].float()))
    try:
        output = model.generate(input_ids,
                                attention_mask=torch.ones_like(input_ids),
                                max_new_tokens=4,
                                min_new_tokens=4,
                                do_sample=False,
                                pad_token_id=0)
    finally:
        hook.remove()
    return output[:, input_ids.shape[1]:], torch.stack(logits)


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
@pytest.mark.parametrize("zero_stage, pin_parameters", [(2, True), (3, True), (3, False)])
class TestHybridEngineTensorParallelGenerate(DistributedTest):
    world_size = 2

    # End to end: with inference_tp_size 2 and no mpu (DeepSpeed-Chat), the Hybrid Engine's generate(), through the
    # injected layers (their kernels, or on CPU the PyTorch fallbacks) on each rank's slice, computes the model.
    def test_generate_computes_the_model(self, zero_stage, pin_parameters):
        torch.manual_seed(0)
        config = transformers.GPTNeoXConfig(vocab_size=1024,
                                            hidden_size=256,
                                            num_hidden_layers=2,
                                            num_attention_heads=4,
                                            intermediate_size=1024,
                                            max_position_embeddings=256)
        model = transformers.GPTNeoXForCausalLM(config)
        for layer in model.gpt_neox.layers:
            # What GPTNEOXLayerPolicy.get_hidden_heads() reads, which GPTNeoXAttention lost in Transformers 4.48.
            layer.attention.hidden_size = config.hidden_size
            layer.attention.num_attention_heads = config.num_attention_heads
        device = get_accelerator().current_device_name()
        model = model.to(device).eval()
        input_ids = torch.arange(10, 74, device=device).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids, model.get_output_embeddings())
        engine, *_ = initialize(model, zero_stage, pin_parameters)

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids, engine.module.get_output_embeddings())

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
