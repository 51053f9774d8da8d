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


def prompt_step(model, input_ids):
    """The first generated token and its logits: the prompt's step alone (the decode steps of a post-LayerNorm
    model rely on another fix, test_ds_attention_is_prompt.py)."""
    output = model.generate(input_ids,
                            attention_mask=torch.ones_like(input_ids),
                            max_new_tokens=1,
                            min_new_tokens=1,
                            do_sample=False,
                            pad_token_id=0,
                            return_dict_in_generate=True,
                            output_logits=True)
    return output.sequences[:, input_ids.shape[1]:], torch.stack(output.logits)


@pytest.mark.skipif(version.parse("4.49") <= version.parse(transformers.__version__) < version.parse("5.24"),
                    reason="DeepSpeed leaves OPT to transformers from 4.49 to 5.23")
@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineZeRO3PostLayerNormGenerate(DistributedTest):
    world_size = 1

    # End to end: under ZeRO-3, the Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU
    # the PyTorch fallbacks), computes a post-LayerNorm OPT (OPT-350m's layout) with its q/k/v biases. DeepSpeed
    # injects OPT on transformers < 4.49 and >= 5.24.
    def test_generate_computes_a_post_layer_norm_model(self):
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
            expected_tokens, expected_logits = prompt_step(model, input_ids)
        ds_config = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {
                "stage": 3
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
            tokens, logits = prompt_step(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
