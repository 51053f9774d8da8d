# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import torch

from deepspeed import comm as dist
from deepspeed.ops.transformer.inference.ds_attention import BloomSelfAttention
from unit.common import DistributedTest

HEADS = 4
HEAD_DIM = 8
TOKENS = 3


class OffsetRecordingBloomAttention(BloomSelfAttention):
    """BloomSelfAttention.compute_attention() without building its kernels, recording the ALiBi head offset it
    hands the softmax kernel."""

    def __init__(self, heads, mp_group=None):
        torch.nn.Module.__init__(self)
        self.config = SimpleNamespace(dtype=torch.float32, invert_mask=False, triangular_masking=False)
        self.mp_group = mp_group
        self.num_attention_heads_per_partition = heads
        self.hidden_size_per_partition = heads * HEAD_DIM
        self.norm_factor = HEAD_DIM**0.25
        self.offsets = []

        def softmax(attn_scores, head_offset, **kwargs):
            self.offsets.append(head_offset)
            return torch.softmax(attn_scores, dim=-1)

        self.softmax_func = softmax

    def head_offset(self):
        qkv = torch.randn(1, TOKENS, 3 * self.hidden_size_per_partition)
        mask = torch.zeros(1, 1, TOKENS, TOKENS, dtype=torch.bool)
        alibi = torch.zeros(HEADS, 1, TOKENS)  # every head of the model, as transformers builds it
        self.compute_attention(qkv, mask, None, alibi, True, 0, None)
        return self.offsets[-1]


def offsets_of_every_rank(attention):
    """Every rank's offset, on every rank: each asserts on all of them, so no rank is left waiting for another."""
    offsets = [None] * dist.get_world_size()
    dist.all_gather_object(offsets, attention.head_offset())
    return offsets


class TestBloomAlibiHeadOffset(DistributedTest):
    world_size = 2

    def test_data_parallel_ranks_take_alibi_from_the_first_head(self):
        # No tensor parallelism (the Hybrid Engine with inference_tp_size 1, on every data-parallel rank):
        # each rank holds all the heads, so its ALiBi starts at head 0.
        attention = OffsetRecordingBloomAttention(HEADS)

        assert offsets_of_every_rank(attention) == [0, 0]

    def test_tensor_parallel_ranks_take_their_own_heads_alibi(self):
        # Tensor parallelism over both ranks: each holds half the heads and its ALiBi starts at its first one.
        attention = OffsetRecordingBloomAttention(HEADS // 2, mp_group=dist.new_group(ranks=[0, 1]))

        assert offsets_of_every_rank(attention) == [0, HEADS // 2]
