# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

from deepspeed.ops.transformer.inference.ds_attention import DeepSpeedSelfAttention

HIDDEN = 8


class MergeOnlyAttention(DeepSpeedSelfAttention):
    """DeepSpeedSelfAttention's q/k/v merge (plain tensor copies) without building its kernels."""

    def __init__(self, with_bias):
        torch.nn.Module.__init__(self)
        self.hidden_size_per_partition = HIDDEN
        self.attn_qw, self.attn_kw, self.attn_vw = (torch.randn(HIDDEN, HIDDEN) for _ in range(3))
        if with_bias:
            self.attn_qb, self.attn_kb, self.attn_vb = (torch.randn(HIDDEN) for _ in range(3))
        else:
            self.attn_qb = self.attn_kb = self.attn_vb = None


@pytest.fixture
def unwritten_buffers(monkeypatch):
    # Under ZeRO-3 the Hybrid Engine merges q/k/v into these class-wide buffers, allocated with torch.empty:
    # NaN stands for whatever that memory held.
    monkeypatch.setattr(DeepSpeedSelfAttention, "_qkv_buffers",
                        [torch.full((3 * HIDDEN, HIDDEN), float("nan")),
                         torch.full((3 * HIDDEN, ), float("nan"))])


def test_merge_qkv_without_biases_adds_no_bias(unwritten_buffers):
    attention = MergeOnlyAttention(with_bias=False)

    qkvw, qkvb = attention._merge_qkv()

    assert torch.equal(qkvw, torch.cat([attention.attn_qw, attention.attn_kw, attention.attn_vw]))
    assert qkvb is None


def test_merge_qkv_with_biases_merges_them(unwritten_buffers):
    attention = MergeOnlyAttention(with_bias=True)

    qkvw, qkvb = attention._merge_qkv()

    assert torch.equal(qkvw, torch.cat([attention.attn_qw, attention.attn_kw, attention.attn_vw]))
    assert torch.equal(qkvb, torch.cat([attention.attn_qb, attention.attn_kb, attention.attn_vb]))
