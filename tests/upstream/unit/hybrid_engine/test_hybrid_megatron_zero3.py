# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.module_inject.containers.features.hybrid_megatron import HybridMegatronContainer
from deepspeed.runtime.zero import GatheredParameters
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
from unit.common import DistributedTest

NUM_HEADS = 4
HEAD_SIZE = 8
HIDDEN = NUM_HEADS * HEAD_SIZE


class GPTNeoXLikeContainer(HybridMegatronContainer):

    def __init__(self, qkvw, qkvb):
        self.qkvw = qkvw
        self.qkvb = qkvb
        self.num_attention_heads = NUM_HEADS
        self.hidden_size = HIDDEN

    def set_lora_params(self):
        pass

    def get_lora_matched_pair(self):
        return []


def inference_layout(x):
    """Head-interleaved [q_h, k_h, v_h] rows to contiguous all-Q, all-K, all-V rows."""
    return x.reshape(NUM_HEADS, 3, HEAD_SIZE, *x.shape[1:]).transpose(0, 1).reshape(x.shape)


def partitioned_qkv():
    """A GPT-NeoX QKV projection partitioned by ZeRO-3 across the ranks, and its full weight and bias."""
    torch.manual_seed(0)
    reference = torch.nn.Linear(HIDDEN, 3 * HIDDEN, device=get_accelerator().current_device_name())
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": 3,
            "stage3_param_persistence_threshold": 0
        }
    }
    with deepspeed.zero.Init(config_dict_or_path=config):
        linear = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
    with GatheredParameters([linear.weight, linear.bias], modifier_rank=0):
        linear.weight.data.copy_(reference.weight.data)
        linear.bias.data.copy_(reference.bias.data)
    assert linear.weight.ds_status == ZeroParamStatus.NOT_AVAILABLE
    return GPTNeoXLikeContainer(linear.weight, linear.bias), reference.weight.detach(), reference.bias.detach()


def gathered(param):
    with GatheredParameters([param]):
        return param.detach().clone()


class TestHybridMegatronZeRO3Layout(DistributedTest):
    world_size = 2

    def test_transform_for_inference_persists_layout(self):
        container, weight, bias = partitioned_qkv()
        container.transform_for_inference()

        assert torch.equal(gathered(container.qkvw), inference_layout(weight))
        assert torch.equal(gathered(container.qkvb), inference_layout(bias))

    def test_transform_for_training_restores_layout_exactly(self):
        container, weight, bias = partitioned_qkv()
        container.transform_for_inference()
        container.transform_for_training()

        assert torch.equal(gathered(container.qkvw), weight)
        assert torch.equal(gathered(container.qkvb), bias)


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
