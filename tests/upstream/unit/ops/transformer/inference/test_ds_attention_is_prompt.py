# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import pytest
import torch

from deepspeed.ops.transformer.inference.ds_attention import DeepSpeedSelfAttention

HIDDEN = 8


class RecordingAttention(DeepSpeedSelfAttention):
    """DeepSpeedSelfAttention.forward() with its ops replaced by shape-true stand-ins (no kernel is built), recording
    the is_prompt it hands compute_attention()."""

    def __init__(self, pre_layer_norm):
        torch.nn.Module.__init__(self)
        self.config = SimpleNamespace(pre_layer_norm=pre_layer_norm, mlp_after_attn=True)
        self.mp_group = None
        self.num_attention_heads_per_partition = 2
        self.attn_qkvw, self.attn_qkvb = torch.randn(HIDDEN, 3 * HIDDEN), torch.randn(3 * HIDDEN)
        self.attn_ow = torch.randn(HIDDEN, HIDDEN)
        # As the kernels return: the pre-LayerNorm QKV GEMM (qkv, normalized input), the post-LayerNorm linear
        # the qkv tensor alone.
        self.qkv_func = lambda input, weight, bias, gamma, beta: (input @ weight + bias, input)
        self.linear_func = lambda input, weight, bias, add_bias, do_flash_attn, num_heads, num_layers: input @ weight
        self.vector_matmul_func = lambda input, weight: input @ weight
        self.is_prompt = []

    def compute_attention(self, qkv_out, input_mask, layer_past, alibi, is_prompt, token_idx, position_ids):
        self.is_prompt.append(is_prompt)
        qkv = qkv_out[0] if isinstance(qkv_out, tuple) else qkv_out
        return qkv[..., :HIDDEN], None, None


# A prompt has more than one token, a decode step one, whatever the layer's LayerNorm placement (post-LayerNorm:
# OPT-350m).
@pytest.mark.parametrize("pre_layer_norm", [True, False])
@pytest.mark.parametrize("seq_len, is_prompt", [(5, True), (1, False)])
def test_is_prompt_follows_the_sequence_length(pre_layer_norm, seq_len, is_prompt):
    attention = RecordingAttention(pre_layer_norm)

    attention(torch.randn(2, seq_len, HIDDEN), input_mask=None)

    assert attention.is_prompt == [is_prompt]
