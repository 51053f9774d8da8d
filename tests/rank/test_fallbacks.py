import types

import pytest
import torch
import torch.nn.functional as F

from repro.rank import fallbacks


@pytest.mark.parametrize("start", [0, 5])
def test_partial_rotary_matches_transformers(tiny_config, start):
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding, apply_rotary_pos_emb

    heads = tiny_config.num_attention_heads
    head_size = tiny_config.hidden_size // heads
    rotary_dim = int(head_size * tiny_config.rotary_pct)
    q, k = torch.randn(1, heads, 3, head_size), torch.randn(1, heads, 3, head_size)
    positions = torch.arange(start, start + 3)
    cos, sin = GPTNeoXRotaryEmbedding(tiny_config)(q, positions[None])
    ref_q, ref_k = apply_rotary_pos_emb(q, k, cos, sin)

    got_q = fallbacks.apply_partial_rotary(q, positions, rotary_dim, tiny_config.rotary_emb_base)
    got_k = fallbacks.apply_partial_rotary(k, positions, rotary_dim, tiny_config.rotary_emb_base)
    torch.testing.assert_close(got_q, ref_q)
    torch.testing.assert_close(got_k, ref_k)
    assert torch.equal(got_q[..., rotary_dim:], q[..., rotary_dim:])  # only the first rotary_dim dims move


@pytest.mark.parametrize("start", [0, 5])
def test_every_two_rotary_matches_transformers_gptj(start):
    """GPT-J's interleaved rotary (DeepSpeed's own fallback skips `rotate_every_two`: no rotation at all)."""
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb, create_sinusoidal_positions

    heads, head_dim, rotary_dim, seq = 4, 64, 16, 3
    x = torch.randn(1, seq, heads, head_dim)  # GPT-J rotates [batch, seq, heads, head_dim]
    positions = torch.arange(start, start + seq)
    sin, cos = create_sinusoidal_positions(32, rotary_dim)[positions][None].chunk(2, dim=-1)
    ref = torch.cat((apply_rotary_pos_emb(x[..., :rotary_dim], sin, cos), x[..., rotary_dim:]), dim=-1)

    got = fallbacks.apply_partial_rotary(x.transpose(1, 2), positions, rotary_dim, 10000.0, every_two=True)
    torch.testing.assert_close(got.transpose(1, 2), ref)
    if start:  # at position 0 the rotation is the identity; elsewhere the two layouts differ
        halves = fallbacks.apply_partial_rotary(x.transpose(1, 2), positions, rotary_dim, 10000.0)
        assert not torch.allclose(halves.transpose(1, 2), ref)


def test_decode_position_is_number_of_cached_tokens():
    from deepspeed.ops.transformer.inference.op_binding.workspace import InferenceContext

    ctx = InferenceContext.Instance()
    ctx.reset_tokens(6)  # a 6-token prompt was cached ...
    ctx.advance_tokens()  # ... and its forward completed
    assert fallbacks._positions(False, 1, torch.device("cpu")).tolist() == [6]
    assert fallbacks._positions(True, 4, torch.device("cpu")).tolist() == [0, 1, 2, 3]


def test_parallel_residual_mlp_matches_transformers(tiny_config):
    from deepspeed.utils.types import ActivationFuncType
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXLayer

    torch.manual_seed(0)
    layer = GPTNeoXLayer(tiny_config, layer_idx=0).eval()
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.5)
    x = torch.randn(2, 5, tiny_config.hidden_size)
    attn_out = torch.randn_like(x)
    ln, mlp = layer.post_attention_layernorm, layer.mlp
    with torch.no_grad():
        expected = mlp(ln(x))
        out, normed = fallbacks.mlp_gemm_fallback(
            None,
            attn_out,
            x,
            torch.zeros(x.shape[-1]),
            mlp.dense_h_to_4h.weight,
            mlp.dense_4h_to_h.weight,
            mlp.dense_h_to_4h.bias,
            ln.weight,
            ln.bias,
            ln.eps,
            True,
            False,
            None,
            None,
            False,
            ActivationFuncType.GELU,
            True,
        )
    torch.testing.assert_close(out + mlp.dense_4h_to_h.bias, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(normed, ln(x))


def test_sequential_mlp_branch_keeps_deepspeed_semantics():
    x, r, bias_in = torch.randn(1, 2, 8), torch.randn(1, 2, 8), torch.randn(8)
    w1, w2, b1 = torch.randn(8, 16), torch.randn(16, 8), torch.randn(16)
    g, beta = torch.ones(8), torch.zeros(8)
    from deepspeed.utils.types import ActivationFuncType

    out, normed = fallbacks.mlp_gemm_fallback(
        None, x, r, bias_in, w1, w2, b1, g, beta, 1e-5, True, True, None, None, False, ActivationFuncType.GELU, False
    )
    ref_normed = F.layer_norm(x + r + bias_in, (8,), g, beta, 1e-5)
    torch.testing.assert_close(normed, ref_normed)
    torch.testing.assert_close(out, F.gelu(ref_normed @ w1 + b1) @ w2)


def test_the_mlp_applies_the_activation_the_layer_asks_for_and_refuses_one_it_cannot():
    """OPT's ReLU: DeepSpeed's own fallback would apply GELU; the kernel applies ReLU."""
    from deepspeed.utils.types import ActivationFuncType

    x, r, bias_in = torch.randn(1, 2, 8), torch.randn(1, 2, 8), torch.randn(8)
    w1, w2, b1 = torch.randn(8, 16), torch.randn(16, 8), torch.randn(16)
    g, beta = torch.ones(8), torch.zeros(8)
    args = (None, x, r, bias_in, w1, w2, b1, g, beta, 1e-5, True, True, None, None, False)
    out, normed = fallbacks.mlp_gemm_fallback(*args, ActivationFuncType.ReLU, False)
    torch.testing.assert_close(out, F.relu(normed @ w1 + b1) @ w2)
    assert (out - F.gelu(normed @ w1 + b1) @ w2).abs().max() > 1e-2
    with pytest.raises(NotImplementedError, match="GATED_SILU"):
        fallbacks.mlp_gemm_fallback(*args, ActivationFuncType.GATED_SILU, False)


def test_the_post_layer_norm_qkv_linear_is_a_plain_gemm_with_bias():
    x, w, b = torch.randn(1, 3, 8), torch.randn(24, 8), torch.randn(24)
    got = fallbacks.linear_fallback(None, x, w, b, True, False, 2, True, 10000.0)
    torch.testing.assert_close(got, torch.nn.functional.linear(x, w, b))
    torch.testing.assert_close(fallbacks.linear_fallback(None, x, w, b, False, False, 2, True, 1e4), x @ w.t())
    torch.testing.assert_close(fallbacks.linear_fallback(None, x, w.t(), b, True, False, 2, False, 1e4), got)
    with pytest.raises(NotImplementedError, match="flash-attention"):
        fallbacks.linear_fallback(None, x, w, b, True, True, 2, True, 1e4)


def test_the_mlp_on_the_attention_norm_matches_gptj_mlp():
    """GPT-J's injected MLP (`fused_gemm_gelu` on the attention's normalised input), handed the Hugging Face
    [out, in] weights in transposed mode, computes GPT-J's own MLP (gelu_new is the tanh GELU)."""
    from transformers import GPTJConfig
    from transformers.models.gptj.modeling_gptj import GPTJMLP

    torch.manual_seed(0)
    mlp = GPTJMLP(64, GPTJConfig(n_embd=16, resid_pdrop=0.0)).eval()
    x = torch.randn(1, 3, 16)
    args = (x, mlp.fc_in.weight, None, mlp.fc_in.bias, mlp.fc_out.weight, None, False)
    with torch.no_grad():
        torch.testing.assert_close(fallbacks.gelu_gemm_fallback(None, *args, True) + mlp.fc_out.bias, mlp(x))
        with pytest.raises(RuntimeError, match="cannot be multiplied"):  # DeepSpeed's own, on the same weights
            from deepspeed.ops.transformer.inference.op_binding.gelu_gemm import GELUGemmOp

            GELUGemmOp.__dict__["gelu_gemm_fallback"](None, *args, True)


def test_alibi_is_added_per_sequence_and_per_partition_as_the_kernel_indexes_it():
    """BLOOM's ALiBi ([batch * heads, 1, keys], Transformers' build_alibi_tensor) for two sequences, the second
    left-padded: every sequence and every head of a tensor-parallel partition gets its own rows. DeepSpeed's
    fallback gives the second sequence the first's rows and a partition half its heads."""
    from deepspeed.ops.transformer.inference.op_binding.softmax import SoftmaxOp
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    alibi = build_alibi_tensor(mask, 4, torch.float32)  # [2 * 4, 1, 5]
    scores = torch.randn(2, 4, 1, 5)
    want = F.softmax(scores + alibi.view(2, 4, 1, 5), dim=-1)
    flags = (False, False, False, 1, False, 1.0)  # triangular .. async_op, layer_scale
    torch.testing.assert_close(fallbacks.softmax_fallback(scores.clone(), None, alibi, *flags, 0, 1), want)
    theirs = SoftmaxOp.__dict__["softmax_fallback"].__func__(scores.clone(), None, alibi, *flags, 0, 1)
    assert (theirs[1] - want[1]).abs().max() > 1e-2  # sequence 0's ALiBi on sequence 1
    # Rank 1 of 2 holds heads 2 and 3 and passes head_offset 2 (its rank in the tensor-parallel group x 2).
    part = fallbacks.softmax_fallback(scores[:, 2:].clone(), None, alibi, *flags, 2, 2)
    torch.testing.assert_close(part, want[:, 2:])
    # A head_offset past the heads ALiBi holds (rank 1's global rank x 4 heads, no tensor parallelism): no rows.
    with pytest.raises(RuntimeError, match=r"size of tensor b \(0\)"):
        fallbacks.softmax_fallback(scores.clone(), None, alibi, *flags, 4, 1)
    # ALiBi built for one sequence where the scores hold two (its mask was not gathered with the prompts).
    with pytest.raises(RuntimeError, match="ALiBi holds 4 rows where 2 sequences of 4 heads need 8"):
        fallbacks.softmax_fallback(scores[:, 2:].clone(), None, alibi[:4], *flags, 2, 2)


@pytest.mark.parametrize("queries", [7, 1])  # the prompt's rows; a decode step's one query
def test_local_attention_masks_what_transformers_gpt_neo_masks(queries):
    """GPT-Neo's local layer (window 3) over 7 keys: the fallback keeps exactly the keys Transformers' causal-and-
    window mask keeps, for the prompt and for a decode step. DeepSpeed's fallback ignores local attention."""
    from deepspeed.ops.transformer.inference.op_binding.softmax import SoftmaxOp
    from transformers import GPTNeoConfig
    from transformers.models.gpt_neo.modeling_gpt_neo import GPTNeoSelfAttention

    config = GPTNeoConfig(hidden_size=8, num_heads=2, max_position_embeddings=16, window_size=3)
    keep = GPTNeoSelfAttention(config, "local").bias[0, 0, 7 - queries : 7, :7]
    scores = torch.randn(1, 2, queries, 7)
    want = F.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    # Causal masking comes from the mask of a decode step (the keys so far), so triangular only for the prompt.
    flags = (queries > 1, queries > 1, True, 3, False, 1.0)  # triangular, recompute, local_attention, window ..
    torch.testing.assert_close(fallbacks.softmax_fallback(scores.clone(), None, None, *flags, 0, 1), want)
    theirs = SoftmaxOp.__dict__["softmax_fallback"].__func__(scores.clone(), None, None, *flags, 0, 1)
    assert (theirs - want).abs().max() > 1e-2
    assert int(keep[-1].sum()) == 3  # the last query sees itself and the 2 keys before it


@pytest.fixture
def clean_base_op():
    """install() patches six DeepSpeed classes; every one is restored, so no later test sees ours."""
    from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
    from deepspeed.ops.transformer.inference.op_binding.gelu_gemm import GELUGemmOp
    from deepspeed.ops.transformer.inference.op_binding.linear import LinearOp
    from deepspeed.ops.transformer.inference.op_binding.mlp_gemm import MLPGemmOp
    from deepspeed.ops.transformer.inference.op_binding.softmax import SoftmaxOp
    from deepspeed.ops.transformer.inference.op_binding.softmax_context import SoftmaxContextOp

    saved = (
        BaseOp.inference_module,
        SoftmaxContextOp.__dict__["softmax_context_fallback"],
        MLPGemmOp.__dict__["mlp_gemm_fallback"],
        LinearOp.__dict__["linear_fallback"],
        GELUGemmOp.__dict__["gelu_gemm_fallback"],
        SoftmaxOp.__dict__["softmax_fallback"],
    )
    yield BaseOp
    BaseOp.inference_module = saved[0]
    SoftmaxContextOp.softmax_context_fallback = saved[1]
    MLPGemmOp.mlp_gemm_fallback = saved[2]
    LinearOp.linear_fallback = saved[3]
    GELUGemmOp.gelu_gemm_fallback = saved[4]
    SoftmaxOp.softmax_fallback = saved[5]


def _config():
    from deepspeed.ops.transformer.inference.config import DeepSpeedInferenceConfig

    return DeepSpeedInferenceConfig(hidden_size=64, heads=4, dtype=torch.float32)


def test_missing_compiled_op_selects_completed_fallbacks(clean_base_op):
    from deepspeed.ops.transformer.inference.op_binding.gelu_gemm import GELUGemmOp
    from deepspeed.ops.transformer.inference.op_binding.mlp_gemm import MLPGemmOp
    from deepspeed.ops.transformer.inference.op_binding.softmax_context import SoftmaxContextOp

    clean_base_op.inference_module = None
    state = fallbacks.install()
    assert state["compiled_op"] == "missing" and state["compiled_op_error"]
    ops = torch.nn.ModuleList([SoftmaxContextOp(_config()), MLPGemmOp(_config()), GELUGemmOp(_config())])
    assert ops[0].softmax_context_func.__func__ is fallbacks.softmax_context_fallback
    assert ops[1].mlp_gemm_func.__func__ is fallbacks.mlp_gemm_fallback
    assert ops[2].fused_gemm_gelu.__func__ is fallbacks.gelu_gemm_fallback
    paths = fallbacks.kernel_paths([ops])
    assert paths["SoftmaxContextOp.softmax_context_func"] == "fallback"
    assert paths["MLPGemmOp.mlp_gemm_func"] == "fallback"
    assert paths["GELUGemmOp.fused_gemm_gelu"] == "fallback"


def test_a_compiled_kernel_that_exists_is_never_replaced(clean_base_op):
    from deepspeed.ops.transformer.inference.op_binding.softmax_context import SoftmaxContextOp

    def softmax_context_fp32(*args):
        return "compiled"

    clean_base_op.inference_module = types.ModuleType("transformer_inference_op")
    clean_base_op.inference_module.softmax_context_fp32 = softmax_context_fp32
    state = fallbacks.install()
    assert state["compiled_op"] == "loaded"
    op = SoftmaxContextOp(_config())
    assert op.softmax_context_func is softmax_context_fp32
    assert fallbacks.kernel_paths([op]) == {"SoftmaxContextOp.softmax_context_func": "compiled"}


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_the_fused_qkv_splits_as_the_kernel_splits_grouped_query_attention(kv_heads):
    """heads query heads, then kv_heads key and kv_heads value heads (pt_binding.cpp's ds_softmax_context); 4 of 4 is
    the equal thirds every other model has."""
    heads, head_dim = 4, 8
    qkv = torch.randn(2, 5, (heads + 2 * kv_heads) * head_dim)
    query, key, value = fallbacks.split_qkv(qkv, heads, kv_heads)
    assert query.shape == (2, heads, 5, head_dim) and key.shape == value.shape == (2, kv_heads, 5, head_dim)
    assert torch.equal(query[:, 1, :, :], qkv[..., head_dim : 2 * head_dim])
    assert torch.equal(key[:, -1], qkv[..., (heads + kv_heads - 1) * head_dim : (heads + kv_heads) * head_dim])
    assert torch.equal(value[:, 0], qkv[..., (heads + kv_heads) * head_dim : (heads + kv_heads + 1) * head_dim])
