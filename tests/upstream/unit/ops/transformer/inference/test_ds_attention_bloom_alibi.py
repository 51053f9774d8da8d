# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import pytest
import torch
from packaging import version

import deepspeed
from deepspeed import comm as dist
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.ds_attention import BloomSelfAttention
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from unit.common import DistributedTest

transformers = pytest.importorskip("transformers")


def inference_layers_available():
    # The compiled transformer_inference op, or its PyTorch fallbacks where the op cannot be built.
    if deepspeed.ops.__compatible_ops__[InferenceBuilder.NAME]:
        return True
    try:
        BaseOp(DeepSpeedInferenceConfig())
    except ValueError:
        return False
    return True


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


def greedy(model, input_ids):
    output = model.generate(input_ids,
                            attention_mask=torch.ones_like(input_ids),
                            max_new_tokens=4,
                            min_new_tokens=4,
                            do_sample=False,
                            pad_token_id=0,
                            return_dict_in_generate=True,
                            output_logits=True)
    return output.sequences[:, input_ids.shape[1]:], torch.stack(output.logits)


# DeepSpeed's BLOOM container refuses transformers newer than 4.43.4. Skipped before the ranks start: a rank that
# skips after joining the process group may leave while the other still connects to it.
@pytest.mark.skipif(version.parse(transformers.__version__) > version.parse("4.43.4"),
                    reason="DeepSpeed injects BLOOM on transformers <= 4.43.4 only")
@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineBloomGenerate(DistributedTest):
    world_size = 2

    # End to end: on two data-parallel ranks (inference_tp_size 1), the Hybrid Engine's generate(), through the
    # injected layers (their kernels, or on CPU the PyTorch fallbacks), computes a BLOOM on each rank, with each
    # head's own ALiBi.
    def test_generate_computes_the_model_on_every_rank(self):
        torch.manual_seed(0)
        config = transformers.BloomConfig(vocab_size=1024, hidden_size=256, n_layer=2, n_head=4)
        device = get_accelerator().current_device_name()
        model = transformers.BloomForCausalLM(config).to(device).eval()
        input_ids = torch.arange(10, 74, device=device).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
        ds_config = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {
                "stage": 2
            },
            "optimizer": {
                "type": "Adam",
                "params": {
                    "lr": 1e-3,
                    "torch_adam": True
                }
            },
            "hybrid_engine": {
                "enabled": True,
                "max_out_tokens": 256
            },
        }
        engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
