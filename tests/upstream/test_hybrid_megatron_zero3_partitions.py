# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import os

import pytest
import torch

import deepspeed
import deepspeed.comm as dist
from deepspeed.module_inject.containers.features.hybrid_megatron import HybridMegatronContainer
from deepspeed.runtime.zero import GatheredParameters
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

NUM_HEADS = 4
HEAD_SIZE = 8
HIDDEN = NUM_HEADS * HEAD_SIZE


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


def transform(container, name):
    """Runs a transform while the QKV bias is already gathered (as a persistent parameter is), so the
    transform gathers the QKV weight alone. At world size 1 a gather of several parameters hands back
    views of the partitions, where an in-place change survives by accident; a single-parameter gather
    hands back a copy, which is discarded on exit unless modifier_rank is set, as at world size >= 2.
    """
    with GatheredParameters([container.qkvb], modifier_rank=0):
        getattr(container, name)()


def gathered(param):
    with GatheredParameters([param]):
        return param.detach().clone()


@pytest.fixture
def partitioned_qkv():
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29661"), ("RANK", "0"), ("LOCAL_RANK", "0"),
                       ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    if not dist.is_initialized():
        deepspeed.init_distributed(dist_backend="gloo")
    assert dist.get_world_size() == 1

    torch.manual_seed(0)
    reference = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
    config = {"train_batch_size": 1, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    with deepspeed.zero.Init(config_dict_or_path=config):
        linear = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
    with GatheredParameters([linear.weight, linear.bias], modifier_rank=0):
        linear.weight.data.copy_(reference.weight.data)
        linear.bias.data.copy_(reference.bias.data)
    assert linear.weight.ds_status == ZeroParamStatus.NOT_AVAILABLE
    return GPTNeoXLikeContainer(linear.weight, linear.bias), reference.weight.detach(), reference.bias.detach()


def test_transform_for_inference_persists_layout_on_partitions(partitioned_qkv):
    container, weight, bias = partitioned_qkv
    transform(container, "transform_for_inference")

    assert torch.equal(gathered(container.qkvw), inference_layout(weight))
    assert torch.equal(gathered(container.qkvb), inference_layout(bias))


def test_transform_for_training_restores_layout_on_partitions(partitioned_qkv):
    container, weight, bias = partitioned_qkv
    transform(container, "transform_for_inference")
    transform(container, "transform_for_training")

    assert torch.equal(gathered(container.qkvw), weight)
    assert torch.equal(gathered(container.qkvb), bias)
