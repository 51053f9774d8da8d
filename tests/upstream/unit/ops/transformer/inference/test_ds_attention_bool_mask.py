# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.ds_attention import DeepSpeedSelfAttention, minus_inf
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from unit.common import DistributedTest


def inference_layers_available():
    # The compiled transformer_inference op, or its PyTorch fallbacks where the op cannot be built.
    if deepspeed.ops.__compatible_ops__[InferenceBuilder.NAME]:
        return True
    try:
        BaseOp(DeepSpeedInferenceConfig())
    except ValueError:
        return False
    return True


HIDDEN = 8
PADDING = torch.tensor([[False, False, True, True], [True, True, True, True]])  # row 0 left-padded by 2


class MaskRecordingAttention(DeepSpeedSelfAttention):
    """DeepSpeedSelfAttention.compute_attention() without building its kernels, recording the mask it hands the
    softmax kernel."""

    def __init__(self):
        torch.nn.Module.__init__(self)
        self.config = SimpleNamespace(layer_id=0, scale_attention=True)
        self.num_attention_heads_per_partition = self.num_kv_partition = 2
        self.norm_factor = 1.0
        self.key_mask = None
        self.prompt_key_mask = None
        self.masks = []

        def score_context(query_key_value, attn_mask, **kwargs):
            self.masks.append(attn_mask)
            return query_key_value, None, None

        self.score_context_func = score_context

    def step(self, tokens, mask):
        self.compute_attention(torch.randn(2, tokens, 3 * HIDDEN), mask, None, None, tokens > 1, 0, None)
        return self.masks[-1]


def prompt_mask(padding=PADDING):
    """As transformers >= 4.53 build it for SDPA: [batch, 1, query, key], True where a query may attend."""
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    return (causal[None, :, :] & padding[:, None, :])[:, None]


def additive(mask):
    return (~mask).float() * minus_inf


def test_a_bool_prompt_mask_is_handed_to_the_kernel_as_an_additive_one():
    attention = MaskRecordingAttention()

    handed = attention.step(4, prompt_mask())

    assert handed.dtype == torch.float32
    assert torch.equal(handed, additive(prompt_mask()))


def test_decode_masks_built_for_fewer_keys_keep_the_prompts_padding_masked():
    # transformers >= 4.53 size a decode step's mask by their Cache, which the injected layers leave empty:
    # it covers one key, whatever the layer attends to.
    attention = MaskRecordingAttention()
    attention.step(4, prompt_mask())

    first = attention.step(1, torch.ones(2, 1, 1, 1, dtype=torch.bool))
    second = attention.step(1, torch.ones(2, 1, 1, 1, dtype=torch.bool))

    assert torch.equal(first, additive(torch.cat([PADDING, torch.ones(2, 1, dtype=torch.bool)], -1)[:, None, None]))
    assert torch.equal(second, additive(torch.cat([PADDING, torch.ones(2, 2, dtype=torch.bool)], -1)[:, None, None]))


def test_a_decode_mask_over_every_key_is_taken_as_it_is():
    attention = MaskRecordingAttention()
    attention.step(4, prompt_mask())
    full = torch.cat([PADDING, torch.tensor([[False], [True]])], -1)[:, None, None]

    assert torch.equal(attention.step(1, full), additive(full))


def test_a_new_prompt_forgets_the_last_ones_padding():
    attention = MaskRecordingAttention()
    attention.step(4, prompt_mask())
    attention.step(4, None)

    handed = attention.step(1, torch.ones(2, 1, 1, 1, dtype=torch.bool))

    assert torch.equal(handed, additive(torch.ones(2, 1, 1, 1, dtype=torch.bool)))


def test_a_later_prompt_writes_its_keys_where_a_captured_decode_step_reads_them():
    # With hybrid_engine.enable_cuda_graph the first decode step is captured in one generate() and replayed in the
    # next ones, reading the prompt's keys from the tensor it read at capture.
    attention = MaskRecordingAttention()
    attention.step(4, prompt_mask())
    read_at_capture = attention.key_mask
    attention.step(1, torch.ones(2, 1, 1, 1, dtype=torch.bool))
    other = torch.tensor([[True, True, True, True], [False, True, True, True]])  # row 1 left-padded by 1

    attention.step(4, prompt_mask(other))

    assert read_at_capture is not None and torch.equal(read_at_capture, other[:, None, None])


def test_int64_and_additive_masks_are_handed_over_as_before():
    attention = MaskRecordingAttention()
    additive_mask = torch.zeros(2, 1, 4, 4)

    assert attention.step(4, additive_mask) is additive_mask
    assert torch.equal(attention.step(4, PADDING.long()), (1 - PADDING.long()).float() * minus_inf)


def greedy(model, input_ids, attention_mask):
    output = model.generate(input_ids,
                            attention_mask=attention_mask,
                            max_new_tokens=4,
                            min_new_tokens=4,
                            do_sample=False,
                            pad_token_id=0,
                            return_dict_in_generate=True,
                            output_logits=True)
    return output.sequences[:, input_ids.shape[1]:], torch.stack(output.logits)


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineLeftPaddedGenerate(DistributedTest):
    world_size = 1

    # End to end: a batch whose first prompt is left-padded (as DeepSpeed-Chat pads its prompts) generates through
    # the Hybrid Engine's injected Llama layers (their kernels, or on CPU the PyTorch fallbacks) as the model does,
    # every row, on the bool masks transformers >= 4.53 hands the layers.
    def test_generate_computes_every_row(self):
        transformers = pytest.importorskip("transformers")
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=1024,
                                          hidden_size=256,
                                          num_hidden_layers=2,
                                          num_attention_heads=4,
                                          num_key_value_heads=4,
                                          intermediate_size=512,
                                          max_position_embeddings=256)
        device = get_accelerator().current_device_name()
        model = transformers.LlamaForCausalLM(config).to(device).eval()
        input_ids = torch.arange(10, 26, device=device).repeat(2, 1)
        attention_mask = torch.ones_like(input_ids)
        input_ids[0, :3], attention_mask[0, :3] = 0, 0
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids, attention_mask)
        config = {
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
        engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids, attention_mask)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
