# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import pytest
import torch

from deepspeed.ops.transformer.inference.ds_attention import DeepSpeedSelfAttention

HIDDEN = 8


class SplitQKVAttention(DeepSpeedSelfAttention):
    """A post-LayerNorm DeepSpeedSelfAttention as the ZeRO-3 Hybrid Engine leaves it for a model with separate
    q/k/v (OPT): attn_qkvw and attn_qkvb unset, q/k/v weights and biases apart. Its ops are stand-ins (no kernel
    is built); the post-LayerNorm linear records what it is handed."""

    def __init__(self, with_bias):
        torch.nn.Module.__init__(self)
        self.config = SimpleNamespace(pre_layer_norm=False, mlp_after_attn=True)
        self.mp_group = None
        self.num_attention_heads_per_partition = 2
        self.hidden_size_per_partition = HIDDEN
        self.attn_qkvw = self.attn_qkvb = None
        self.attn_qw, self.attn_kw, self.attn_vw = (torch.randn(HIDDEN, HIDDEN) for _ in range(3))
        if with_bias:
            self.attn_qb, self.attn_kb, self.attn_vb = (torch.randn(HIDDEN) for _ in range(3))
        else:
            self.attn_qb = self.attn_kb = self.attn_vb = None
        self.attn_ow = torch.randn(HIDDEN, HIDDEN)
        self.linear_calls = []
        self.vector_matmul_func = lambda input, weight: input @ weight

    def linear_func(self, input, weight, bias, add_bias, do_flash_attn, num_heads, num_layers):
        self.linear_calls.append((add_bias, None if bias is None else bias.clone()))
        return input @ weight.t() + (bias if add_bias else 0)

    def compute_attention(self, qkv_out, input_mask, layer_past, alibi, is_prompt, token_idx, position_ids):
        return qkv_out[..., :HIDDEN], None, None


@pytest.fixture
def qkv_buffers(monkeypatch):
    monkeypatch.setattr(DeepSpeedSelfAttention, "_qkv_buffers",
                        [torch.empty(3 * HIDDEN, HIDDEN), torch.empty(3 * HIDDEN)])


# The post-LayerNorm linear adds the q/k/v biases the merge builds; a model without them gets none.
@pytest.mark.parametrize("with_bias", [True, False])
def test_post_layer_norm_linear_adds_the_merged_qkv_bias(with_bias, qkv_buffers):
    attention = SplitQKVAttention(with_bias)

    attention(torch.randn(2, 5, HIDDEN), input_mask=None)

    [(add_bias, bias)] = attention.linear_calls
    assert add_bias == with_bias
    if with_bias:
        assert torch.equal(bias, torch.cat([attention.attn_qb, attention.attn_kb, attention.attn_vb]))
