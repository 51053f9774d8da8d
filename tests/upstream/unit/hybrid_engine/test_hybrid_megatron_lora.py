# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import torch

from deepspeed.module_inject.containers.features.hybrid_megatron import HybridMegatronContainer

NUM_HEADS = 4
HEAD_SIZE = 8
HIDDEN = NUM_HEADS * HEAD_SIZE
LORA_DIM = 2
LORA_SCALING = 0.5
# (W + delta) - delta equals W up to one fp32 rounding per element; |W + delta| < 32 here.
RESTORE_ATOL = 1e-5


class GPTNeoXLikeContainer(HybridMegatronContainer):

    def __init__(self, qkvw, qkvb, qkv_lora, dense_w, dense_lora):
        self.qkvw = qkvw
        self.qkvb = qkvb
        self.dense_w = dense_w
        self.num_attention_heads = NUM_HEADS
        self.hidden_size = HIDDEN
        self.qkv_lora = qkv_lora
        self.dense_lora = dense_lora

    def set_lora_params(self):
        self.lora_params = [self.qkv_lora, self.dense_lora]

    def get_lora_matched_pair(self):
        return [(self.qkv_lora, self.qkvw), (self.dense_lora, self.dense_w)]


def inference_layout(x):
    """Head-interleaved [q_h, k_h, v_h] rows to contiguous all-Q, all-K, all-V rows."""
    return x.reshape(NUM_HEADS, 3, HEAD_SIZE, *x.shape[1:]).transpose(0, 1).reshape(x.shape)


def lora(out_features, in_features):
    """DeepSpeed-Chat LoRA factors: right [in, r], left [r, out]; and the delta they add to W [out, in]."""
    right = torch.randn(in_features, LORA_DIM)
    left = torch.randn(LORA_DIM, out_features)
    return [right, left, LORA_SCALING], LORA_SCALING * torch.matmul(left.t(), right.t())


def make_container():
    torch.manual_seed(0)
    qkvw = torch.randn(3 * HIDDEN, HIDDEN)
    qkvb = torch.randn(3 * HIDDEN)
    dense_w = torch.randn(HIDDEN, HIDDEN)
    qkv_lora, qkv_delta = lora(3 * HIDDEN, HIDDEN)
    dense_lora, dense_delta = lora(HIDDEN, HIDDEN)
    container = GPTNeoXLikeContainer(qkvw.clone(), qkvb.clone(), qkv_lora, dense_w.clone(), dense_lora)
    return container, (qkvw, qkvb, dense_w), (qkv_delta, dense_delta)


def test_fuse_lora_after_transform_for_inference():
    container, (qkvw, qkvb, dense_w), (qkv_delta, dense_delta) = make_container()
    container.transform_for_inference()
    container.fuse_lora()

    assert torch.equal(container.qkvw, inference_layout(qkvw + qkv_delta))
    assert torch.equal(container.qkvb, inference_layout(qkvb))
    assert torch.equal(container.dense_w, dense_w + dense_delta)


def test_unfuse_lora_and_transform_for_training_restore_weights():
    container, (qkvw, qkvb, dense_w), _ = make_container()
    container.transform_for_inference()
    container.fuse_lora()
    container.unfuse_lora()
    container.transform_for_training()

    assert torch.allclose(container.qkvw, qkvw, rtol=0, atol=RESTORE_ATOL)
    assert torch.equal(container.qkvb, qkvb)
    assert torch.allclose(container.dense_w, dense_w, rtol=0, atol=RESTORE_ATOL)


def test_fuse_lora_in_training_layout():
    container, (qkvw, _, _), (qkv_delta, _) = make_container()
    container.fuse_lora()
    assert torch.equal(container.qkvw, qkvw + qkv_delta)

    container.unfuse_lora()
    assert torch.allclose(container.qkvw, qkvw, rtol=0, atol=RESTORE_ATOL)
