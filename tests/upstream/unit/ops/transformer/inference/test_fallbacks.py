# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import math
import types

import pytest
import torch

from deepspeed.accelerator import get_accelerator
from deepspeed.ops.transformer.inference.config import DeepSpeedInferenceConfig
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from deepspeed.ops.transformer.inference.op_binding.gelu_gemm import GELUGemmOp
from deepspeed.ops.transformer.inference.op_binding.linear import LinearOp
from deepspeed.ops.transformer.inference.op_binding.mlp_gemm import MLPGemmOp
from deepspeed.ops.transformer.inference.op_binding.softmax import SoftmaxOp
from deepspeed.ops.transformer.inference.op_binding.softmax_context import SoftmaxContextOp
from deepspeed.ops.transformer.inference.op_binding.workspace import InferenceContext
from deepspeed.utils.types import ActivationFuncType

transformers = pytest.importorskip("transformers")

BATCH, SEQ, HEADS, HEAD_DIM = 2, 5, 4, 8
HIDDEN = HEADS * HEAD_DIM


@pytest.fixture
def fallbacks():
    """Every op binding takes its PyTorch fallback, as where the accelerator has no kernel for the dtype (CPU;
    ROCm in bf16)."""
    saved = BaseOp.inference_module
    BaseOp.inference_module = types.SimpleNamespace()
    yield
    BaseOp.inference_module = saved


def config(**kwargs):
    return DeepSpeedInferenceConfig(hidden_size=HIDDEN, heads=HEADS, dtype=torch.float32, **kwargs)


def causal_attention(query, key, value, scores_bias=None):
    """[batch, heads, seq, head_dim] each: softmax(q k^T / sqrt(d) + bias) v with a causal mask."""
    scores = query @ key.transpose(-1, -2) / math.sqrt(query.shape[-1])
    if scores_bias is not None:
        scores = scores + scores_bias
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    return (probs @ value).transpose(1, 2).reshape(query.shape[0], query.shape[2], -1)


def gptneox_rotary(query, key, rotary_dim):
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding, apply_rotary_pos_emb
    model_config = transformers.GPTNeoXConfig(hidden_size=HIDDEN,
                                              num_attention_heads=HEADS,
                                              rotary_pct=rotary_dim / HEAD_DIM)
    position_ids = torch.arange(query.shape[2])[None]
    cos, sin = GPTNeoXRotaryEmbedding(model_config)(query, position_ids)
    return apply_rotary_pos_emb(query, key, cos, sin)


def gptj_rotary(query, key, rotary_dim):
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb, create_sinusoidal_positions
    sincos = create_sinusoidal_positions(query.shape[2], rotary_dim)[None]
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)

    def rotate(x):  # GPT-J rotates [batch, seq, heads, head_dim]
        x = x.transpose(1, 2)
        turned = apply_rotary_pos_emb(x[..., :rotary_dim], sin, cos)
        return torch.cat((turned, x[..., rotary_dim:]), dim=-1).transpose(1, 2)

    return rotate(query), rotate(key)


# GPT-NeoX rotates the first half of the head's halves, GPT-J interleaved pairs; both only part of each head. A
# prompt, then one decode step at the position after it, as the kernel places them.
@pytest.mark.parametrize("rotate_every_two, reference", [(False, gptneox_rotary), (True, gptj_rotary)])
def test_softmax_context_rotary(fallbacks, rotate_every_two, reference):
    rotary_dim = HEAD_DIM // 2
    op = SoftmaxContextOp(
        config(rotary_dim=rotary_dim, rotate_half=not rotate_every_two, rotate_every_two=rotate_every_two))
    context = InferenceContext.Instance()
    context.gen_workspace(1, HEADS, BATCH, SEQ + 1, HIDDEN, 1, False, torch.float32, 0, SEQ + 1, 1)
    qkv = torch.randn(BATCH, SEQ + 1, 3 * HIDDEN, device=get_accelerator().device_name())  # the KV cache's device
    norm_factor = 1 / math.sqrt(math.sqrt(HEAD_DIM))

    def step(tokens, is_prompt):
        return op.softmax_context_fallback(tokens, None, rotary_dim, not rotate_every_two,
                                           rotate_every_two, HEADS, -1, norm_factor, True, False, 1, False, 0, 1,
                                           torch.empty(1), 10000.0, is_prompt, None, None)[0]

    prompt, decode = step(qkv[:, :SEQ], True), step(qkv[:, SEQ:], False)
    context.release_workspace()

    query, key, value = qkv.cpu().view(BATCH, SEQ + 1, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
    expected = causal_attention(*reference(query, key, rotary_dim), value)
    assert torch.allclose(torch.cat((prompt, decode), dim=1).cpu(), expected, atol=1e-5)


# Grouped-query attention (Llama-2-70B, Llama-3): the fused QKV holds HEADS query heads, then num_kv key and num_kv
# value heads, as the kernel splits it; each key/value head serves HEADS // num_kv query heads (1: multi-query).
@pytest.mark.parametrize("num_kv", [2, 1])
def test_softmax_context_grouped_query(fallbacks, num_kv):
    from transformers.models.llama.modeling_llama import repeat_kv
    op = SoftmaxContextOp(config())
    context = InferenceContext.Instance()
    context.gen_workspace(1, HEADS, BATCH, SEQ + 1, HIDDEN, 1, False, torch.float32, 0, SEQ + 1, 1)
    qkv = torch.randn(BATCH, SEQ + 1, (HEADS + 2 * num_kv) * HEAD_DIM, device=get_accelerator().device_name())
    norm_factor = 1 / math.sqrt(math.sqrt(HEAD_DIM))

    def step(tokens, is_prompt):
        return op.softmax_context_fallback(tokens, None, -1, False, False, HEADS, num_kv, norm_factor, True, False, 1,
                                           False, 0, 1, torch.empty(1), 10000.0, is_prompt, None, None)[0]

    prompt, decode = step(qkv[:, :SEQ], True), step(qkv[:, SEQ:], False)
    context.release_workspace()

    query, key, value = qkv.cpu().split([HEADS * HEAD_DIM, num_kv * HEAD_DIM, num_kv * HEAD_DIM], dim=-1)
    query, key, value = (t.reshape(BATCH, SEQ + 1, -1, HEAD_DIM).transpose(1, 2) for t in (query, key, value))
    expected = causal_attention(query, repeat_kv(key, HEADS // num_kv), repeat_kv(value, HEADS // num_kv))
    assert torch.allclose(torch.cat((prompt, decode), dim=1).cpu(), expected, atol=1e-5)


# BLOOM: each sequence's heads read their own ALiBi rows (Transformers builds [batch * heads, 1, keys]).
def test_softmax_alibi_per_sequence(fallbacks):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    mask = torch.ones(BATCH, SEQ)
    mask[0, :2] = 0  # a left-padded sequence: its ALiBi differs from the other's
    alibi = build_alibi_tensor(mask, HEADS, torch.float32)
    scores = torch.randn(BATCH, HEADS, SEQ, SEQ)

    probs = SoftmaxOp(config()).softmax_fallback(scores.clone(), None, alibi, False, False, False, 1, False, 1.0, 0, 1)

    expected = (scores + alibi.view(BATCH, HEADS, 1, SEQ)).softmax(-1)
    assert torch.allclose(probs, expected, atol=1e-6)


# GPT-Neo's local layers: a query sees only the keys less than window_size positions behind it.
def test_softmax_local_attention(fallbacks):
    window = 2
    scores = torch.randn(BATCH, HEADS, SEQ, SEQ)

    probs = SoftmaxOp(config()).softmax_fallback(scores.clone(), None, None, True, False, True, window, False, 1.0, 0,
                                                 1)

    causal = torch.ones(SEQ, SEQ, dtype=torch.bool).tril()
    local = causal ^ torch.tril(causal, -window)  # transformers' GPTNeoSelfAttention bias for "local"
    expected = scores.masked_fill(~local, float("-inf")).softmax(-1)
    assert torch.allclose(probs, expected, atol=1e-6)


# GPT-NeoX's parallel residual: the MLP reads its LayerNorm of the layer's input, not of the attention's output.
def test_mlp_gemm_parallel_residual(fallbacks):
    model_config = transformers.GPTNeoXConfig(hidden_size=HIDDEN,
                                              num_attention_heads=HEADS,
                                              intermediate_size=3 * HIDDEN)
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXMLP
    mlp, norm = GPTNeoXMLP(model_config), torch.nn.LayerNorm(HIDDEN)
    with torch.no_grad():
        norm.weight.normal_(), norm.bias.normal_()
    layer_input, attention_output = torch.randn(BATCH, SEQ, HIDDEN), torch.randn(BATCH, SEQ, HIDDEN)
    op = MLPGemmOp(config(mlp_after_attn=False, transposed_mode=True))

    output, normed = op.mlp_gemm_func(attention_output, layer_input, torch.zeros(HIDDEN), mlp.dense_h_to_4h.weight,
                                      mlp.dense_4h_to_h.weight, mlp.dense_h_to_4h.bias, norm.weight, norm.bias,
                                      norm.eps, True, False, None, None, False, ActivationFuncType.GELU, True)

    with torch.no_grad():
        expected = mlp(norm(layer_input)) - mlp.dense_4h_to_h.bias  # the layer adds the output bias itself
    assert torch.allclose(output, expected, atol=1e-5)
    assert torch.allclose(normed, norm(layer_input), atol=1e-6)


# OPT's MLP applies ReLU.
def test_mlp_gemm_relu(fallbacks):
    from transformers.models.opt.modeling_opt import OPTDecoderLayer
    layer = OPTDecoderLayer(transformers.OPTConfig(hidden_size=HIDDEN, ffn_dim=3 * HIDDEN, num_attention_heads=HEADS),
                            layer_idx=0)
    attention_output, residual = torch.randn(BATCH, SEQ, HIDDEN), torch.randn(BATCH, SEQ, HIDDEN)
    norm = layer.final_layer_norm
    op = MLPGemmOp(config(transposed_mode=True))

    output, _ = op.mlp_gemm_func(attention_output, residual, torch.zeros(HIDDEN), layer.fc1.weight, layer.fc2.weight,
                                 layer.fc1.bias, norm.weight, norm.bias, norm.eps, True, True, None, None, False,
                                 ActivationFuncType.ReLU, True)

    with torch.no_grad():
        expected = layer.fc2(layer.activation_fn(layer.fc1(norm(attention_output + residual)))) - layer.fc2.bias
    assert torch.allclose(output, expected, atol=1e-5)


# GPT-J's MLP reads the attention's LayerNorm: fc_in, GELU, fc_out on [out, in] weights, the Hugging Face layout.
def test_gelu_gemm_transposed(fallbacks):
    from transformers.models.gptj.modeling_gptj import GPTJMLP
    mlp = GPTJMLP(4 * HIDDEN, transformers.GPTJConfig(n_embd=HIDDEN, activation_function="gelu_new"))
    hidden = torch.randn(BATCH, SEQ, HIDDEN)
    op = GELUGemmOp(config(transposed_mode=True))

    output = op.fused_gemm_gelu(hidden, mlp.fc_in.weight, None, mlp.fc_in.bias, mlp.fc_out.weight, None, False, True)

    with torch.no_grad():
        expected = mlp(hidden) - mlp.fc_out.bias
    assert torch.allclose(output, expected, atol=1e-5)


# A post-LayerNorm layer's (OPT-350m's) QKV projection.
def test_linear(fallbacks):
    linear = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
    hidden = torch.randn(BATCH, SEQ, HIDDEN)
    op = LinearOp(config(transposed_mode=True))

    output = op.linear_func(hidden, linear.weight, linear.bias, True, False, HEADS, True, 10000.0)

    with torch.no_grad():
        assert torch.allclose(output, linear(hidden), atol=1e-6)
