# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import pytest
import torch

import deepspeed.runtime.hybrid_engine as hybrid_engine
from deepspeed.module_inject.containers.features.hybrid_engine import HybridEngineContainer
from deepspeed.runtime.hybrid_engine import DeepSpeedHybridEngine
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

IN_FEATURES = 16
OUT_FEATURES = 24
LORA_DIM = 2
LORA_SCALING = 0.5
NUM_LAYERS = 2
# (W + delta) - delta equals W up to one fp32 rounding per element; |W + delta| < 16 here.
RESTORE_ATOL = 1e-5


class ZeRO3GatheredParameters:
    """Single-process stand-in for ``deepspeed.zero.GatheredParameters`` at world size >= 2.

    A partitioned parameter holds no data outside the context. Entering gathers the full tensor;
    on exit the full tensor is repartitioned, so an in-place change survives only when
    ``modifier_rank`` is set (the modifier's copy is broadcast first). Without it the change is
    discarded, as with real ZeRO-3 partitions on more than one rank.
    """

    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        self.params = [params] if isinstance(params, torch.nn.Parameter) else list(params)
        self.modifier_rank = modifier_rank

    def __enter__(self):
        for param in self.params:
            param.data = param.ds_full.clone()
            param.ds_status = ZeroParamStatus.AVAILABLE

    def __exit__(self, *exc):
        for param in self.params:
            if self.modifier_rank is not None:
                param.ds_full = param.data.clone()
            param.data = torch.empty(0, dtype=param.ds_full.dtype)
            param.ds_status = ZeroParamStatus.NOT_AVAILABLE


def zero3_param(full):
    param = torch.nn.Parameter(torch.empty(0, dtype=full.dtype), requires_grad=False)
    param.ds_id = id(param)
    param.ds_full = full.clone()
    param.ds_status = ZeroParamStatus.NOT_AVAILABLE
    return param


class LoRALayerContainer(HybridEngineContainer):
    """One LoRA-adapted weight; its inference module records the weight each forward sees."""

    def __init__(self, weight, lora):
        self.weight = weight
        self.lora = lora
        self.seen = []
        self.module = SimpleNamespace(forward=lambda *inputs, **kwargs: self.seen.append(self.weight.data.clone()))

    def set_lora_params(self):
        self.lora_params = [self.lora]

    def get_lora_matched_pair(self):
        return [(self.lora, self.weight)]


@pytest.fixture
def engine(monkeypatch):
    """A Hybrid Engine on the ZeRO-3 non-pinned path (pin_parameters=False), with only what it reads."""
    monkeypatch.setattr(hybrid_engine, "GatheredParameters", ZeRO3GatheredParameters)
    torch.manual_seed(0)
    engine = DeepSpeedHybridEngine.__new__(DeepSpeedHybridEngine)
    containers, layer_params, layer_lora_params, expected = [], [], [], []
    for _ in range(NUM_LAYERS):
        weight = torch.randn(OUT_FEATURES, IN_FEATURES)
        right = torch.randn(IN_FEATURES, LORA_DIM)
        left = torch.randn(LORA_DIM, OUT_FEATURES)
        lora = [zero3_param(right), zero3_param(left), LORA_SCALING]
        containers.append(LoRALayerContainer(zero3_param(weight), lora))
        layer_params.append([containers[-1].weight])
        layer_lora_params.append(lora[:-1])
        expected.append((weight, weight + LORA_SCALING * torch.matmul(left.t(), right.t())))
    engine.__dict__.update(_inference_containers=containers,
                           layer_params=layer_params,
                           layer_lora_params=layer_lora_params,
                           all_lora_params=[p for pair in layer_lora_params for p in pair],
                           is_lora_fused=False)
    return engine, expected


def run_forwards(engine, steps):
    """A prompt forward, then decode forwards, through every layer as generate() does."""
    forwards = [engine._zero3_forward(layer_id) for layer_id in range(NUM_LAYERS)]
    for _ in range(steps):
        for forward in forwards:
            forward()


def test_every_forward_sees_fused_lora(engine):
    engine, expected = engine
    run_forwards(engine, steps=3)

    for container, (_, fused) in zip(engine._inference_containers, expected):
        assert len(container.seen) == 3
        for seen in container.seen:
            assert torch.equal(seen, fused)


def test_unfuse_after_generate_restores_weights(engine):
    engine, expected = engine
    run_forwards(engine, steps=3)
    engine.unfuse_lora_weight_non_pinned()
    engine.is_lora_fused = False

    for container, (weight, _) in zip(engine._inference_containers, expected):
        assert torch.allclose(container.weight.ds_full, weight, rtol=0, atol=RESTORE_ATOL)

    run_forwards(engine, steps=2)
    for container, (_, fused) in zip(engine._inference_containers, expected):
        assert torch.allclose(container.seen[-1], fused, rtol=0, atol=RESTORE_ATOL)
