# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import torch

from deepspeed.module_inject import ReplaceWithTensorSlicing
from deepspeed.module_inject.containers.bloom import DS_BloomContainer

HIDDEN = 16
TP = 2


def bloom_container(qkvw, qkvb, attn_qkvw, attn_qkvb):
    """DS_BloomContainer's tensor-parallel copy alone (its constructor checks the transformers version)."""
    container = DS_BloomContainer.__new__(DS_BloomContainer)
    container.qkvw, container.qkvb = qkvw, qkvb
    container.module = SimpleNamespace(attention=SimpleNamespace(attn_qkvw=attn_qkvw, attn_qkvb=attn_qkvb))
    return container


def hybrid_engine_mp_replace():
    """As the Hybrid Engine builds it: weights in [out, in], out_dim 0 and in_dim 1."""
    return ReplaceWithTensorSlicing(mp_group=None, mp_size=TP, out_dim=0, in_dim=1)


def test_a_ranks_slice_is_kept_under_the_hybrid_engine():
    # With an mpu on ZeRO-3, the Hybrid Engine's generate() hands each layer the training weights, this rank's slice
    # of the heads, and the injected attention holds those same tensors: the copy must leave them as they are.
    qkvw, qkvb = torch.randn(3 * HIDDEN // TP, HIDDEN), torch.randn(3 * HIDDEN // TP)
    expected = qkvw.clone()
    container = bloom_container(qkvw, qkvb, qkvw, qkvb)

    container.attention_qkv_mp(hybrid_engine_mp_replace(), reversed_dim=True)

    assert torch.equal(container.module.attention.attn_qkvw, expected)


def test_whole_weights_give_this_rank_its_block_of_heads():
    # BLOOM's QKV rows are head-interleaved ([heads, 3, head_dim]): rank 0 of 2 holds the first half of the rows.
    qkvw, qkvb = torch.randn(3 * HIDDEN, HIDDEN), torch.randn(3 * HIDDEN)
    container = bloom_container(qkvw, qkvb, torch.empty(3 * HIDDEN // TP, HIDDEN), torch.empty(3 * HIDDEN // TP))

    container.attention_qkv_mp(hybrid_engine_mp_replace(), reversed_dim=True)

    assert torch.equal(container.module.attention.attn_qkvw, qkvw[:3 * HIDDEN // TP])
