"""One upstream issue text per confirmed bug, in DeepSpeed's bug template, from conformance.json's measured cells
only: which cells show it, by what evidence, what our patch does and how the cells end with the whole series."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from ... import findings, tolerance
from ..tables import num
from ..upstream import affected_releases, issue_scripts
from . import evidence, issue_brief, labels
from .diagnosis import (
    BUG_3453,
    BUG_BLOOM_ALIBI_OFFSET,
    BUG_BLOOM_RESIDUAL,
    BUG_BLOOM_TP_COPY,
    BUG_CACHE_RETURN,
    BUG_DECODE_AS_PROMPT,
    BUG_ENGINE_GENERATE,
    BUG_GPTJ_ACTIVATION,
    BUG_LAYER_TUPLE,
    BUG_LORA_NO_IN_FEATURES,
    BUG_NEOX_ACTIVATION,
    BUG_NEOX_LAYER_CLASS,
    BUG_NEOX_NO_ATTENTION_BIAS,
    BUG_NEOX_TP_HEADS,
    BUG_NORM_EPS,
    BUG_OPT_ACTIVATION,
    BUG_OPT_NO_BIAS,
    BUG_OPT_POST_LN,
    BUG_PADDING_MASK,
    BUG_POST_LN_QKV_BIAS,
    BUG_QKV_BIAS,
    BUG_ROPE,
    BUG_TP_MASK,
    BUG_TP_OUTPUT,
    BUG_TP_RELEASED,
    BUG_TP_UNSLICED,
    BUG_UNSERVABLE,
    BUG_WEIGHTLESS_LAYER_NORM,
    CORRECT,
    REFUSALS,
    TOL,
    covers_too_few_keys,
    root_crash,
    worst,
)
from .plan import PINNED

ISSUE_3453 = "ISSUE-3453.md"
P = {f.id: f.patch for f in findings.FINDINGS}  # a finding's patch, for the prose below


def _twin(name: str) -> Callable[[dict], str]:
    """Max abs of the HE's logits against the native twin `name` (repro.rank.archs), over every step."""
    return lambda c: num(worst((c.get("per_step_logits_vs_twin") or {}).get(name) or [math.nan]))


def _first_crash(cell: dict) -> str:
    """The crash that came first, on whichever rank (diagnosis.root_crash)."""
    first = root_crash(cell)
    c = first.get("crash")
    return f"rank {first.get('crash_rank', 0)}: {c['type']}: {c['message']}" if c else "-"


def _bias(cell: dict) -> str:
    probe = cell.get("qkv_bias_on_bias_free_model") or {}
    return f"{probe['calls']} calls, max abs {num(probe['max_abs'])}" if probe.get("calls") else "none"


def _crash(cell: dict) -> str:
    c = cell.get("crash")
    return f"{c['type']}: {c['message']} ({c['at']})" if c else "no crash"


def _engine_generate(cell: dict) -> str:
    found = cell.get("engine_generate_without_containers") or {}
    if found.get("raised"):
        return f"{found['raised']['type']}: {found['raised']['message']}"
    if "first_token_equal_native" in found:
        return (
            "generated; first token "
            + ("equal to" if found["first_token_equal_native"] else "differs from")
            + (" native's")
        )
    return "generated" if found else "not called"


def _engine_generate_fixed(fixed: list[dict]) -> str:
    ran = [(c.get("engine_generate_without_containers") or {}) for c in fixed]
    generated = [r for r in ran if r and not r.get("raised")]
    equal = sum(r.get("first_token_equal_native") is True for r in generated)
    return (
        f"With it (our whole series), `engine.generate()` generates in {len(generated)} of {len(fixed)} such "
        f"cells, its first token equal to native's in {equal}."
    )


def _prompt_flags(cell: dict) -> str:
    flags = cell.get("attention_prompt_flags") or {}
    if "decode_calls" not in flags:
        return "not recorded"
    return f"{flags.get('decode_calls_as_prompt', 0)} of {flags['decode_calls']}"


def _layer_policy(cell: dict) -> str:
    """Which DeepSpeed policies name the decoder layer's class (recorded where DeepSpeed built no container)."""
    found = cell.get("layer_policy")
    if not found:
        return "-"
    named = ", ".join(found["named_by"]) or "none"
    neox = "GPTNEOXLayerPolicy names no class" if "GPTNEOXLayerPolicy" in found["named_nothing"] else ""
    return f"{found['layer_class']}: {named}" + (f" ({neox})" if neox else "")


def _tp_shapes(cell: dict) -> str:
    """What the tensor-parallel layers were built for, and the QKV weights they were handed."""
    tp = cell.get("tensor_parallel") or {}
    shapes = cell.get("qkv_weight_shapes") or cell.get("split_qkv_weight_shapes")
    if not tp or not shapes:
        return "not reached" if "crash" in cell else "not recorded"
    kind = "QKV" if cell.get("qkv_weight_shapes") else "Q, K, V"
    return f"{tp['heads_per_rank']} heads per rank; {kind} {', '.join(str(s) for s in shapes)}"


def _masks(cell: dict) -> str:
    """The masks the first injected attention was handed: dtype and keys covered against keys attended."""
    masks = (cell.get("attention_prompt_flags") or {}).get("first_layer_masks")
    if not masks:
        return "not reached" if "crash" in cell else "not recorded"
    prompt, decode = masks[0], masks[1:]
    short = [m for m in decode if covers_too_few_keys(m)]
    kinds = sorted({str(m["dtype"]) for m in masks})
    return (f"{'/'.join(kinds)}; prompt: {prompt['mask_keys']} of {prompt['keys']} keys; decode: "
            f"{len(short)} of {len(decode)} cover fewer keys than attended")  # fmt: skip


TP_RELEASES = (
    "Affected releases, read from DeepSpeed's git history (not run): 0.9.0 and 0.9.1 call "
    "`apply_tensor_parallelism()` on the pinned ZeRO-3 path with or without an mpu; #3191 (first in 0.9.2) makes the "
    "call `if self.mpu is not None` and inverts the same test in `create_inference_module()`, so 0.9.2 fails at "
    "initialize without an mpu (`self.mpu.get_model_parallel_group()` on None); #3497 (0.9.3) fixes only the "
    "latter, so from 0.9.3 to 0.19.8 no release slices without an mpu. ZeRO-2 and non-pinned ZeRO-3 have had no "
    "tensor-parallel path in `generate()` since the Hybrid Engine's first release, 0.9.0. Run here: 0.19.8."
)


# Each bug the suite confirms, for its upstream issue text (DeepSpeed's bug template): the cells that show it
# (`shown`), what each such cell measured (`evidence`), the cause as read in DeepSpeed 0.19.8, and the fix.
ISSUES = {
    BUG_3453: {
        "file": ISSUE_3453,
        "scope": "injection",
        "gpt_neox": True,
        "shown": lambda c: c["arch"] == "gpt-neox" and c["configuration"] == "sequential-residual",
        "evidence": (("vs the same weights computed as a parallel-residual model (max abs, every step)",
                      _twin("parallel_residual")),),
        "measured": "the Hybrid Engine's per-step logits equal, within fp32 noise, those of the same weights "
        "computed as a parallel-residual model, and differ from the real model's",
        "title": "GPT-NeoX with use_parallel_residual=False runs as a parallel-residual model under kernel "
        "injection / the Hybrid Engine (cause of #3453)",
        "cause": "`BaseTransformerContainer` sets `mlp_after_attn` from the rotary dim alone "
        "(`deepspeed/module_inject/containers/base.py`: `rotary_dim is None or rotary_dim < 0`), and "
        "`GPTNEOXLayerPolicy` / `DS_GPTNEOXContainer` never read `use_parallel_residual`. Every GPT-NeoX layer is "
        "injected as parallel residual, `x + attn(ln1 x) + mlp(ln2 x)`; a model with `use_parallel_residual=False` "
        "(`x = x + attn(ln1 x); x = x + mlp(ln2 x)`) generates wrong text.",
        "fix": "The injected layer computes the model's own residual: `mlp_after_attn = not use_parallel_residual` "
        f"(patch `{P['3453']}`).",
        "context": "The CUDA/ROCm kernels branch on `mlp_after_attn` the same way (`pt_binding.cpp` `ds_mlp_gemm`, "
        "`fused_bias_residual`). The reporter of #3453 uses `use_parallel_residual: false`.",
    },
    BUG_ROPE: {
        "file": "ISSUE-rotary-base.md",
        "scope": "injection",
        "gpt_neox": True,
        "shown": lambda c: c["arch"] == "gpt-neox"
        and c["configuration"] in ("rotary-base-1e6", "rope-scaling-linear-2"),
        "evidence": (("vs the same weights rotated with base 10000 (max abs, every step)",
                      _twin("rotary_base_10000")),
                     ("vs the same weights rotated unscaled (max abs, every step)", _twin("unscaled_rotary"))),
        "measured": "the Hybrid Engine's per-step logits equal, within fp32 noise, those of the same weights "
        "rotated with base 10000 (with `rope_scaling` linear x2: rotated unscaled), and differ from the real "
        "model's",
        "title": "GPT-NeoX's rotary base is ignored under kernel injection / the Hybrid Engine (rope_theta stays "
        "10000)",
        "cause": "`DS_GPTNEOXContainer.create_module()` never passes the model's rotary base (Transformers keeps it "
        "in `rope_parameters['rope_theta']` since 5.0, in `rope_theta` / `rotary_emb_base` before) to the "
        "`DeepSpeedInferenceConfig`, whose `rope_theta` keeps its default, 10000 (the LLaMA container does pass "
        "it). A GPT-NeoX with another rotary base is rotated with the wrong frequencies.",
        "fix": "The inference config's `rope_theta` is read where Transformers reads it, and a scaled rotary "
        f"(`rope_scaling`) is refused by name, since the kernel takes a base only (patch `{P['rotary-base']}`).",
        "context": "The compiled attention kernels build their rotary embedding from `rope_theta` as well, so we "
        "expect GPUs to show it too; not run by us.",
    },
    BUG_QKV_BIAS: {
        "file": "ISSUE-zero3-qkv-bias.md",
        "scope": "hybrid-engine",
        "shown": lambda c: c["arch"] != "gpt-neox" and c["zero_stage"] == 3 and c["lora"] == "none"
        and c["order"] == "eval-generate-train",
        "evidence": (("bias handed to the QKV GEMM", _bias),),
        "measured": "the QKV GEMM was handed a bias although the model has none: DeepSpeed's never-written "
        "`torch.empty` bias buffer",
        "title": "ZeRO-3 Hybrid Engine adds an uninitialised QKV bias to models without QKV bias (Llama, GPT-Neo): "
        "garbage or NaN, different per rank (consistent with #4788)",
        "cause": "Under ZeRO-3 the Hybrid Engine leaves `attn_qkvw` unset and `DeepSpeedSelfAttention._merge_qkv()` "
        "(`deepspeed/ops/transformer/inference/ds_attention.py`) merges q/k/v into the class-wide `_qkv_buffers` on "
        "every forward. It writes the bias buffer only when the model has QKV biases but always returns it, so "
        "`QKVGemmOp` (`add_bias = bias is not None`) adds a `torch.empty` buffer to every query, key and value of a "
        "model without them. Its content decides the output: correct, ~1.0 off, NaN, and different on each rank. "
        "PR #4711 (closed, not merged) pointed at the same buffer in 2023.",
        "fix": f"`_merge_qkv()` returns no bias when the model has none (patch `{P['zero3-qkv-bias']}`).",
        "context": "The compiled `qkv_gemm` kernels add the bias the same way (`add_bias`), so we expect GPUs to be "
        "affected too (not run by us); what the buffer holds decides what a user sees, which is consistent with "
        "#4788 and DeepSpeedExamples #864 (Llama-2, ZeRO-3 + Hybrid Engine: gibberish that differs per rank; "
        "ZeRO-2 fine). On released "
        f"DeepSpeed with Transformers >= 4.54 the Llama crash ({P['llama-layer-tuple']}) comes first: the Llama "
        "cells here run the "
        f"series without `{P['zero3-qkv-bias']}`.",
    },
    BUG_LAYER_TUPLE: {
        "file": "ISSUE-llama-layer-tuple.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] == "llama" and c["scenario"] == "reference",
        "evidence": (("the Hybrid Engine's first generate", _crash),),
        "measured": "the Hybrid Engine's first generate fails in the second decoder layer",
        "title": "Injected Llama layers return a tuple; with Transformers >= 4.54 every Hybrid Engine / kernel "
        "injection generate fails (`'tuple' object has no attribute 'size'`)",
        "cause": "Since Transformers 4.54, `LlamaModel` passes what a `LlamaDecoderLayer` returns straight to the "
        "next layer and to the final norm. `DS_LLAMAContainer` builds `DeepSpeedGPTInference` with the inference "
        "config's default `return_tuple=True`, so the second layer receives a tuple and fails at "
        "`input.size()` (`deepspeed/model_implementations/transformers/ds_transformer.py`).",
        "fix": "The Llama inference layer is built with `return_tuple=False` when the installed Transformers "
        f"expects a tensor (patch `{P['llama-layer-tuple']}`).",
        "context": "Not kernel-specific: the failure is in Python before any kernel runs.",
    },
    BUG_LORA_NO_IN_FEATURES: {
        "file": "ISSUE-llama-lora.md",
        "scope": "hybrid-engine",
        "shown": lambda c: c["arch"] == "llama" and c["lora"] != "none",
        "evidence": (("what the Hybrid Engine did", lambda c: _crash(c) if "crash" in c else _twins(c)),),
        "measured": "`deepspeed.initialize` with the Hybrid Engine fails on the model with DeepSpeed-Chat's LoRA",
        "title": "Hybrid Engine cannot take DeepSpeed-Chat's LoRA on Llama: initialize fails on `in_features`, and "
        "the LoRA lookup never finds LoRA",
        "cause": "DeepSpeed-Chat adds LoRA by replacing each `nn.Linear` with a `LinearLayer_LoRA` module, which has "
        "the base `weight` and `bias` and the factors `lora_right_weight` / `lora_left_weight`, but no `in_features` "
        "or `out_features`. `LLAMALayerPolicy.get_hidden_heads()` reads `q_proj.in_features` and "
        "`gate_proj.out_features`, so `deepspeed.initialize` fails with an `AttributeError` when LoRA covers them "
        "(DeepSpeed-Chat's Llama-2 step 3 puts it on every Linear of the layers). Behind it, "
        "`DS_LLAMAContainer.set_lora_params()` hands `maybe_get_lora()` the `.weight` tensors, where it looks for "
        "`lora_right_weight` on the module (as the GPT-NeoX, GPT-J and GPT-Neo containers pass it): it finds no "
        "LoRA, and the Hybrid Engine would generate with the base weights, silently. `DS_InternLMContainer` and "
        "`DS_LLAMA2Container` have the same lookup.",
        "fix": "The policy reads the sizes from the layer's config, and the containers pass the modules (patch "
        f"`{P['llama-lora']}`).",
        "context": "Not kernel-specific: both happen in Python. The lookup half is shown by the patch's test "
        "(`tests/unit/hybrid_engine/test_llama_internlm_lora.py`: on 0.19.8 no LoRA target of 7 is found, and the "
        "inference module never sees the fused weights).",
    },
    BUG_UNSERVABLE: {
        "file": "ISSUE-llama-unservable-config.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] == "llama" and c["configuration"] in UNSERVABLE_CONFIGS,
        "evidence": (("what the Hybrid Engine computed instead", lambda c: _crash(c) if "crash" in c else _twins(c)),),
        "measured": "the Llama container accepted a configuration its injected layer does not compute: the Hybrid "
        "Engine's per-step logits equal those of a native twin with the setting the kernel hard-codes (SiLU "
        "gating; no layer biases), or grouped-query attention crashes",
        "title": "Llama kernel injection / Hybrid Engine silently computes a different model for hidden_act != "
        "silu, attention_bias, mlp_bias, and crashes for grouped-query attention",
        "cause": "`LLAMALayerPolicy` fixes the MLP activation to `GATED_SILU`, returns `None` for the q/k/v, o_proj "
        "and MLP biases (`attention()`, `mlp()`; the split-QKV path sets `qb = kb = vb = None`), and the split-QKV "
        "merge assumes q, k and v of equal size. `DS_LLAMAContainer` accepts any `LlamaConfig` nevertheless, so a "
        "model outside that set generates wrong text without an error, or fails with a shape error inside the "
        "attention (grouped-query attention).",
        "fix": "The container refuses such a configuration by name with a ValueError, as `_get_rope_theta` "
        f"already does for scaled rotary (patch `{P['llama-unservable-config']}`); serving them would need the "
        "kernel to take biases, "
        "another gating and grouped K/V.",
        "context": "The activation and the biases are dropped in Python before any kernel runs. Grouped-query "
        "attention fails in the ZeRO-3 q/k/v merge (Python) on any device; under ZeRO-2 it failed here in the "
        "attention's CPU fallback, and the compiled kernel was not run.",
    },
    BUG_NORM_EPS: {
        "file": "ISSUE-layer-norm-eps.md",
        "scope": "hybrid-engine",
        "shown": lambda c: "layer-norm-eps" in c["configuration"] and c["scenario"] == "reference",
        "evidence": (("vs the same weights with the final LayerNorm at eps 1e-5 (max abs, every step)",
                      _twin("outer_layer_norm_at_eps_1e-5")),),
        "measured": "the Hybrid Engine's per-step logits equal, within the fallbacks' noise, those of the same "
        "weights with the final LayerNorm at eps 1e-5, and differ from the model's own",
        "title": "Hybrid Engine computes the final LayerNorm with eps 1e-5 whatever the model's layer_norm_epsilon",
        "cause": "`DeepSpeedHybridEngine.create_inference_containers()` replaces every `nn.LayerNorm` outside the "
        "transformer layers (GPT-Neo's `ln_f`, GPT-NeoX's `final_layer_norm`, ...) with "
        "`Normalize(weight=..., bias=...)` (`deepspeed/runtime/hybrid_engine.py`), whose `eps` defaults to 1e-5: "
        "the model's own epsilon is dropped for every generate.",
        "fix": f"The replacement keeps the LayerNorm's `eps` (patch `{P['layer-norm-eps']}`).",
        "context": "Not kernel-specific: `Normalize` is plain PyTorch. Models at eps 1e-5 (Pythia, GPT-Neo's "
        "default) are unaffected.",
    },
    BUG_ENGINE_GENERATE: {
        "file": "ISSUE-engine-generate.md",
        "scope": "hybrid-engine",
        "shown": lambda c: "engine_generate_without_containers" in c,
        "evidence": (("inference containers", lambda c: str(c.get("inference_containers", 0))),
                     ("`engine.generate()`", _engine_generate)),
        "measured": "DeepSpeed built no inference container (it logs that rollout uses the model's native "
        "`generate()`), and `engine.generate()` raised",
        "title": "Hybrid Engine: engine.generate() fails with AttributeError '_generate' when no inference container "
        "was built (OPT with Transformers >= 4.49)",
        "cause": "`DeepSpeedHybridEngine.create_inference_module()` (`deepspeed/runtime/hybrid_engine.py`) sets "
        "`self._generate` only `if len(self._inference_containers) > 0`, and `generate()` calls it "
        "unconditionally. When no policy matches the model's layers (any model without a container; OPT with "
        "Transformers >= 4.49, which 0.19.8 keeps native on purpose, warning that rollout will use the model's "
        "native `generate()`), the engine's own `generate()` fails: `'DeepSpeedHybridEngine' object has no "
        "attribute '_generate'`. The test came with #3191 (first in 0.9.2); 0.9.0 and 0.9.1 set `_generate` for "
        "every model (read from DeepSpeed's git history, not run; run here: 0.19.8).",
        "fix": "`generate()` runs the model's own `generate()` when there is no container (patch "
            f"`{P['engine-generate']}`).",
        "fixed": _engine_generate_fixed,
        "context": "Not kernel-specific: no layer is injected on this path. DeepSpeed-Chat calls "
        "`engine.module.generate()` and gets the native `generate()` silently (see our not-engaged cells); other "
        "callers of the Hybrid Engine's documented `engine.generate()` crash.",
    },
    BUG_TP_UNSLICED: {
        "file": "ISSUE-tensor-parallel.md",
        "scope": "hybrid-engine",
        "gpt_neox": True,
        "shown": lambda c: c["scenario"] == "tp2",
        "evidence": (("layers built for / QKV weights handed (each rank's slice: 3 x hidden / 2 rows fused, "
                      "hidden / 2 each separate)", _tp_shapes),
                     ("crash", _crash)),
        "measured": "the injected layers were built for 2 of the 4 heads per rank and handed weights that are not "
        "the rank's slice: the whole weights (ZeRO-2) or a released ZeRO-3 partition of 0 elements (pinned ZeRO-3)",
        "title": "Hybrid Engine tensor-parallel generation (inference_tp_size > 1, no mpu, as DeepSpeed-Chat's "
        "OPT-13B/66B scripts) hands the injected layers unsliced weights (consistent with #3998, #4345, #5656)",
        "cause": "With `hybrid_engine.inference_tp_size` > 1 and no mpu, the Hybrid Engine builds each inference "
        "layer for its rank's share of the heads (`set_tensor_parallel_config(inference_tp_size, mp_group)`), but "
        "no path hands it its rank's slice (`deepspeed/runtime/hybrid_engine.py`): ZeRO-2 and non-pinned ZeRO-3 "
        "have no tensor-parallel path in `generate()`; pinned ZeRO-3 calls `apply_tensor_parallelism()` only `if "
        "self.mpu is not None`, and the layers keep views of weights its gather has released by the time "
        "`_generate()` runs. Where `apply_tensor_parallelism()` runs, it cannot slice either: "
        "`set_params_wo_copy()` makes the layer's weights the training weights themselves, so `strided_copy()` and "
        "`copy()` see equal shapes and copy them whole; the split-QKV containers' `attention_qkv_mp()` and "
        "`release_memory()`'s `_release_params()` assign to local names only.",
        "fix": "Until the layers get per-rank slices, `inference_tp_size` > 1 without an mpu is refused by name at "
        "initialize, before any training step, for models the Hybrid Engine builds inference layers for (patch "
        f"`{P['tensor-parallel']}`; the commit message says why refuse rather than slice).",
        "context": "Which weights the layers get is decided in Python before any kernel runs, so we expect GPUs to "
        "show the same (not run by us). DeepSpeed-Chat asserts ZeRO-3 for tensor-parallel generation and passes "
        "no mpu (DeepSpeedExamples #628). " + TP_RELEASES + " With an mpu DeepSpeed takes the training weights for "
        "the mpu's slices: our `tp2-mpu` cells hand it whole Hugging Face weights, so they are outside its "
        "contract and not counted here; our `tp2-mpu-slices` cells hand each rank its Megatron slice, and what "
        "they show has its own issues (`ISSUE-tensor-parallel-released.md`, `ISSUE-tensor-parallel-output.md`, "
        "`ISSUE-gptneox-tensor-parallel-heads.md`).",
    },
    BUG_NEOX_ACTIVATION: {
        "file": "ISSUE-gptneox-activation.md",
        "scope": "injection",
        "gpt_neox": True,
        "shown": lambda c: c["arch"] == "gpt-neox" and c["configuration"] == "relu",
        "evidence": (("vs the same weights with a GELU MLP (max abs, every step)", _twin("gelu_activation")),),
        "measured": "the Hybrid Engine's per-step logits equal, within fp32 noise, those of the same weights with "
        "a GELU MLP, and differ from the real (ReLU) model's",
        "title": "GPT-NeoX's hidden_act is ignored under kernel injection / the Hybrid Engine: every model is "
        "computed with GELU",
        "cause": "`GPTNEOXLayerPolicy.__init__()` (`deepspeed/module_inject/containers/gptneox.py`) never sets "
        "`mlp_act_func_type`, so the injected MLP keeps `TransformerPolicy`'s default, `ActivationFuncType.GELU` "
        "(`deepspeed/module_inject/policy.py`), whatever the model's `hidden_act`. A GPT-NeoX with "
        "`hidden_act='relu'` is computed with GELU and generates wrong text; an activation the kernel lacks (silu, "
        "say) is computed with GELU too, without an error. `HFOPTLayerPolicy` reads its activation, but from "
        "`TransformerPolicy.hf_model_config`, which only `init_inference()` sets, never the Hybrid Engine.",
        "fix": "The policy reads `hidden_act` from the config the layer's attention was built with: every GELU "
        "variant maps to GELU (the kernel's tanh approximation), relu to ReLU, any other activation is refused "
        f"by name (patch `{P['gptneox-activation']}`).",
        "context": "The activation type is chosen in Python before any kernel runs, and the compiled `ds_mlp_gemm` "
        "applies the one it is given (GELU or ReLU), so we expect GPUs to show it too; not run by us. Pythia "
        "(gelu) is unaffected. Affected releases, read from DeepSpeed's git history (not run): every release that "
        "injects Hugging Face's GPT-NeoX, from 0.6.7 (#2087; until 0.7.0 the kernel took no activation and applied "
        "GELU; `mlp_act_func_type` came in 0.7.1 with OPT, #2205, and no GPT-NeoX policy has set it since), and "
        "the Hybrid Engine since its first release, 0.9.0. Run here: 0.19.8.",
    },
    BUG_NEOX_NO_ATTENTION_BIAS: {
        "file": "ISSUE-gptneox-attention-bias.md",
        "scope": "injection",
        "gpt_neox": True,
        "shown": lambda c: c["arch"] == "gpt-neox" and c["configuration"] == "no-attention-bias",
        "evidence": (("what the Hybrid Engine did", _crash),),
        "measured": "the Hybrid Engine's first `eval()` fails in the QKV layout transform on the missing QKV bias",
        "title": "GPT-NeoX with attention_bias=False crashes the Hybrid Engine: AttributeError 'NoneType' object "
        "has no attribute 'shape' (hybrid_megatron.py)",
        "cause": "Transformers' GPT-NeoX can be built without the `query_key_value` and `dense` biases "
        "(`attention_bias=False`). `GPTNEOXLayerPolicy.attention()` hands the container `None` for both, and "
        "`HybridMegatronContainer._align_qkv()` / `_partition_qkv()` "
        "(`deepspeed/module_inject/containers/features/hybrid_megatron.py`) read the QKV bias's shape on the first "
        "`eval()`. The injected layer could not run without them either: the attention adds the QKV bias and "
        "`DeepSpeedTransformerInference.forward()` hands the dense bias to the MLP as a tensor.",
        "fix": "Such a model is refused by name with a ValueError at the container's policy, before the Hybrid "
        f"Engine builds anything (patch `{P['gptneox-attention-bias']}`); serving it would need zero biases or "
        "bias-free kernels.",
        "context": "The crash is in Python before any kernel runs, so we expect GPUs to show it too; not run by "
        "us. Affected releases, read from DeepSpeed's git history (not run): the Hybrid Engine reorders the QKV "
        "bias whatever it is since 0.9.2 (#3191; in `HybridMegatronContainer` since 0.9.3, #3425), and Transformers "
        "added `attention_bias` to GPT-NeoX in 4.37.0: every DeepSpeed from 0.9.2 with Transformers >= 4.37. Run "
        "here: 0.19.8.",
    },
    BUG_OPT_ACTIVATION: {
        "file": "ISSUE-opt-activation.md",
        "scope": "hybrid-engine",
        "shown": lambda c: c["arch"] == "opt" and c["configuration"] == "gelu",
        "evidence": (("vs the same weights with a ReLU MLP (max abs, every step)", _twin("relu_activation")),),
        "measured": "the Hybrid Engine's per-step logits equal, within fp32 noise, those of the same weights with "
        "a ReLU MLP, and differ from the real (GELU) model's",
        "title": "Hybrid Engine computes OPT with ReLU whatever its activation_function (the policy reads a "
        "class-wide config only init_inference sets)",
        "cause": "`HFOPTLayerPolicy.__init__()` (`deepspeed/module_inject/containers/opt.py`) reads "
        "`activation_function` from `TransformerPolicy.hf_model_config`, a class attribute that only "
        "`deepspeed.init_inference()` sets (`deepspeed/inference/engine.py`). The Hybrid Engine never sets it, so "
        "the policy falls back to ReLU: an OPT with `activation_function='gelu'` is computed with ReLU and "
        "generates wrong text. After an `init_inference()` of another model in the same process, the policy reads "
        "that model's activation instead.",
        "fix": "The policy reads the activation from the config the layer's attention was built with "
        "(`OPTAttention.config`), falling back to `hf_model_config`, then ReLU, as before (patch "
        f"`{P['opt-activation']}`).",
        "context": "The activation type is chosen in Python before any kernel runs, so we expect GPUs to show it "
        "too; not run by us. Every released OPT checkpoint uses ReLU, so DeepSpeed-Chat's OPT runs are "
        "unaffected. DeepSpeed 0.19.8 keeps OPT on the native path with Transformers >= 4.49 (Cache-based "
        "decoders): the cells run on Transformers 4.48.3. Affected releases, read from DeepSpeed's git history "
        "(not run): from OPT's first release in DeepSpeed, 0.7.1 (#2205), to 0.9.0 the policy hard-codes ReLU "
        "for kernel injection and the Hybrid Engine alike; since 0.9.1 (#3278) it reads the class-wide config, "
        "which only `init_inference()` sets, so the Hybrid Engine has computed OPT with ReLU since its first "
        "release, 0.9.0. Run here: 0.19.8.",
    },
    BUG_OPT_NO_BIAS: {
        "file": "ISSUE-opt-bias.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] == "opt" and c["configuration"] == "no-bias",
        "evidence": (("what the Hybrid Engine did", _crash),),
        "measured": "`deepspeed.initialize` with the Hybrid Engine fails in the OPT policy on the missing q/k/v "
        "biases",
        "title": "OPT with enable_bias=False crashes kernel injection / the Hybrid Engine: TypeError expected "
        "Tensor ... but got NoneType (opt.py)",
        "cause": "Transformers' OPT can be built without the q/k/v, out_proj, fc1 and fc2 biases "
        "(`enable_bias=False`). `HFOPTLayerPolicy.attention()` (`deepspeed/module_inject/containers/opt.py`) "
        "concatenates the q/k/v biases with `torch.cat` and fails on `None`; the injected attention and MLP add "
        "every one of those biases as well.",
        "fix": f"Such a model is refused by name with a ValueError in the policy (patch `{P['opt-bias']}`); serving "
            "it would "
        "need zero biases or bias-free kernels.",
        "context": "The crash is in Python before any kernel runs, so we expect GPUs to show it too; not run by "
        "us. DeepSpeed 0.19.8 keeps OPT on the native path with Transformers >= 4.49: the cells run on "
        "Transformers 4.48.3. Affected releases: the policy concatenates the q/k/v biases in the Hybrid Engine's "
        "first release, 0.9.0, and in 0.19.8 (read from DeepSpeed's git history; run here: 0.19.8); which "
        "Transformers release added `enable_bias` was not checked.",
    },
    BUG_DECODE_AS_PROMPT: {
        "file": "ISSUE-decode-as-prompt.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] == "opt" and c["configuration"] == "post-layer-norm",
        "evidence": (("one-token decode calls the injected attention took for prompts", _prompt_flags),
                     ("crash", _crash)),
        "measured": "the injected attention was handed `is_prompt=True` for every one-token decode step, so its KV "
        "cache restarted each token",
        "title": "Post-LayerNorm models (OPT-350m) under kernel injection / the Hybrid Engine: "
        "DeepSpeedSelfAttention takes every decode step for a prompt (is_prompt read from the wrong dimension)",
        "cause": "`DeepSpeedSelfAttention.forward()` (`deepspeed/ops/transformer/inference/ds_attention.py`) sets "
        "`is_prompt = kwargs.get('first_token', qkv_out[0].shape[1] > 1)`. The pre-LayerNorm QKV GEMM "
        "(`qkv_func`) returns a pair `(qkv, inp_norm)`, so `qkv_out[0]` is `[batch, seq, 3 * hidden]` and "
        "`shape[1]` is the sequence length; the post-LayerNorm linear (`linear_func`) returns the qkv tensor "
        "alone, so `qkv_out[0]` is the first sequence's `[seq, 3 * hidden]` and `shape[1]` is `3 * hidden`: every "
        "call of a post-LayerNorm layer is taken for a prompt. DeepSpeed's PyTorch attention "
        "(`op_binding/softmax_context.py` and `InferenceContext.update_cache()` in `op_binding/workspace.py`) then "
        "restarts the cache on each decode step, which attends to itself alone; with Transformers 4.48.3 OPT's "
        "decoder fails at the second token on its attention-mask check.",
        "fix": "`is_prompt` is read from the layer's input, `[batch, seq, hidden]` on both paths (patch "
            f"`{P['decode-as-prompt']}`).",
        "context": "The compiled `softmax_context` recomputes the flag from the sequence length (`pt_binding.cpp`, "
        "read, not run), so we expect CUDA and ROCm to be unaffected by this half: it shows where DeepSpeed's "
        "PyTorch attention runs (an accelerator without the compiled `transformer_inference` op; CPU here). "
        "Behind it post-LayerNorm OPT has a second bug that GPUs do show, its LayerNorms swapped "
        f"(`ISSUE-opt-post-layer-norm.md`, patch `{P['opt-post-layer-norm']}`). Affected releases: the line is the "
        "same in the Hybrid "
        "Engine's first release, 0.9.0 (read from DeepSpeed's git history, not run; run here: 0.19.8).",
    },
    BUG_OPT_POST_LN: {
        "file": "ISSUE-opt-post-layer-norm.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] == "opt" and c["configuration"] == "post-layer-norm",
        "evidence": (("vs the same weights with each layer's two LayerNorms swapped (max abs, every step)",
                      _twin("swapped_layer_norms")),),
        "measured": "the Hybrid Engine's per-step logits equal, within fp32 noise, those of the same weights with "
        "each layer's `self_attn_layer_norm` and `final_layer_norm` in each other's place, and differ from the real "
        "model's",
        "title": "Post-LayerNorm OPT (opt-350m) under kernel injection / the Hybrid Engine is computed with its two "
        "LayerNorms swapped",
        "cause": "The injected layer normalises with `attn_nw`/`attn_nb` the MLP's input when it is pre-LayerNorm "
        "and the attention's residual sum when it is post-LayerNorm (`mlp_gemm`'s gamma/beta), and with "
        "`input_nw`/`input_nb` (the layer's `norm_w`) the attention's input (pre) or the layer's output (post, "
        "`DeepSpeedTransformerInference.forward()`). `HFOPTLayerPolicy.layernorm()` "
        "(`deepspeed/module_inject/containers/opt.py`) returns `final_layer_norm` for `attn_nw` and "
        "`self_attn_layer_norm` for `input_nw` whatever `do_layer_norm_before` says: right for pre-LayerNorm OPT, "
        "swapped for post-LayerNorm OPT, which generates wrong text. The policy also hard-codes "
        "`pre_attn_norm=True`, which the container uses when it has no model config to read the placement from.",
        "fix": "The policy returns the LayerNorms in the order the layer's placement needs and reads "
        f"`pre_attn_norm` from the layer (patch `{P['opt-post-layer-norm']}`).",
        "context": "Which LayerNorm goes where is decided in Python before any kernel runs, and the compiled "
        "kernels apply `attn_nw` and `norm_w` the same way, so we expect GPUs to show it too; not run by us. On "
        f"DeepSpeed's PyTorch attention path `{P['decode-as-prompt']}`'s bug comes first "
        "(`ISSUE-decode-as-prompt.md`), and under "
        "ZeRO-3 the q/k/v biases are dropped too (`ISSUE-post-layer-norm-qkv-bias.md`, "
        f"`{P['post-layer-norm-qkv-bias']}`): the cells "
        f"`series without {P['opt-post-layer-norm']}` show this one alone. DeepSpeed-Chat uses opt-350m as its "
        "critic and reward model, "
        "which the Hybrid Engine does not generate with; its OPT actors (1.3B and larger) are pre-LayerNorm. "
        "Affected releases, read from DeepSpeed's git history (not run): 0.7.1 to 0.8.3 read "
        "`do_layer_norm_before` for the kernel only through the class-wide config `init_inference()` sets, with "
        "the same `layernorm()` order; from 0.9.0 (#3186) the container reads the placement from the model "
        "config and `layernorm()` keeps the pre-LayerNorm order. Run here: 0.19.8.",
    },
    BUG_POST_LN_QKV_BIAS: {
        "file": "ISSUE-post-layer-norm-qkv-bias.md",
        "scope": "hybrid-engine",
        "shown": lambda c: c["arch"] == "opt" and c["configuration"] == "post-layer-norm" and c["zero_stage"] == 3,
        "evidence": (("vs the same weights without q/k/v biases (max abs, every step)", _twin("no_qkv_bias")),),
        "measured": "the Hybrid Engine's per-step logits equal, within fp32 noise, those of the same weights "
        "without q/k/v biases, and differ from the real model's",
        "title": "ZeRO-3 Hybrid Engine drops the q/k/v biases of post-LayerNorm models with separate q/k/v "
        "(OPT-350m): add_bias read from the unset attn_qkvb",
        "cause": "Under ZeRO-3 the Hybrid Engine leaves `attn_qkvw` and `attn_qkvb` unset for models with separate "
        "q/k/v (`HybridSplitQKVContainer.set_attn_params_wo_copy(Z3_enabled=True)`), and "
        "`DeepSpeedSelfAttention.forward()` (`deepspeed/ops/transformer/inference/ds_attention.py`) merges them "
        "into `_attn_qkvw` / `_attn_qkvb` on every call. The pre-LayerNorm QKV GEMM adds the bias it is handed, "
        "but the post-LayerNorm linear is told `add_bias=self.attn_qkvb is not None`, False there: a "
        "post-LayerNorm OPT is computed without its q, k and v biases.",
        "fix": f"`add_bias` follows the bias in hand, `_attn_qkvb` (patch `{P['post-layer-norm-qkv-bias']}`; with "
            f"`{P['zero3-qkv-bias']}` the merge leaves it "
        "None for a model without QKV biases).",
        "context": "`add_bias` is decided in Python before any kernel runs, and the compiled `ds_linear_layer` "
        "skips the bias when told to, so we expect GPUs to show it too; not run by us. ZeRO-2 is unaffected "
        f"(`attn_qkvb` is set there). On DeepSpeed's PyTorch path `{P['decode-as-prompt']}`'s bug comes first, and "
        f"`{P['opt-post-layer-norm']}`'s is in "
        f"every post-LayerNorm OPT cell: the cells `series without {P['post-layer-norm-qkv-bias']}` show this one "
        "alone. Affected releases: "
        "the line is in the Hybrid Engine's first release, 0.9.0 (read from DeepSpeed's git history, not run; run "
        "here: 0.19.8).",
    },
    BUG_NEOX_LAYER_CLASS: {
        "file": "ISSUE-gptneox-layer-class.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] == "gpt-neox" and c.get("transformers", PINNED) != PINNED,
        "evidence": (("inference containers", lambda c: str(c.get("inference_containers", 0))),
                     ("policies naming the layer class", _layer_policy)),
        "measured": "DeepSpeed built no inference container: no policy names `GPTNeoXLayer`, and generate ran the "
        "Hugging Face layers without a word",
        "title": "GPT-NeoX (Pythia) kernel injection / Hybrid Engine silently does nothing with Transformers 4.45 to "
        "4.51: GPTNEOXLayerPolicy imports GPTNeoXLayer from the top-level package",
        "cause": "`GPTNEOXLayerPolicy.__init__()` (`deepspeed/module_inject/containers/gptneox.py`) finds the layer "
        "class with `from transformers import GPTNeoXLayer` and keeps `_orig_layer_class = None` on ImportError. "
        "Transformers 4.45.0 to 4.51.3 do not export `GPTNeoXLayer` from the top-level package (it is still in "
        "`transformers.models.gpt_neox.modeling_gpt_neox`; 4.52 exports every public name of the modeling module "
        "again), so no GPT-NeoX layer is matched: `init_inference(replace_with_kernel_inject=True)` and the Hybrid "
        "Engine leave the model as it is. The Hybrid Engine only logs that rollout will use the model's native "
        "`generate()`; DeepSpeed-Chat's generation time then measures Hugging Face, not DeepSpeed.",
        "fix": "The policy imports `GPTNeoXLayer` from `transformers.models.gpt_neox.modeling_gpt_neox`, as the "
        f"GPT-2, GPT-J, GPT-Neo, BLOOM and Llama policies import their layers (patch `{P['gptneox-layer-class']}`).",
        "context": "Which layers are injected is decided in Python before any kernel runs, so GPUs show the same "
        "(not run by us). Transformers versions: 4.48.3 run here; the top-level `__init__.py` of each release from "
        "4.44.2 to 4.52.4 read from its PyPI wheel (4.44.2 lists `GPTNeoXLayer`, 4.45.0 to 4.51.3 do not, 4.52.4 "
        "builds the list from the modeling modules). Affected DeepSpeed releases: the import is in every release "
        "that injects Hugging Face GPT-NeoX, from 0.6.7, and in 0.19.8 (read from DeepSpeed's git history; run "
        "here: 0.19.8).",
    },
    BUG_WEIGHTLESS_LAYER_NORM: {
        "file": "ISSUE-layer-norm-without-weights.md",
        "scope": "hybrid-engine",
        "shown": lambda c: c["arch"] == "opt" and c["configuration"] == "layer-norm-not-affine",
        "evidence": (("what the Hybrid Engine did", _crash),),
        "measured": "`deepspeed.initialize` with the Hybrid Engine fails while replacing the decoder's final "
        "LayerNorm, which has no weights",
        "title": "Hybrid Engine crashes on LayerNorms without weights (OPT layer_norm_elementwise_affine=False): "
        "TypeError 'NoneType' object is not iterable in Normalize; past it, the OPT layers take None weights",
        "cause": "For inference the Hybrid Engine replaces each `nn.LayerNorm` outside the transformer layers by a "
        "`Normalize` built from the module's weight and bias (`create_inference_containers()` in "
        "`deepspeed/runtime/hybrid_engine.py`). A LayerNorm without weights (`elementwise_affine=False`; OPT's "
        "`final_layer_norm` with `layer_norm_elementwise_affine=False`) hands `Normalize` `weight=None`, and "
        "`Normalize` (`deepspeed/module_inject/layers.py`) then builds a fresh `nn.LayerNorm(dim=None)`: TypeError. "
        "Past that, `HFOPTLayerPolicy` hands the layers' None LayerNorm weights to the injected layer, which reads a "
        "None `attn_nw` as no LayerNorm before the MLP: `DeepSpeedMLP.forward()` "
        "(`deepspeed/ops/transformer/inference/ds_mlp.py`) feeds `fused_gemm_gelu` the attention's normalised input "
        "instead of the LayerNorm of the attention's residual sum, and with GELU where OPT's is ReLU (the cells "
        f"`series without {P['opt-layer-norm-affine']}` below: 1.16 off native, where DeepSpeed's own CPU fallback "
        "of `fused_gemm_gelu` "
        "fails on the shapes; ours multiplies by the weights as the kernel's transposed mode does).",
        "fix": "The Hybrid Engine leaves a LayerNorm without weights to its own forward (patch "
            f"`{P['layer-norm-without-weights']}`), and the OPT "
        "policy refuses OPT without LayerNorm weights by name with a ValueError (patch "
        f"`{P['opt-layer-norm-affine']}`); serving it would "
        "need unit weights handed to the kernels.",
        "context": "Both failures are decided in Python before any kernel runs, so we expect GPUs to show the "
        "first (the TypeError) too; past it, our stand-in computes what the kernel's `fused_gemm_gelu` would "
        "(its tanh GELU on the transposed weights), which we have not run on a GPU. DeepSpeed "
        "0.19.8 keeps OPT on the native path with Transformers >= 4.49, and Transformers 4.57's OPT cannot initialise "
        "such a model (`_init_weights` fills a None weight): the cells run on Transformers 4.48.3. Affected "
        "releases: the Hybrid Engine has replaced outer LayerNorms with `Normalize(weight=child.weight, ...)` since "
        "its first release, 0.9.0 (read from DeepSpeed's git history, not run; run here: 0.19.8).",
    },
    BUG_CACHE_RETURN: {
        "file": "ISSUE-cache-return.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] in ("gpt-neo", "gpt-neox", "gpt-j") and c.get("transformers", PINNED) != PINNED,
        "evidence": (("inference containers", lambda c: str(c.get("inference_containers", 0))),
                     ("crash", _crash)),
        "measured": "generate fails at the second token: Transformers' `DynamicCache.from_legacy_cache` unpacks the "
        "cache the injected layers handed back",
        "title": "GPT-Neo / GPT-NeoX kernel injection and Hybrid Engine fail at the second token with Transformers "
        "4.45 to 4.53: ValueError not enough values to unpack (expected 2, got 1) in cache_utils.py",
        "cause": "Transformers 4.45 to 4.53 pass one `Cache` object to every GPT-Neo (and GPT-NeoX) layer and "
        "return the last layer's second output as the model's `past_key_values` (`next_decoder_cache = "
        "outputs[1]` in `GPTNeoModel.forward`). `DeepSpeedTransformerInference.forward()` "
        "(`deepspeed/model_implementations/transformers/ds_transformer.py`) returns its own `(key, value)` there, "
        "so `generate()` gets a pair of tensors as the cache and, on the next step, "
        "`DynamicCache.from_legacy_cache()` unpacks the key tensor along its batch dimension: the ValueError with "
        "one sequence; with two (our `left-pad` cells) the unpacking succeeds, builds a wrong cache, and the step "
        "fails on the tuple (`AttributeError: 'tuple' object has no attribute 'to_legacy_cache'`). "
        "Transformers 4.54 and later ignore that output (the layer no "
        "longer returns the cache), and 4.44 and earlier pass tuples.",
        "fix": "The injected layer hands back the `Cache` its caller passed, in place of its key and value (patch "
        f"`{P['cache-return']}`); its key/value cache stays in the layer's workspace, as with the versions that work.",
        "context": "What the layer hands back is decided in Python, so we expect GPUs to show the same (not run by "
        f"us). GPT-NeoX on Transformers 4.45 to 4.51 first needs `{P['gptneox-layer-class']}` (no layer is injected "
        "without it); past it, "
        f"our GPT-NeoX cells fail the same way without `{P['cache-return']}` (`series without {P['cache-return']}` "
        "below). Transformers versions: "
        "4.48.3 run here, 4.57.6 runs correct; the PyPI wheels read: GPT-Neo's model takes `outputs[1]` as its "
        "cache from 4.45.0 to 4.53.3 (not in 4.44.2 or 4.54.0), GPT-NeoX's from 4.45.0 to 4.48.3 (not in 4.49.0). "
        "GPT-J's model reads it the same way: our GPT-J cells on 4.48.3 fail alike as released and are correct with "
        "the series. BLOOM's in 4.48.3 too (read, not run: DeepSpeed's BLOOM container refuses Transformers > 4.43.4, "
        "and 4.43.4 passes tuples). Affected DeepSpeed releases: the injected layer has "
        "returned `(output, presents)` since kernel injection began, so every release that injects these models, "
        "run with those Transformers (read from DeepSpeed's git history; run here: 0.19.8).",
    },
    BUG_TP_RELEASED: {
        "file": "ISSUE-tensor-parallel-released.md",
        "scope": "hybrid-engine",
        "shown": lambda c: c["scenario"] == "tp2-mpu-slices" and c["arch"] != "gpt-neox",
        "evidence": (("layers built for / Q, K, V weights handed (each rank's slice: hidden / 2 rows)", _tp_shapes),
                     ("crash", _crash)),
        "measured": "the injected attention was handed Q, K and V of 0 elements, ZeRO-3 partitions released "
        "after the gather, and generate fails",
        "title": "Hybrid Engine tensor-parallel generation with an mpu on pinned ZeRO-3: models with separate "
        "Q, K, V (GPT-Neo, Llama, OPT) read released ZeRO-3 partitions and fail",
        "cause": "With pinned ZeRO-3, `inference_tp_size` > 1 and an mpu, `generate()` "
        "(`deepspeed/runtime/hybrid_engine.py`) gathers every layer's training parameters, calls "
        "`apply_tensor_parallelism()` on each container, and releases the parameters when the gather ends. "
        "For containers with separate Q, K and V, `HybridSplitQKVContainer.attention_qkv_mp()` "
        "(`deepspeed/module_inject/containers/features/split_qkv.py`) copies them into a loop variable that is "
        "then dropped (`dst = mp_replace.copy(dst[:...], src, ...)`), after slicing rows off weights that are "
        "this rank's slice already: the attention keeps the training parameters themselves, which ZeRO-3 has "
        "released to 0 elements by the time the layers run. Llama's gated MLP "
        "(`HybridGatedMLPContainer.mlp_inter_mp()`, `features/gated_mlp.py`) drops its copies the same way.",
        "fix": "The attention and the MLP keep the copies: `attention_qkv_mp()` and `mlp_inter_mp()` assign "
        "them to the attributes they came from, whole, as the fused-QKV and dense copies already do (patch "
        f"`{P['tensor-parallel-released']}`).",
        "context": "Which weights the layers hold is decided in Python before any kernel runs, so we expect GPUs to "
        "show the same (not run by us). ZeRO-2 takes no copies (its layers hold the training weights, which "
        "stay): the same cells on ZeRO-2 are correct as released. Our cells honour the mpu's contract: each "
        "rank trains its Megatron slice of the layers' Linears (Q, K, V and the MLP's first projection by output "
        "rows, the attention output and the MLP's last projection by input columns), and the reference is Hugging "
        f"Face on the whole model. Past this bug, the same cells need `{P['tensor-parallel-output']}` (the generate "
        "output) to finish. "
        "Affected releases, read from DeepSpeed's git history (not run): `split_qkv.py` and `gated_mlp.py` "
        "arrive with the refactor #3425 (first in 0.9.3) with this assignment, unchanged to 0.19.8 (run here).",
    },
    BUG_TP_OUTPUT: {
        "file": "ISSUE-tensor-parallel-output.md",
        "scope": "hybrid-engine",
        "shown": lambda c: c["scenario"] == "tp2-mpu-slices" and c["zero_stage"] == 3,
        "evidence": (("crash", _crash),),
        "measured": "`generate(return_dict_in_generate=True)` handed the caller a tuple, not a ModelOutput",
        "title": "Hybrid Engine tensor-parallel generate() on pinned ZeRO-3 returns a tuple where "
        "return_dict_in_generate=True asks for a ModelOutput",
        "cause": "With pinned ZeRO-3 and `inference_tp_size` > 1, `generate()` "
        "(`deepspeed/runtime/hybrid_engine.py`) runs the model's `generate()` on the prompts of every rank of the "
        "tensor-parallel group at once and hands back `generate_ret_vals[input_shape[0] * rank:input_shape[0] * "
        "(rank + 1)]`. With `return_dict_in_generate=True` (to read the scores or the logits, as an RLHF trainer "
        "may) the result is a `ModelOutput`, and slicing a `ModelOutput` returns a tuple of its fields: the caller "
        "gets a tuple and fails on `.sequences`.",
        "fix": "Each rank gets its rows of every batched tensor of the output, which stays a `ModelOutput`; other "
        "values (a Cache) are handed back as they are, and a plain sequences tensor is sliced as before (patch "
        f"`{P['tensor-parallel-output']}`).",
        "context": "Decided in Python, so we expect GPUs to show the same (not run by us). DeepSpeed-Chat's PPO "
        "trainer takes the sequences tensor (`seq = self.actor_model.module.generate(prompts, ...)`, no "
        "`return_dict_in_generate`; read, DeepSpeedExamples) and is not affected. On the separate-Q, K, V "
        f"models this shows once `{P['tensor-parallel-released']}` lets generate run; the GPT-NeoX cells show it as "
        "released. Affected "
        "releases, read from DeepSpeed's git history (not run): the slice has been there since the Hybrid "
        "Engine's first release, 0.9.0, to 0.19.8 (run here).",
    },
    BUG_PADDING_MASK: {
        "file": "ISSUE-left-padding.md",
        "scope": "injection",
        "shown": lambda c: c["scenario"] == "left-pad" and c["arch"] in ("gpt-neox", "llama"),
        "evidence": (("masks Transformers handed the first injected attention", _masks), ("crash", _crash)),
        "measured": "the left-padded prompt's logits differ from the model's: the injected attention was handed "
        "bool masks, at decode steps over 1 key",
        "title": "Kernel injection and Hybrid Engine with Transformers >= 4.53: GPT-NeoX and Llama attend to a "
        "left-padded prompt's padding (bool attention masks, decode masks over one key)",
        "cause": "Transformers 4.53 rewrote attention masking (`masking_utils`): GPT-NeoX and Llama now hand each "
        "layer a bool mask (True: attend) for SDPA, sized by the keys their `Cache` holds. "
        "`DeepSpeedSelfAttention.compute_attention()` (`deepspeed/ops/transformer/inference/ds_attention.py`) "
        "turns only an int64 mask into 0 / `minus_inf` and hands any other to the softmax as an additive mask: "
        "the CPU fallback adds the bools as 0 or 1, and the CUDA kernel reads the bool bytes as the activation "
        "dtype (`ds_softmax_context` in `csrc/transformer/inference/csrc/pt_binding.cpp` casts `data_ptr`; read, not "
        "run). The injected layers also keep their keys in their own cache, so the `Cache` stays empty and every "
        "decode step's mask covers one key where the layer attends to all of them. A left-padded prompt "
        "(DeepSpeed-Chat's collator pads a batch's prompts on the left) attends to its padding at every step.",
        "fix": "`compute_attention()` turns a bool mask into 0 / `minus_inf` as it does an int64 one, keeps the keys "
        "the last prompt token may attend to, and extends them by each new token when a decode step's mask covers "
        f"no more keys than that (patch `{P['left-padding']}`); a mask over every key is taken as it is.",
        "context": "Measured on Transformers 4.52.4 (the last release before the rewrite: float additive masks as "
        "long as the 2D mask, correct), 4.53.0 (the first after it: wrong) and 4.57.6 (wrong); GPT-Neo keeps the "
        "older masks there and is correct; OPT is not injected on Transformers >= 4.49. Our cells without "
        "padding are correct. On CPU our fallback stands in for the softmax kernel; the mask handed to it is "
        "decided in Python, so we expect GPUs to show the same (not run by us). Affected DeepSpeed releases, read "
        "from DeepSpeed's git history (not run): `DeepSpeedSelfAttention` has converted only int64 masks since "
        "`ds_attention.py` was split out (#2464, first in 0.7.5), through the Hybrid Engine's first release "
        "(0.9.0) to 0.19.8 (run here), so every release that injects these models, run with Transformers >= 4.53.",
    },
    BUG_NEOX_TP_HEADS: {
        "file": "ISSUE-gptneox-tensor-parallel-heads.md",
        "scope": "hybrid-engine",
        "gpt_neox": True,
        "shown": lambda c: c["scenario"] == "tp2-mpu-slices" and c["arch"] == "gpt-neox",
        "evidence": (("QKV layout after eval()", lambda c: ", ".join(c.get("qkv_layouts_after_eval") or []) or "-"),
                     ("crash", _crash)),
        "measured": "the QKV each rank holds after `eval()` is its slice of the heads put in the inference layout "
        "as if it held all of the model's heads (`inference_by_model_heads`), and generate differs from the model",
        "title": "GPT-NeoX under the Hybrid Engine with tensor parallelism (an mpu): the QKV layout transform "
        "splits a rank's heads by the model's head count and generates different text",
        "cause": "With an mpu and `inference_tp_size` > 1, each rank trains its slice of a GPT-NeoX model's heads: "
        "its `query_key_value` weight holds `num_attention_heads / mp_size` heads, each head's q, k and v rows "
        "next to each other. `HybridMegatronContainer.transform_for_inference()` and `transform_for_training()` "
        "(`deepspeed/module_inject/containers/features/hybrid_megatron.py`, `_align_qkv()` and "
        "`_partition_qkv()`) divide the weight by the model's `num_attention_heads` instead, so each \"head\" they "
        "move is a fraction of one: the injected layers read rows of other heads as Q, K and V.",
        "fix": "The transforms divide the weight by the heads the rank holds, `num_attention_heads // mp_size` "
        f"(patch `{P['gptneox-tensor-parallel-heads']}`).",
        "context": "The layout is decided in Python before any kernel runs, so we expect GPUs to show the same "
        "(not run by us). The same on ZeRO-2 and ZeRO-3; on pinned ZeRO-3 the released cell fails first on the "
        f"generate output (`{P['tensor-parallel-output']}`). Our cells honour the "
        "mpu's contract: each rank trains its Megatron slice (for GPT-NeoX's fused QKV: its heads, each with its "
        "q, k and v rows). Affected releases, read from DeepSpeed's git history (not run): "
        "`HybridMegatronContainer` arrives with #3425 (first in 0.9.3) dividing by `num_attention_heads`, "
        "unchanged to 0.19.8 (run here).",
    },
    BUG_BLOOM_ALIBI_OFFSET: {
        "file": "ISSUE-bloom-alibi-offset.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] == "bloom" and c["world_size"] == 2 and not c["scenario"].startswith("tp2")
        and c.get("transformers") == "4.43.4",
        "evidence": (("first crash", _first_crash),),
        "measured": "rank 1 adds ALiBi from head 4 of a 4-head model: none of its heads (DeepSpeed's PyTorch softmax "
        "fails on the shapes); rank 0 computes the model",
        "title": "BLOOM with kernel injection or the Hybrid Engine on more than one data-parallel rank: every rank "
        "but 0 adds the wrong heads' ALiBi",
        "cause": "`BloomSelfAttention.compute_attention()` (`deepspeed/ops/transformer/inference/ds_attention.py`) "
        "hands the softmax `head_offset = dist.get_rank() * num_attention_heads_per_partition`, and the softmax "
        "adds ALiBi rows `head_offset` to `head_offset + heads` of each sequence. ALiBi holds every head of the "
        "model (transformers builds it for the whole model), so the offset must be the rank within the "
        "tensor-parallel group. It is the global rank: with data parallelism (the Hybrid Engine with "
        "`inference_tp_size` 1, as DeepSpeed-Chat trains BLOOM on several GPUs) every rank holds every head, and "
        "rank r adds ALiBi from head `r * heads` on: past the sequence's heads.",
        "fix": "The offset is the rank in the attention's `mp_group` times the heads per partition under tensor "
        f"parallelism, and 0 without it (patch `{P['bloom-alibi-offset']}`); `init_inference()`'s tensor "
        "parallelism without data "
        "parallelism is unchanged, its ranks being the same.",
        "context": "On CPU, DeepSpeed's PyTorch softmax slices no rows for rank 1 and fails on the shapes (our "
        "stand-in for the kernel indexes as the kernel does and fails the same way); the CUDA kernel "
        "(`csrc/transformer/inference/csrc/softmax.cu`) indexes `batch * heads * mp_size + head_offset + head` and "
        "reads the next sequence's rows, or past the tensor, instead (read, not run). BLOOM runs on Transformers "
        "4.43.4 here: DeepSpeed's BLOOM container refuses newer ones. Single-rank cells are correct as released; "
        "with the patch, every BLOOM cell on 2 ranks is correct but those with a residual after the LayerNorm "
        "and tensor parallelism on ZeRO-3. Affected releases, read from DeepSpeed's git history (not run): "
        "the offset has been the global rank since BLOOM inference support (#2083, first in 0.6.7), through "
        "`BloomSelfAttention` (#2623, first in 0.8.0) and the Hybrid Engine's first release (0.9.0), to 0.19.8 "
        "(run here).",
    },
    BUG_GPTJ_ACTIVATION: {
        "file": "ISSUE-gptj-activation.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] == "gpt-j" and c["configuration"] == "relu",
        "evidence": (("vs the same weights with gelu_new (max abs, every step)", _twin("tanh_gelu_activation")),),
        "measured": "a ReLU GPT-J's logits equal those of the same weights with GELU (gelu_new), and differ from "
        "the model's",
        "title": "Kernel injection and Hybrid Engine compute GPT-J with GELU whatever its activation_function",
        "cause": "GPT-J's MLP reads the attention's LayerNorm, so `HFGPTJLayerPolicy.layernorm()` "
        "(`deepspeed/module_inject/containers/gptj.py`) hands the injected layer no MLP LayerNorm, and "
        "`DeepSpeedMLP.forward()` (`deepspeed/ops/transformer/inference/ds_mlp.py`) runs such an MLP through "
        "`fused_gemm_gelu`, whose activation is GELU whatever `mlp_act_func_type` says. The policy never reads "
        "`activation_function`: a GPT-J with another activation is computed with GELU, with no error.",
        "fix": "The policy reads `activation_function` from the config the layer's attention keeps and refuses "
        f"any activation that is not a GELU variant by name (patch `{P['gptj-activation']}`), as the GPT-NeoX and "
        "OPT policies "
        "refuse the activations their kernels lack; every GELU variant is served (the kernel's tanh GELU is "
        "within about 1e-4 of the exact one).",
        "context": "Every GPT-J checkpoint we know uses gelu_new, which the injected MLP computes: this concerns "
        "GPT-J-shaped models trained with another activation. On CPU our fallback stands in for "
        "`fused_gemm_gelu` with the kernel's tanh GELU (DeepSpeed's own fallback ignores `transposed_mode` and "
        "fails on the shapes); which activation runs is decided in Python, so we expect GPUs to show the same "
        "(not run by us). Affected releases, read from DeepSpeed's git history (not run): the policy has never "
        "read the activation, from GPT-J inference support (#1670, first in 0.5.10) to 0.19.8 (run here).",
    },
    BUG_BLOOM_RESIDUAL: {
        "file": "ISSUE-bloom-residual.md",
        "scope": "injection",
        "shown": lambda c: c["arch"] == "bloom" and c["configuration"] == "residual-post-layernorm",
        "evidence": (("vs the same weights with the residual before the LayerNorm (max abs, every step)",
                      _twin("residual_before_layer_norm")),),
        "measured": "with `apply_residual_connection_post_layernorm=True` the logits equal those of the same "
        "weights with the default residual, and differ from the model's",
        "title": "Kernel injection and Hybrid Engine compute BLOOM with apply_residual_connection_post_layernorm="
        "True as if it were False",
        "cause": "transformers' `BloomBlock` takes each residual from the LayerNorm's output when "
        "`apply_residual_connection_post_layernorm` is set. DeepSpeed's injected layer "
        "(`DeepSpeedTransformerInference` with the BLOOM container, `deepspeed/module_inject/containers/bloom.py`) "
        "always adds the residual from before the LayerNorm, and `BLOOMLayerPolicy` never reads the setting: "
        "such a model is computed as the default one, with no error.",
        "fix": "`BLOOMLayerPolicy` refuses a layer with the residual after the LayerNorm by name and says to run "
        f"the model without kernel injection (patch `{P['bloom-residual']}`).",
        "context": "Every BLOOM checkpoint we know keeps the default (False): this concerns BLOOM-shaped models "
        "trained otherwise. Which residual is added is decided in Python, so we expect GPUs to show the same "
        "(not run by us). BLOOM runs on Transformers 4.43.4 here: DeepSpeed's BLOOM container refuses newer ones. "
        "Affected releases, read from DeepSpeed's git history (not run): the policy has never read the setting, "
        "from BLOOM inference support (#2083, first in 0.6.7) to 0.19.8 (run here).",
    },
    BUG_BLOOM_TP_COPY: {
        "file": "ISSUE-bloom-tensor-parallel.md",
        "scope": "hybrid-engine",
        "shown": lambda c: c["arch"] == "bloom" and c["scenario"].startswith("tp2-mpu") and c["zero_stage"] == 3,
        "evidence": (("first crash", _first_crash),),
        "measured": "generate fails in the tensor-parallel copy of the first layer's QKV: the copy's source and "
        "destination overlap",
        "title": "BLOOM under the Hybrid Engine with tensor parallelism on pinned ZeRO-3: the QKV copy slices the "
        "wrong dimension and generate fails",
        "cause": "With an mpu on pinned ZeRO-3, `generate()` (`deepspeed/runtime/hybrid_engine.py`) calls "
        "`apply_tensor_parallelism(mp_replace, reversed_dim=True)` on every container: the Hybrid Engine's weights "
        "are [out, in] and its `ReplaceWithTensorSlicing` has `out_dim=0, in_dim=1`. The other copies pass "
        "`int8=reversed_dim` on; `DS_BloomContainer.attention_qkv_mp()` "
        "(`deepspeed/module_inject/containers/bloom.py`) drops it, so `ReplaceWithTensorSlicing.copy()` compares "
        "the QKV's rows with the destination's columns and slices the rank's slice, which the injected attention "
        "already holds, onto itself: `RuntimeError: unsupported operation: some elements of the input tensor and "
        "the written-to tensor refer to a single memory location`. Whole weights would be sliced by columns.",
        "fix": "`attention_qkv_mp()` passes `int8=reversed_dim` on like the other copies; BLOOM's head-interleaved "
        f"rows keep the plain (block) copy (patch `{P['bloom-tensor-parallel']}`).",
        "context": "Decided in Python before any kernel runs, so we expect GPUs to show the same (not run by us). "
        "ZeRO-2 takes no copies and its cells are correct; past this bug the same cells need "
        f"`{P['tensor-parallel-mask']}` (the attention "
        f"mask) and, on 4 ranks, `{P['bloom-alibi-offset']}`. BLOOM runs on Transformers 4.43.4 here: DeepSpeed's "
        "BLOOM container "
        "refuses newer ones. Affected releases, read from DeepSpeed's git history (not run): the override arrives "
        "with the Hybrid Engine's containers (#3425, first in 0.9.3), unchanged to 0.19.8 (run here).",
    },
    BUG_TP_MASK: {
        "file": "ISSUE-tensor-parallel-mask.md",
        "scope": "hybrid-engine",
        "shown": lambda c: (c["arch"] == "bloom" or c["scenario"].endswith("left-pad"))
        and c["scenario"].startswith("tp2-mpu") and c["zero_stage"] == 3,
        "evidence": (("first crash", _first_crash),),
        "measured": "the injected BLOOM attention of rank 1 is handed ALiBi for one sequence where its scores hold "
        "both ranks' prompts; with a left-padded batch, GPT-NeoX, GPT-Neo, Llama, OPT and GPT-J fail in "
        "Transformers on both ranks' prompts with one rank's mask rows",
        "title": "Hybrid Engine tensor-parallel generate() on pinned ZeRO-3 gathers the prompts but not their "
        "attention masks",
        "cause": "With pinned ZeRO-3 and `inference_tp_size` > 1, `generate()` "
        "(`deepspeed/runtime/hybrid_engine.py`) all-gathers the `input_ids` of every rank of the tensor-parallel "
        "group and runs the model's `generate()` on all of them, but hands it the calling rank's "
        "`attention_mask` as it was: one rank's rows for the whole group's prompts. The model masks padding and "
        "counts positions from that mask, so each rank computes its heads of every prompt with its own prompt's "
        "mask (where the shapes broadcast). BLOOM builds its ALiBi from the mask: one sequence's worth for several, "
        "and the injected attention reads past it.",
        "fix": "`generate()` all-gathers the attention mask with the prompts, in the same order (patch "
            f"`{P['tensor-parallel-mask']}`).",
        "context": "On CPU our stand-in for the softmax kernel refuses ALiBi for fewer sequences than the scores "
        "hold (the CUDA kernel reads past it: read, not run). Models without ALiBi show it when the prompts are "
        "padded, as DeepSpeed-Chat pads a batch: with two left-padded prompts per rank, Transformers fails on the "
        "batch dimension (`The size of tensor a (4) must match the size of tensor b (2)` for GPT-Neo, OPT and "
        "GPT-J; `index 2 is out of bounds` where GPT-NeoX and Llama build their masks); with one prompt per rank "
        "the mask broadcasts and each rank's padding is applied to every rank's prompt, silently (read, not run). "
        "Affected releases, read from DeepSpeed's git history (not run): the gather of the prompts alone has been "
        "there since the Hybrid Engine's first release, 0.9.0, to 0.19.8 (run here).",
    },
}  # fmt: skip


UNSERVABLE_CONFIGS = ("gelu-gating", "attention-bias", "mlp-bias", "grouped-query")


NEOX_PREREQUISITE = (
    "Prerequisite: with current Transformers (4.57 here), GPT-NeoX injection fails before this bug is reached, in "
    "`GPTNEOXLayerPolicy.get_hidden_heads()`: `'GPTNeoXAttention' object has no attribute 'hidden_size'` (patch "
    f"`{P['gptneox-hidden-heads']}` reads both sizes from the config). The released cells below run with a "
    "compatibility shim that adds "
    f"the two attributes; the whole series carries `{P['gptneox-hidden-heads']}` instead."
)


# Which DeepSpeed paths a bug is on: the containers' layer (built by kernel injection and the Hybrid Engine
# alike), or the Hybrid Engine alone (its ZeRO-3 merge, its LoRA fusion, its replacement of outer LayerNorms).
SCOPES = {
    "injection": "kernel injection (`deepspeed.init_inference(..., replace_with_kernel_inject=True)`) and the Hybrid "
    "Engine, which builds its layers through the same containers",
    "hybrid-engine": "the Hybrid Engine only; `deepspeed.init_inference` does not take this path",
}


def _twins(cell: dict) -> str:
    found = cell.get("per_step_logits_vs_twin") or {}
    return "; ".join(f"{n.replace('_', ' ')}: {num(worst(v))}" for n, v in found.items()) or "-"


def issue_text(data: dict, bug: str) -> str:
    """The upstream issue text for `bug` in DeepSpeed's bug template, from the measured cells only."""
    meta = ISSUES[bug]
    measured = [c for c in data["cells"] if "error" not in c]
    shown = [c for c in measured if meta["shown"](c)]
    hits = [c for c in shown if any(d.startswith(bug) for d in c["diagnosis"])]
    if not hits:
        return f"# {bug}\n\nNo measured cell shows it; nothing to report.\n"
    fixed = [c for c in shown if c["build"] == "whole series"]
    pinned = next((c for c in hits if c.get("transformers", PINNED) == PINNED), hits[0])  # where the scripts run
    ds, v = pinned["deepspeed"]["version"], pinned["versions"]
    # A script pinned to other Transformers runs on those here (issue_scripts.IssueScript.transformers).
    script_transformers = next(
        (s.transformers for s in issue_scripts.scripts_of(meta["file"]) if s.transformers), None
    )
    heads = [h for h, _ in meta["evidence"]]
    rows = [
        f"| {labels.where(c)} | {c['build']} | {c['zero_stage']} | {c['world_size']} | {labels.worst_steps(c)} | "
        + " | ".join(f(c) for _, f in meta["evidence"])
        + f" | {'; '.join(c['diagnosis'])} |"
        for c in shown
    ]
    return "\n".join(
        [
            f"# [BUG] {meta['title']}",
            "",
            "**Describe the bug**",
            meta["cause"],
            "",
            *([NEOX_PREREQUISITE, ""] if meta.get("gpt_neox") else []),
            f"Scope: {SCOPES[meta['scope']]}.",
            "",
            f"Measured ({evidence.of(data)['evidence']}, tiny models with random weights, fp32, DeepSpeed {ds} as "
            "released and with our patch "
            f"series): in {len(hits)} of the {len(shown)} cells below {meta['measured']}:",
            "",
            "| model, scenario | DeepSpeed | ZeRO | ranks | logits vs native (max abs, every step) | "
            + " | ".join(heads)
            + " | diagnosis |",
            "|---|---|---|---|---|" + "---|" * len(heads) + "---|",
            *rows,
            "",
            "**To Reproduce**",
            *issue_scripts.section(
                meta["file"],
                f"DeepSpeed {ds}, torch {v['torch']}, Transformers {script_transformers or v['transformers']}",
            ),
            "",
            f"The table above is `{data['command']}` in our repository (after `scripts/bootstrap.sh`).",
            "",
            "**Expected behavior**",
            f"{meta['fix']} " + (meta["fixed"](fixed) if "fixed" in meta else _fixed(fixed)),
            "",
            f"**ds_report output** (`{evidence.ds_report_command(data)}`, taken by the run):",
            "```",
            data.get("ds_report", "not recorded by this run"),
            "```",
            "",
            "**System info**",
            *evidence.system_info(data, v.get("python", "not recorded"), v["torch"], v["transformers"], ds),
            "",
            "**Additional context**",
            f"{evidence.scope(data).split(':')[0]}. {meta['context']}",
            *_affected(meta["file"]),
            "",
        ]
    )


def _affected(file: str) -> list[str]:
    """The committed run of the text's script on each DeepSpeed release (affected_releases), as a paragraph."""
    said = affected_releases.sentence(affected_releases.load(), [s.fixed_by for s in issue_scripts.scripts_of(file)])
    return ["", said] if said else []


def _fixed(fixed: list[dict]) -> str:
    """How the cells that show a bug end with the whole series: correct, or refused by name."""
    refused = sum(any(d in REFUSALS for d in c["diagnosis"]) for c in fixed)
    return (
        f"With it (our whole series), {sum(CORRECT in c['diagnosis'] for c in fixed)} of {len(fixed)} such cells are "
        f"correct (every step within {TOL:g} of native in fp32, {tolerance.logits('bf16'):g} in bf16, "
        f"{tolerance.logits('fp16'):g} in fp16)"
        + (f" and {refused} refuse the configuration by name." if refused else ".")
    )


def write(out: Path, data: dict) -> None:
    """Every issue text into OUT, one file per bug: the short text (issue_brief) and its appendix, the full
    evidence (issue_text)."""
    for bug, meta in ISSUES.items():
        (out / issue_brief.appendix_name(meta["file"])).write_text(issue_text(data, bug))
        (out / meta["file"]).write_text(issue_brief.brief(data, bug, meta))
