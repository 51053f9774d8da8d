# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers.features.hybrid_engine import HybridEngineContainer
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from deepspeed.runtime.hybrid_engine import DeepSpeedHybridEngine
from deepspeed.runtime.utils import get_inactive_params
from deepspeed.runtime.zero import GatheredParameters
from unit.common import DistributedTest


def inference_layers_available():
    # The compiled transformer_inference op, or its PyTorch fallbacks where the op cannot be built.
    if deepspeed.ops.__compatible_ops__[InferenceBuilder.NAME]:
        return True
    try:
        BaseOp(DeepSpeedInferenceConfig())
    except ValueError:
        return False
    return True


IN_FEATURES = 16
OUT_FEATURES = 24
LORA_DIM = 2
LORA_SCALING = 0.5
NUM_LAYERS = 2


class LoRALinear(torch.nn.Module):
    """A weight with DeepSpeed-Chat's LoRA factors (right [in, r], left [r, out])."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(OUT_FEATURES, IN_FEATURES))
        self.lora_right_weight = torch.nn.Parameter(torch.empty(IN_FEATURES, LORA_DIM))
        self.lora_left_weight = torch.nn.Parameter(torch.empty(LORA_DIM, OUT_FEATURES))


class LoRALayerContainer(HybridEngineContainer):
    """One LoRA-adapted weight; its inference module records the weight each forward sees (and raises if told to)."""

    def __init__(self, layer):
        self.weight = layer.weight
        self.lora = [layer.lora_right_weight, layer.lora_left_weight, LORA_SCALING]
        self.seen = []
        self.fail = False
        self.module = SimpleNamespace(forward=self.forward)

    def forward(self, *inputs, **kwargs):
        self.seen.append(self.weight.detach().clone())
        if self.fail:
            raise RuntimeError("generation failed")

    def set_lora_params(self):
        self.lora_params = [self.lora]

    def get_lora_matched_pair(self):
        return [(self.lora, self.weight)]


def non_pinned_zero3_engine(available):
    """A Hybrid Engine on the ZeRO-3 non-pinned path (pin_parameters=False), over layers zero.Init partitioned,
    with only the attributes generate() reads on that path; and each layer's weight without and with LoRA.
    `available`: which parameters stay gathered between forwards, as persistent parameters do (those below
    stage3_param_persistence_threshold): "none", "lora" (the LoRA factors) or "all"."""
    torch.manual_seed(0)
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": 3,
            "stage3_param_persistence_threshold": 0
        }
    }
    with deepspeed.zero.Init(config_dict_or_path=config):
        layers = [LoRALinear() for _ in range(NUM_LAYERS)]
    expected = []
    for layer in layers:
        params = [layer.weight, layer.lora_right_weight, layer.lora_left_weight]
        with GatheredParameters(params, modifier_rank=0):
            for param in params:
                param.data.copy_(torch.randn_like(param))
            weight, right, left = (param.detach().clone() for param in params)
        expected.append((weight, weight + LORA_SCALING * torch.matmul(left.t(), right.t())))
        kept = {"none": [], "lora": params[1:], "all": params}[available]
        if kept:
            kept[0].all_gather(param_list=kept)

    engine = DeepSpeedHybridEngine.__new__(DeepSpeedHybridEngine)
    containers = [LoRALayerContainer(layer) for layer in layers]
    engine.__dict__.update(
        _inference_containers=containers,
        layer_params=[[layer.weight] for layer in layers],
        layer_lora_params=[[layer.lora_right_weight, layer.lora_left_weight] for layer in layers],
        all_lora_params=[p for layer in layers for p in (layer.lora_right_weight, layer.lora_left_weight)],
        is_lora_fused=False,  # what DeepSpeed read here before this fix
        Z3_enabled=True,
        gather_all_layers=False,
        _total_batch_size=1,
        _decode_graphs=None,
        _gather_latency=0,
        _config=SimpleNamespace(hybrid_engine=SimpleNamespace(release_inference_cache=False, inference_tp_size=1)))
    return engine, expected


def generate(engine, steps, fail_in_layer=None):
    """engine.generate() with a model that runs a prompt forward, then decode forwards, through every layer,
    where the forward of layer `fail_in_layer` raises."""
    forwards = [engine._zero3_forward(layer_id) for layer_id in range(NUM_LAYERS)]
    for layer_id, container in enumerate(engine._inference_containers):
        container.fail = layer_id == fail_in_layer

    def run_model(*inputs, **kwargs):
        for _ in range(steps):
            for forward in forwards:
                forward()

    engine._generate = run_model
    engine.generate(torch.zeros(1, 1, dtype=torch.long))


def weights(engine):
    params = [container.weight for container in engine._inference_containers]
    with GatheredParameters(get_inactive_params(params)):
        return [param.detach().clone() for param in params]


@pytest.mark.parametrize("available", ["none", "lora", "all"])
class TestHybridEngineLoRANonPinned(DistributedTest):
    world_size = 2

    def test_every_forward_sees_fused_lora(self, available):
        engine, expected = non_pinned_zero3_engine(available)
        generate(engine, steps=3)

        for container, (_, fused) in zip(engine._inference_containers, expected):
            assert len(container.seen) == 3
            for seen in container.seen:
                assert torch.equal(seen, fused)

    def test_generate_restores_weights_and_fuses_again_next_time(self, available):
        engine, expected = non_pinned_zero3_engine(available)
        generate(engine, steps=3)

        for weight, (original, _) in zip(weights(engine), expected):
            assert torch.equal(weight, original)

        generate(engine, steps=2)
        for container, (_, fused) in zip(engine._inference_containers, expected):
            assert torch.equal(container.seen[-1], fused)

    def test_generate_broadcasts_nothing_and_keeps_the_partitions(self, available):
        engine, _ = non_pinned_zero3_engine(available)
        partitions = [container.weight.ds_tensor.detach().clone() for container in engine._inference_containers]
        broadcast, broadcasts = deepspeed.comm.broadcast, []

        def counted_broadcast(tensor, *args, **kwargs):
            broadcasts.append(tensor.numel())
            return broadcast(tensor, *args, **kwargs)

        deepspeed.comm.broadcast = counted_broadcast
        try:
            generate(engine, steps=3)
        finally:
            deepspeed.comm.broadcast = broadcast

        assert broadcasts == []
        for container, partition in zip(engine._inference_containers, partitions):
            assert torch.equal(container.weight.ds_tensor, partition)

    def test_generate_that_raises_leaves_no_lora_fused(self, available):
        engine, expected = non_pinned_zero3_engine(available)
        with pytest.raises(RuntimeError, match="generation failed"):
            generate(engine, steps=1, fail_in_layer=1)

        for weight, (original, _) in zip(weights(engine), expected):
            assert torch.equal(weight, original)

        generate(engine, steps=2)
        for container, (_, fused) in zip(engine._inference_containers, expected):
            assert torch.equal(container.seen[-1], fused)


class LinearLayer_LoRA(torch.nn.Module):
    """DeepSpeed-Chat's LoRA linear (dschat/utils/module/lora.py, dropout 0) on an nn.Linear's weight and bias."""

    def __init__(self, linear):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        rows, columns = linear.weight.shape
        self.lora_right_weight = torch.nn.Parameter(torch.randn(columns, LORA_DIM) * 0.1)
        self.lora_left_weight = torch.nn.Parameter(torch.randn(LORA_DIM, rows) * 0.1)
        self.lora_scaling = LORA_SCALING
        self.fuse_lora = False

    def forward(self, x):
        lora = (x @ self.lora_right_weight @ self.lora_left_weight) * self.lora_scaling
        return torch.nn.functional.linear(x, self.weight, self.bias) + lora


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


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineLoRANonPinnedGenerate(DistributedTest):
    world_size = 2

    # End to end: a GPT-NeoX with DeepSpeed-Chat's LoRA on every Linear of its layers, on 2 ranks on the non-pinned
    # ZeRO-3 path, generates through the injected layers (their kernels, or on CPU the PyTorch fallbacks) as the
    # model with its LoRA does, at every step. With DeepSpeed's default persistence threshold (1e5) the attention's
    # output weight (65536 elements) and the LoRA factors persist while the QKV and MLP weights are gathered.
    @pytest.mark.parametrize("persistence_threshold", [0, 100000])
    def test_generate_computes_the_model_with_its_lora(self, persistence_threshold):
        transformers = pytest.importorskip("transformers")
        torch.manual_seed(0)  # the same weights on every rank, spawned or forked
        config = transformers.GPTNeoXConfig(vocab_size=1024,
                                            hidden_size=256,
                                            num_hidden_layers=2,
                                            num_attention_heads=4,
                                            intermediate_size=1024,
                                            max_position_embeddings=256)
        model = transformers.GPTNeoXForCausalLM(config).eval()
        for layer in model.gpt_neox.layers:
            # What GPTNEOXLayerPolicy.get_hidden_heads() reads, which GPTNeoXAttention lost in Transformers 4.48.
            layer.attention.hidden_size = config.hidden_size
            layer.attention.num_attention_heads = config.num_attention_heads
            for parent in (layer.attention, layer.mlp):
                for name, child in list(parent.named_children()):
                    if isinstance(child, torch.nn.Linear):
                        setattr(parent, name, LinearLayer_LoRA(child))
        device = get_accelerator().current_device_name()
        model = model.to(device)
        input_ids = torch.arange(10, 74, device=device).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {
                "stage": 3,
                "stage3_param_persistence_threshold": persistence_threshold
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
                "max_out_tokens": 256,
                "pin_parameters": False
            },
        }
        engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
