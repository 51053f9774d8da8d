# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.module_inject.containers.features.hybrid_megatron import HybridMegatronContainer

NUM_HEADS = 4
HEAD_SIZE = 8
HIDDEN = NUM_HEADS * HEAD_SIZE


class GPTNeoXLikeContainer(HybridMegatronContainer):
    """A GPT-NeoX container of a model with NUM_HEADS heads, holding its QKV whole or one rank's slice of it."""

    def __init__(self, qkvw, qkvb, mp_size):
        self.qkvw = qkvw
        self.qkvb = qkvb
        self.hidden_size = HIDDEN
        self.num_attention_heads = NUM_HEADS
        self.mp_size = mp_size

    def set_lora_params(self):
        pass

    def get_lora_matched_pair(self):
        return []


def inference_layout(x, heads):
    """Head-interleaved [q_h, k_h, v_h] rows to contiguous all-Q, all-K, all-V rows."""
    return x.reshape(heads, 3, HEAD_SIZE, *x.shape[1:]).transpose(0, 1).reshape(x.shape)


# With an mpu, each rank trains its slice of the heads: its QKV weight holds NUM_HEADS / mp_size heads, each
# head's q, k and v rows next to each other. Without one (DeepSpeed-Chat) the weight holds every head, whatever
# inference_tp_size is. The inference layout is all of the weight's Q rows, then K, then V.
@pytest.mark.parametrize("mp_size, sliced", [(1, False), (2, True), (4, True), (2, False)])
def test_transforms_split_the_heads_the_weight_holds(mp_size, sliced):
    torch.manual_seed(0)
    heads = NUM_HEADS // mp_size if sliced else NUM_HEADS
    weight = torch.randn(3 * HEAD_SIZE * heads, HIDDEN)
    bias = torch.randn(3 * HEAD_SIZE * heads)
    container = GPTNeoXLikeContainer(weight.clone(), bias.clone(), mp_size)

    container.transform_for_inference()
    assert torch.equal(container.qkvw, inference_layout(weight, heads))
    assert torch.equal(container.qkvb, inference_layout(bias, heads))

    container.transform_for_training()
    assert torch.equal(container.qkvw, weight)
    assert torch.equal(container.qkvb, bias)
