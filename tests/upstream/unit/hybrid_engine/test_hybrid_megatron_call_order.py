# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
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

# DeepSpeedHybridEngine.eval() calls transform_for_inference() and train() calls transform_for_training()
# on every call, whatever layout the QKV weights are in.
TRANSFORMS = {"eval": "transform_for_inference", "train": "transform_for_training"}


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


def training_layout(x):
    """GPT-NeoX's layout: each head's q, k and v rows next to each other."""
    return x


def inference_layout(x):
    """Head-interleaved [q_h, k_h, v_h] rows to contiguous all-Q, all-K, all-V rows."""
    return x.reshape(NUM_HEADS, 3, HEAD_SIZE, *x.shape[1:]).transpose(0, 1).reshape(x.shape)


# Call orders DeepSpeed-Chat never uses (it alternates eval, generate, train) and the layout each leaves.
CALL_ORDERS = [
    pytest.param(["train"], training_layout, id="train_before_first_eval"),
    pytest.param(["eval", "eval"], inference_layout, id="eval_twice"),
    pytest.param(["eval", "train", "train"], training_layout, id="train_twice_after_eval"),
]


@pytest.mark.parametrize("calls, layout", CALL_ORDERS)
def test_call_order(calls, layout):
    """Without ZeRO-3 (as with ZeRO-2) the container's QKV weight and bias are the module's parameters."""
    torch.manual_seed(0)
    weight = torch.randn(3 * HIDDEN, HIDDEN)
    bias = torch.randn(3 * HIDDEN)
    container = GPTNeoXLikeContainer(torch.nn.Parameter(weight.clone()), torch.nn.Parameter(bias.clone()))

    for call in calls:
        getattr(container, TRANSFORMS[call])()

    assert torch.equal(container.qkvw, layout(weight))
    assert torch.equal(container.qkvb, layout(bias))


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


class TestCallOrderOnZeRO3Partitions(DistributedTest):
    world_size = 2

    @pytest.mark.parametrize("calls, layout", CALL_ORDERS)
    def test_call_order(self, calls, layout):
        container, weight, bias = partitioned_qkv()

        for call in calls:
            getattr(container, TRANSFORMS[call])()

        assert torch.equal(gathered(container.qkvw), layout(weight))
        assert torch.equal(gathered(container.qkvb), layout(bias))
