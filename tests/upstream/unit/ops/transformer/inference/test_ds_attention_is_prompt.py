# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import pytest
import torch
from packaging import version

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.ds_attention import DeepSpeedSelfAttention
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


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineIsPromptGenerate(DistributedTest):
    world_size = 1

    # End to end: the Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU the PyTorch
    # fallbacks), computes a post-LayerNorm OPT (OPT-350m's layout) at every decode step. DeepSpeed injects OPT on
    # transformers < 4.49 and >= 5.24.
    def test_generate_computes_a_post_layer_norm_model(self):
        transformers = pytest.importorskip("transformers")
        if version.parse("4.49") <= version.parse(transformers.__version__) < version.parse("5.24"):
            pytest.skip("DeepSpeed leaves OPT to transformers from 4.49 to 5.23")
        torch.manual_seed(0)
        config = transformers.OPTConfig(vocab_size=1024,
                                        hidden_size=256,
                                        num_hidden_layers=2,
                                        num_attention_heads=4,
                                        ffn_dim=1024,
                                        max_position_embeddings=256,
                                        word_embed_proj_dim=256,
                                        do_layer_norm_before=False)
        device = get_accelerator().current_device_name()
        model = transformers.OPTForCausalLM(config).to(device).eval()
        # Biases away from zero, as a trained model has them. The LayerNorms stay as initialised: their placement is
        # another fix's (test_opt_post_layer_norm.py).
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("bias") and "layer_norm" not in name:
                    param.add_(torch.randn_like(param) * 0.1)
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
