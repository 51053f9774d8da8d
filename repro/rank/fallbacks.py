"""Completes DeepSpeed's pure-PyTorch inference fallbacks (GPT-NeoX's, OPT's).

Where DeepSpeed's compiled `transformer_inference` op is missing (CPU; ROCm in BF16 for
DeepSpeed >= 0.18.4, which builds no BF16 kernels there), the op bindings fall back to PyTorch, but
three fallbacks are incomplete: the attention fallback builds a Llama rotary embedding with an
outdated signature and rotates the whole head (GPT-NeoX), the MLP fallback raises for the parallel
residual (GPT-NeoX) and applies GELU whatever the activation (OPT's is ReLU), and the QKV linear of a
post-LayerNorm layer (opt-350m) has no fallback at all. `install()` always replaces those fallback
methods (a method only runs when its op binding chose the fallback); it empties the compiled module
only when loading it failed, so a compiled kernel that exists is still what DeepSpeed binds.
`kernel_paths()` records per op which ran, so a report never confuses the two.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F

ROTARY_BASE_DEFAULT = 10000.0
# The activations the compiled `ds_mlp_gemm` applies, by `ActivationFuncType` name.
ACTIVATIONS = {"GELU": F.gelu, "ReLU": F.relu}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_cos_sin(
    positions: torch.Tensor, rotary_dim: int, base: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT-NeoX rotary tables (rotate_half layout), computed in fp32 like Transformers does."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))
    freqs = torch.outer(positions.float(), inv_freq.to(positions.device))
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """GPT-J's rotation: each even/odd pair of dims (x0, x1) becomes (-x1, x0)."""
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def rotary_cos_sin_every_two(
    positions: torch.Tensor, rotary_dim: int, base: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT-J rotary tables (rotate_every_two layout: each frequency repeated for its pair), in fp32 like
    Transformers' `create_sinusoidal_positions`."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))
    freqs = torch.outer(positions.float(), inv_freq.to(positions.device))
    return freqs.cos().repeat_interleave(2, -1).to(dtype), freqs.sin().repeat_interleave(2, -1).to(dtype)


def apply_partial_rotary(
    x: torch.Tensor, positions: torch.Tensor, rotary_dim: int, base: float, every_two: bool = False
) -> torch.Tensor:
    """Rotates the first `rotary_dim` dims of `x` [batch, heads, seq, head_dim]; the rest passes through.
    GPT-NeoX and Llama rotate halves; GPT-J (`every_two`) rotates interleaved pairs."""
    tables, rotate = (rotary_cos_sin_every_two, rotate_every_two) if every_two else (rotary_cos_sin, rotate_half)
    cos, sin = tables(positions, rotary_dim, base, x.dtype)
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((x_rot * cos + rotate(x_rot) * sin, x_pass), dim=-1)


def _positions(is_prompt: bool, seq_len: int, device: torch.device) -> torch.Tensor:
    """Prompt tokens sit at 0..n-1; a decode token sits after every token already cached.

    DeepSpeed's context counts the prompt, then advances once per completed forward, so before a
    decode step's cache update it holds (tokens cached + 1).
    """
    from deepspeed.ops.transformer.inference.op_binding.workspace import InferenceContext

    start = 0 if is_prompt else InferenceContext.Instance().current_tokens() - 1
    return torch.arange(start, start + seq_len, device=device)


def split_qkv(query_key_value: torch.Tensor, heads: int, kv_heads: int) -> tuple[torch.Tensor, ...]:
    """Query, key and value [batch, heads, seq, head_dim] of a fused [batch, seq, (heads + 2 kv_heads) head_dim]
    QKV: the kernel's split (pt_binding.cpp's ds_softmax_context), where grouped-query K and V have kv_heads."""
    bsz, seq, width = query_key_value.shape
    head_dim = width // (heads + 2 * kv_heads)
    q, k, v = query_key_value.split((heads * head_dim, kv_heads * head_dim, kv_heads * head_dim), dim=-1)
    return tuple(t.reshape(bsz, seq, -1, head_dim).transpose(1, 2) for t in (q, k, v))


def softmax_context_fallback(
    self: Any,
    query_key_value,
    attn_mask,
    rotary_dim,
    rotate_half,
    rotate_every_two,
    heads,
    num_kv,
    norm_factor,
    triangular_masking,
    local_attention,
    window_size,
    no_masking,
    layer_id,
    num_layers,
    alibi,
    rope_theta,
    is_prompt,
    token_idx,
    position_ids,
):
    """DeepSpeed's `SoftmaxContextOp.softmax_context_fallback` with partial rotary: GPT-NeoX's halves and GPT-J's
    interleaved pairs (DeepSpeed's own rotates only halves, and skips `rotate_every_two` silently), and the fused QKV
    split by `num_kv` as the kernel splits it (DeepSpeed's own splits it into equal thirds, wrong for grouped-query
    attention)."""
    from deepspeed.ops.transformer.inference.op_binding.softmax import SoftmaxOp
    from deepspeed.ops.transformer.inference.op_binding.workspace import InferenceContext

    kv_heads = num_kv if num_kv > 0 else heads
    query, key, value = split_qkv(query_key_value, heads, kv_heads)
    if rotary_dim > 0:
        if rotate_half == rotate_every_two:
            raise NotImplementedError(f"no rotary with rotate_half={rotate_half}, rotate_every_two={rotate_every_two}")
        positions = _positions(is_prompt, query.shape[2], query.device)
        base = float(rope_theta) if rope_theta else ROTARY_BASE_DEFAULT
        query = apply_partial_rotary(query, positions, rotary_dim, base, rotate_every_two)
        key = apply_partial_rotary(key, positions, rotary_dim, base, rotate_every_two)

    # DeepSpeed's PyTorch workspace sizes its cache for every head: grouped-query keys and values are repeated first.
    key = key.repeat_interleave(heads // kv_heads, dim=1)  # DeepSpeed's repeat_kv leaves one K/V head unrepeated
    value = value.repeat_interleave(heads // kv_heads, dim=1)
    key, value = InferenceContext.Instance().update_cache(layer_id, token_idx, is_prompt, key, value)

    bsz = query_key_value.shape[0]
    head_dim = query.shape[-1]
    scores = torch.bmm(
        query.reshape(bsz * heads, query.shape[2], head_dim),
        key.reshape(bsz * heads, key.shape[2], head_dim).transpose(1, 2),
    )
    scores *= norm_factor * norm_factor
    scores = scores.reshape(bsz, heads, scores.shape[1], scores.shape[2])
    if attn_mask is not None and len(attn_mask.shape) > 1 and attn_mask.shape[-1] < scores.shape[3]:
        fill = torch.finfo(attn_mask.dtype).min if attn_mask.dtype.is_floating_point else 0
        attn_mask = torch.nn.functional.pad(attn_mask, (0, scores.shape[3] - attn_mask.shape[-1]), value=fill)
    probs = SoftmaxOp.softmax_fallback(
        scores, attn_mask, alibi, triangular_masking, is_prompt, local_attention, window_size, None, 1.0, 0, 1
    )
    context = torch.bmm(
        probs.reshape(bsz * heads, probs.shape[2], probs.shape[3]),
        value.reshape(bsz * heads, value.shape[2], head_dim),
    )
    context = context.reshape(bsz, heads, -1, head_dim).permute(0, 2, 1, 3).reshape(bsz, -1, heads * head_dim)

    if layer_id == num_layers - 1:
        InferenceContext.Instance().advance_tokens()
    return context, key, value


def mlp_gemm_fallback(
    self: Any,
    input,
    residual,
    input_bias,
    weight_interm,
    weight_out,
    bias,
    gamma,
    beta,
    eps,
    pre_layer_norm,
    mlp_after_attn,
    interm_scale,
    out_scale,
    dtype,
    mlp_act_func_type,
    transpose,
):
    """DeepSpeed's `MLPGemmOp.mlp_gemm_fallback`, plus the parallel-residual branch and the activation the
    layer asks for.

    Mirrors the compiled `ds_mlp_gemm`: with `mlp_after_attn` False the MLP norm applies to the
    layer input (`residual`), then GEMM + bias + activation + GEMM; it returns (output, normed input).
    DeepSpeed's own fallback applies GELU whatever `mlp_act_func_type` says, where the kernel applies ReLU for
    ReLU (OPT); GELU is the exact one (the kernel's is tanh: ~1e-4 apart, measured on GPT-Neo's gelu_new).
    """
    act = ACTIVATIONS.get(getattr(mlp_act_func_type, "name", None))
    if act is None:
        name = getattr(mlp_act_func_type, "name", mlp_act_func_type)
        raise NotImplementedError(f"no CPU stand-in for the MLP kernel with activation {name}")
    if mlp_after_attn:
        normed = F.layer_norm(input + residual + input_bias, (input.shape[2],), gamma, beta, eps)
    else:
        normed = F.layer_norm(residual, (residual.shape[2],), gamma, beta, eps)
    hidden = torch.matmul(normed, weight_interm.t() if transpose else weight_interm)
    hidden = act(hidden + bias)
    output = torch.matmul(hidden, weight_out.t() if transpose else weight_out)
    return output, normed


def linear_fallback(self: Any, input, weight, bias, add_bias, do_flash_attn, num_heads, transpose, rope_theta):
    """The QKV GEMM of a post-LayerNorm layer (`LinearOp`; DeepSpeed's fallback raises NotImplementedError).

    Mirrors the compiled `ds_linear_layer` without flash attention: input @ W (+ bias), one [b, s, 3h] tensor,
    the form `DeepSpeedSelfAttention.compute_attention` takes. The flash-attention layout is not stood in for.
    """
    if do_flash_attn:
        raise NotImplementedError("no CPU stand-in for the linear kernel's flash-attention layout")
    output = torch.matmul(input, weight.t() if transpose else weight)
    return output + bias if add_bias else output


def gelu_gemm_fallback(self: Any, input, weight, scale, bias, out, out_scale, dtype, transpose):
    """The MLP of a layer whose MLP reads the attention's LayerNorm (`GELUGemmOp`, GPT-J's path: no `attn_nw`).

    DeepSpeed's fallback multiplies by the weights as given, where the compiled `fused_gemm_gelu` reads them
    transposed in `transposed_mode` (the Hugging Face [out, in] layout the Hybrid Engine hands it), so it fails
    on every shape that is not square. GELU is the kernel's tanh one, as in DeepSpeed's fallback.
    """
    hidden = torch.matmul(input, weight.t() if transpose else weight)
    hidden = F.gelu(hidden.float() + bias.float(), approximate="tanh").to(hidden.dtype)
    return torch.matmul(hidden, out.t() if transpose else out)


def softmax_fallback(
    attn_scores, attn_mask, alibi, triangular, recompute, local_attention, window_size, async_op, layer_scale,
    head_offset, mp_size,
):  # fmt: skip
    """DeepSpeed's `SoftmaxOp.softmax_fallback` with ALiBi as the compiled softmax indexes it (BLOOM's path), and
    GPT-Neo's local attention (`outside_window`), which DeepSpeed's fallback ignores.

    BLOOM hands the layer ALiBi as [batch * heads, 1, keys], every head of the model. The kernel adds to head h of
    sequence b the row `b * heads * mp_size + head_offset + h` (heads: this partition's). DeepSpeed's fallback adds
    `alibi[head_offset:head_offset + heads // mp_size]`, sequence 0's rows for every sequence and, under tensor
    parallelism, half the partition's heads. Here each sequence takes its own rows; a head_offset past the heads
    ALiBi holds leaves none, and the addition fails as DeepSpeed's own fallback does (the kernel reads the next
    sequence's rows instead). ALiBi for fewer sequences than the scores hold (a mask not gathered with the prompts)
    is refused by name, where the kernel reads past it.
    """
    from deepspeed.ops.transformer.inference.op_binding.workspace import InferenceContext

    if alibi is not None and len(alibi.shape) > 1:
        batch, heads = attn_scores.shape[0], attn_scores.shape[1]
        if alibi.shape[0] != batch * heads * mp_size:  # the kernel would read past it
            raise RuntimeError(f"ALiBi holds {alibi.shape[0]} rows where {batch} sequences of {heads * mp_size} "
                               f"heads need {batch * heads * mp_size}")  # fmt: skip
        per_sequence = alibi.view(batch, alibi.shape[0] // batch, *alibi.shape[1:])
        alibi = per_sequence[:, head_offset : head_offset + heads]
    else:
        alibi = None
    if attn_mask is not None and len(attn_mask.shape) == 1:
        attn_mask = None
    input_dtype = attn_scores.dtype
    attn_scores *= layer_scale
    if alibi is not None:
        attn_scores += alibi
    if attn_mask is not None:
        attn_scores += attn_mask[:, None, None, :] if len(attn_mask.shape) == 2 else attn_mask
    if local_attention:
        far = outside_window(attn_scores.shape[2], attn_scores.shape[3], window_size, attn_scores.device)
        attn_scores = attn_scores.masked_fill(far, float("-inf"))
    if triangular:
        if attn_scores.shape[2] == 1:  # query using kv cache
            token_idx = InferenceContext.Instance().current_tokens()
            tri = torch.arange(attn_scores.shape[2], device=attn_scores.device).ge(token_idx)
        else:
            tri = ~torch.tril(torch.ones(attn_scores.size(), device=attn_scores.device)).to(bool)
        attn_scores = torch.masked_fill(attn_scores, tri, float("-inf"))
    return F.softmax(attn_scores, dim=-1, dtype=torch.float32).to(input_dtype)


def outside_window(queries: int, keys: int, window_size: int, device: torch.device) -> torch.Tensor:
    """GPT-Neo's local attention: a query sees the keys less than `window_size` positions behind it (Transformers'
    `bias ^= tril(bias, -window_size)`). The queries are the last `queries` of the `keys` positions, so a decode
    step's query is the newest key. DeepSpeed's fallback ignores local attention; its kernel applies the same rule
    to prompt rows (`real_seq_id - window_size`), while at a decode step it takes the query's position as the
    key count, one past it (csrc/transformer/inference/csrc/softmax.cu, read, not run: no GPU here)."""
    rows = torch.arange(keys - queries, keys, device=device)[:, None]
    return rows - torch.arange(keys, device=device)[None, :] >= window_size


def compiled_op_error() -> str | None:
    """Loads DeepSpeed's compiled inference op as `BaseOp` would; returns why it failed, or None."""
    from deepspeed.ops.transformer.inference.op_binding.base import BaseOp

    if BaseOp.inference_module is not None:
        return None if not isinstance(BaseOp.inference_module, types.SimpleNamespace) else "missing"
    from deepspeed.ops.op_builder import InferenceBuilder

    try:
        BaseOp.inference_module = InferenceBuilder().load()
    except Exception as exc:  # any failure to build/load means DeepSpeed would have no kernel either
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    return None


def install() -> dict[str, str]:
    """Makes missing kernels select the completed fallbacks; returns what it found and did."""
    from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
    from deepspeed.ops.transformer.inference.op_binding.gelu_gemm import GELUGemmOp
    from deepspeed.ops.transformer.inference.op_binding.linear import LinearOp
    from deepspeed.ops.transformer.inference.op_binding.mlp_gemm import MLPGemmOp
    from deepspeed.ops.transformer.inference.op_binding.softmax import SoftmaxOp
    from deepspeed.ops.transformer.inference.op_binding.softmax_context import SoftmaxContextOp

    error = compiled_op_error()
    if error is not None:
        # An empty module sends every op binding down its AttributeError (fallback) branch.
        BaseOp.inference_module = types.SimpleNamespace()
    SoftmaxContextOp.softmax_context_fallback = softmax_context_fallback
    MLPGemmOp.mlp_gemm_fallback = mlp_gemm_fallback
    LinearOp.linear_fallback = linear_fallback
    GELUGemmOp.gelu_gemm_fallback = gelu_gemm_fallback
    SoftmaxOp.softmax_fallback = staticmethod(softmax_fallback)
    return {"compiled_op": "missing" if error else "loaded", "compiled_op_error": error or ""}


def kernel_paths(roots: Iterable[torch.nn.Module]) -> dict[str, str]:
    """For each DeepSpeed op binding under `roots`: "compiled" or "fallback", read from what it bound."""
    from deepspeed.ops.transformer.inference.op_binding.base import BaseOp

    paths: dict[str, str] = {}
    for module in (m for root in roots for m in root.modules()):
        if not isinstance(module, BaseOp):
            continue
        for name, value in vars(module).items():
            if not (name.endswith("_func") or name == "fused_gemm_gelu") or value is None:
                continue
            path = "fallback" if "fallback" in getattr(value, "__name__", "") else "compiled"
            key = f"{type(module).__name__}.{name}"
            if paths.get(key, path) != path:
                path = "mixed"
            paths[key] = path
    return dict(sorted(paths.items()))
