# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed.runtime.zero as zero
from deepspeed.module_inject.containers.features.hybrid_megatron import HybridMegatronContainer
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

NUM_HEADS = 4
HEAD_SIZE = 8
HIDDEN = NUM_HEADS * HEAD_SIZE


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


class GPTNeoXLikeContainer(HybridMegatronContainer):

    def __init__(self, qkvw, qkvb):
        self.qkvw = qkvw
        self.qkvb = qkvb
        self.num_attention_heads = NUM_HEADS

    def set_lora_params(self):
        pass

    def get_lora_matched_pair(self):
        return []


def inference_layout(x):
    """Head-interleaved [q_h, k_h, v_h] rows to contiguous all-Q, all-K, all-V rows."""
    return x.reshape(NUM_HEADS, 3, HEAD_SIZE, *x.shape[1:]).transpose(0, 1).reshape(x.shape)


@pytest.fixture
def container(monkeypatch):
    monkeypatch.setattr(zero, "GatheredParameters", ZeRO3GatheredParameters)
    torch.manual_seed(0)
    weight = torch.randn(3 * HIDDEN, HIDDEN)
    bias = torch.randn(3 * HIDDEN)
    return GPTNeoXLikeContainer(zero3_param(weight), zero3_param(bias)), weight, bias


def test_transform_for_inference_persists_layout(container):
    container, weight, bias = container
    container.transform_for_inference()

    assert not torch.equal(container.qkvw.ds_full, weight)
    assert torch.equal(container.qkvw.ds_full, inference_layout(weight))
    assert torch.equal(container.qkvb.ds_full, inference_layout(bias))


def test_transform_for_training_restores_layout_exactly(container):
    container, weight, bias = container
    container.transform_for_inference()
    container.transform_for_training()

    assert torch.equal(container.qkvw.ds_full, weight)
    assert torch.equal(container.qkvb.ds_full, bias)


def test_transforms_without_zero3_round_trip():
    torch.manual_seed(0)
    weight = torch.randn(3 * HIDDEN, HIDDEN)
    bias = torch.randn(3 * HIDDEN)
    container = GPTNeoXLikeContainer(weight.clone(), bias.clone())

    container.transform_for_inference()
    assert torch.equal(container.qkvw, inference_layout(weight))
    assert torch.equal(container.qkvb, inference_layout(bias))

    container.transform_for_training()
    assert torch.equal(container.qkvw, weight)
    assert torch.equal(container.qkvb, bias)
