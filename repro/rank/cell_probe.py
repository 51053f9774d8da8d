"""One cell of the conformance suite or the LoRA family table, for any architecture with an adapter
(repro.rank.archs): a tiny seeded model of it, with or without DeepSpeed-Chat LoRA, under the Hybrid Engine,
driven in the cell's call order, then further eval/generate/train cycles.

Measured against native Hugging Face on the same weights (LoRA merged into plain nn.Linear): greedy tokens;
per-step logits teacher-forced on the Hybrid Engine's own tokens, against the model, the model without its
LoRA and the architecture's native twins (one setting DeepSpeed may ignore put back); whether the QKV GEMM
was handed a bias the model does not have; whether train() gave every weight back, bitwise. Where the
architecture has a head-interleaved fused QKV, also its layout evidence (repro.rank.qkv_states): the state of
each weight the inference layers saw at prefill and decode, the layout the containers hold after eval() and
the one train() leaves. An exception the Hybrid Engine raises is the cell's finding (`crash`: type, message,
where), not a failed run.

Usage: `python -m repro.rank.cell_probe OUT.json` under torchrun or a warm pool (repro.host.launch.run_probe,
repro.host.pool); the cell's settings are read from OUT.spec.json beside it (the host writes it),
because run_probe passes only the output path. Rank 0 writes OUT.json.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import fixstatus, results, shim, tolerance
from ..model_registry import DEFAULT_PROMPT_IDS
from . import cpu_fp16, fallbacks, he_faults, lora, measure, models, placement, qkv_states, tp_slices
from .archs import adapter
from .engine import ds_config, greedy
from .lifecycle import finish, init_distributed, leave, progress, run_and_leave
from .mpu import TensorParallelMpu

# The call orders a caller can use: the first is DeepSpeed-Chat's (and the reproduction's); the others are what a
# PyTorch loop that calls train() at its top, or a double eval(), does (patch `qkv-transform-idempotent`).
ORDERS = {
    "eval-generate-train": ("eval", "generate", "train"),
    "train-first": ("train", "eval", "generate", "train"),
    "eval-twice": ("eval", "eval", "generate", "train"),
}
DEFAULTS = {
    "arch": "gpt-neox",
    "targets": "qkv",
    "pin": True,
    "order": "eval-generate-train",
    "zero_stage": 3,
    "threshold": 0,  # stage3_param_persistence_threshold: 0 partitions every parameter; None = DeepSpeed's
    "max_live": None,  # stage3_max_live_parameters; None = DeepSpeed's default
    "synced_gpus": False,  # generate(synced_gpus=True), as DeepSpeed-Chat under ZeRO-3
    "tp": 1,  # hybrid_engine.inference_tp_size: tensor-parallel generation across this many ranks
    "tp_gather_partition_size": None,  # layers gathered at a time for tensor-parallel generation (DeepSpeed: 8)
    "mpu": False,  # hand deepspeed.initialize a model-parallel unit (repro.rank.mpu): every rank one TP group
    "tp_slices": False,  # with the mpu: each rank trains its Megatron slice of the layers (repro.rank.tp_slices)
    "left_pad": 0,  # > 0: a batch of two prompts, the first left-padded by this many tokens (mask 0 there)
    "new_tokens": 8,
    "cycles": 3,
    "seed": 1234,
    "lora_seed": 4321,
    "lora_std": 0.1,
    "lora_dim": 8,
    "lora_alpha": 8.0,
    "dtype": "fp32",
    "backend": "cpu",  # cpu (gloo, DeepSpeed's fallbacks), or rocm / cuda (nccl, each rank on its own GPU)
    # True: the DeepSpeed under test carries its PyTorch fallbacks completed (the wheel's code, the fallbacks pull
    # request): no stand-in of ours is installed, so what runs is what `pip install` of the wheel runs.
    "own_fallbacks": False,
}
HYBRID_MEGATRON = "deepspeed.module_inject.containers.features.hybrid_megatron"


def spec_path(out: Path) -> Path:
    """Where the host leaves a cell's settings: OUT.spec.json beside OUT.json."""
    return out.with_suffix(".spec.json")


def peer_crash_path(out: Path, rank: int) -> Path:
    """Where a rank other than 0 leaves its own crash (OUT.rankN.crash.json): rank 0 often sees only the
    collective its peer left, and the host joins them (repro.host.conformance.cells)."""
    return out.with_suffix(f".rank{rank}.crash.json")


class Laps:
    """Named phase durations, each also one progress line from rank 0."""

    def __init__(self) -> None:
        self.started = self.mark = time.time()
        self.timings: dict[str, float] = {}
        self.rank0 = os.environ.get("RANK", "0") == "0"

    def __call__(self, name: str) -> None:
        now = time.time()
        self.timings[name], self.mark = round(now - self.mark, 2), now
        if self.rank0:
            progress(f"{name.replace('_', ' ')} done in {self.timings[name]:.1f} s")


@dataclass
class Native:
    """What a cell measures before DeepSpeed touches the model: its prompt, the native references the Hybrid
    Engine is compared with, and the training weights (and LoRA deltas) its layout evidence reads against."""

    ids: torch.Tensor
    mask: torch.Tensor | None
    merged: torch.nn.Module
    base: torch.nn.Module
    twins: dict
    tokens: list
    logits: list
    base_tokens: list
    unmerged_tokens: list
    unmerged_logits: list
    sliced: list
    heads: int
    held: int  # the heads of the QKV weights this rank trains
    originals: dict
    deltas: dict


def _native(spec: dict, arch, model: torch.nn.Module, device: torch.device, world: int) -> Native:
    heads = model.config.num_attention_heads
    ids, mask = prompt_batch(spec["left_pad"], model.config.vocab_size, device)
    n = spec["new_tokens"]
    merged, base = lora.merged_reference(model), lora.base_reference(model)  # kept out of ZeRO's hands
    twins = arch.twins(merged)
    with torch.no_grad():
        ref_tokens, ref_logits = greedy(merged, ids, n, attention_mask=mask)
        base_tokens, _ = greedy(base, ids, n, attention_mask=mask)
        unmerged_tokens, unmerged_logits = greedy(model, ids, n, attention_mask=mask)
    sliced = _tp_slices(spec, arch, model, world)  # after the native references, which need the whole model
    return Native(
        ids, mask, merged, base, twins, ref_tokens, ref_logits, base_tokens, unmerged_tokens, unmerged_logits, sliced,
        heads, held=heads // spec["tp"] if sliced else heads,
        originals={name: p.detach().clone() for name, p in model.named_parameters()},
        deltas={f"{name}.weight": m.delta().detach().clone() for name, m in lora.lora_modules(model).items()},
    )  # fmt: skip


def run(spec: dict) -> dict:
    laps = Laps()
    world = int(os.environ["WORLD_SIZE"])
    shim.apply()
    import deepspeed  # noqa: F401  (both imported here, after the shim and before the fallbacks, as always)
    import transformers  # noqa: F401

    op_state = {"compiled_op": "DeepSpeed's own fallbacks"} if spec["own_fallbacks"] else fallbacks.install()
    lifted = cpu_fp16.allow(spec["backend"], spec["dtype"])
    init_distributed(placement.dist_backend(spec["backend"]))
    device = placement.rank_device(spec["backend"])
    laps("imports_and_init_distributed")

    arch = adapter(spec["arch"])
    model, lora_names = _model(spec, arch, device)
    native = _native(spec, arch, model, device, world)
    laps("build_and_native")

    result = _header(spec, arch, model.config, native, (world, device, op_state, lora_names))
    phase = "initialize"
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    try:
        engine = _initialize(spec, model, world)
        # The parameters initialize left untrainable that were trainable before (`frozen-lm-head`): no step moves them.
        result["frozen_by_initialize"] = [
            n for n, p in model.named_parameters() if n in trainable and not p.requires_grad
        ]
        laps("deepspeed_initialize")
        phase = "call_order"
        he_tokens, he_logits = _first_generate(engine, spec, arch, model.config, native, lifted, result)
        laps("he_order_generate_train")
        references = (native.merged, native.base, native.twins, native.tokens, native.logits)
        result.update(_compare(he_tokens, he_logits, (native.ids, native.mask), references, lora_names, spec["dtype"]))
        phase = "cycles"
        cycle_tokens = _cycles(engine, spec, native.ids, native.mask)
        result["cycle_tokens"] = cycle_tokens
        result["cycle_tokens_equal_native"] = [t == native.tokens for t in cycle_tokens]
        result["restore_after_cycles"] = qkv_states.gathered_vs_originals(
            engine, native.originals, native.held, arch.fused_qkv
        )
        laps("cycles")
    except Exception as exc:  # the Hybrid Engine's own failure: the cell's finding
        result["crash"] = {**he_faults.crash(exc), "during": phase}
        result["crash_time"] = time.time()  # which rank's crash came first, when several did
    result["duration_s"] = round(time.time() - laps.started, 2)
    result["timings_s"] = laps.timings
    return result


def _header(spec: dict, arch, config, native: Native, run: tuple) -> dict:
    """What the cell is (its settings, model shape, software and kernels) and what its native references gave."""
    world, device, op_state, lora_names = run
    heads = native.heads
    return {
        "arch": arch.name,
        "settings": _settings(spec, arch.name, ORDERS[spec["order"]], world),
        "device": _device_name(device),
        "grouped_query_attention": getattr(config, "num_key_value_heads", None) not in (None, heads),
        # The key/value heads of its heads (None: one per head): a rank's slice of a grouped-query QKV is narrower.
        "key_value_heads": getattr(config, "num_key_value_heads", None),
        "attention_heads": heads,
        "hidden_size": config.hidden_size,
        **_software(),
        "kernel": op_state,
        "lora_modules": lora_names,
        "tp_sliced_modules": len(native.sliced),
        "lora_changes_native_tokens": native.tokens != native.base_tokens,
        "native_tokens": native.tokens,
        "native_lora_unmerged_tokens": native.unmerged_tokens,
        "native_base_tokens": native.base_tokens,
        "merged_vs_unmerged_logits_max_abs": measure.worst(
            measure.stepwise_max_abs(native.logits, native.unmerged_logits)
        ),
    }


def _first_generate(engine, spec: dict, arch, config, native: Native, lifted: list, result: dict) -> tuple:
    """The cell's call order up to and including its first HE generate and the train() after it: the QKV the
    containers hold is measured at the last eval() before the generate, the weights after the train(). Records
    into `result` as it goes (what the attention took is evidence even when generate fails); returns the HE's
    tokens and logits."""
    calls = ORDERS[spec["order"]]
    names = {id(p): name for name, p in engine.module.named_parameters()}
    containers = engine._inference_containers
    bias_probe = he_faults.QkvBiasProbe(containers)
    for i, call in enumerate(calls):
        if call == "generate":
            layers_saw = (
                qkv_states.ParamProbe(
                    containers, names, native.originals, native.deltas, native.held, model_heads=native.heads,
                    tp_share=_tp_share(spec),
                )
                if arch.fused_qkv
                else None
            )  # fmt: skip
            injected, prompts = he_faults.LayerCalls(containers), he_faults.PromptFlags(containers)
            cache_steps = he_faults.CacheSteps(engine.module)
            try:
                with torch.no_grad():  # DeepSpeed-Chat's call: the HE replaces module.generate when it engages
                    he_tokens, he_logits = greedy(
                        engine.module, native.ids, spec["new_tokens"], spec["synced_gpus"], native.mask
                    )
            finally:  # what the attention took each step for is evidence even when generate fails
                result.update(bias_probe.shapes())
                result["inference_containers"] = len(containers)
                if result.get("grouped_query_attention"):  # the key/value heads the containers gave the layers
                    result["injected_num_kv"] = sorted(
                        {getattr(getattr(c, "ds_model_config", None), "num_kv", None) for c in containers}, key=str
                    )
                result["tensor_parallel"] = _tensor_parallel(containers)
                result["injected_layer_calls"] = injected.remove()
                result["kernel_paths"] = fallbacks.kernel_paths(c.module for c in containers)
                result["approximations"] = lifted + approximations(config, result["kernel_paths"])
                result["attention_prompt_flags"] = prompts.remove()
                result["transformers_cache_steps"] = cache_steps.remove()
            if layers_saw is not None:
                layers_saw.remove()
                result["weights_seen_by_inference_layers"] = layers_saw.records
            continue
        getattr(engine, call)()
        if call == "eval" and calls[i + 1] == "generate" and arch.fused_qkv:
            worst_qkv, layouts = qkv_states.qkv_after_eval(containers, native.originals, names, native.held,
                                                           native.heads)  # fmt: skip
            result["qkv_after_eval_vs_inference_layout_max_abs"] = worst_qkv
            result["qkv_layouts_after_eval"] = layouts
    result["qkv_bias_on_bias_free_model"] = bias_probe.remove()
    if not containers:  # DeepSpeed warns that rollout uses the model's generate; does engine.generate?
        result["engine_generate_without_containers"] = _engine_generate(engine, native.ids, native.mask, native.tokens)
        result["layer_policy"] = _layer_policy(arch.layer_list(engine.module)[0])
    result["restore_after_first_generate"] = qkv_states.gathered_vs_originals(
        engine, native.originals, native.held, arch.fused_qkv
    )
    return he_tokens, he_logits


def _model(spec: dict, arch, device: torch.device) -> tuple[torch.nn.Module, list[str]]:
    """The cell's model (its seeded random weights, or the user's own) with its LoRA, in the cell's dtype."""
    if spec.get("weights"):  # "check my model": the user's own weights
        model = arch.load(spec["weights"], spec.get("config") or {}, spec.get("allow_pickle", False))
    else:
        model = arch.build(spec["seed"], spec.get("config"))
    lora_names = lora.attach(
        model,
        spec["targets"],
        seed=spec["lora_seed"],
        lora_dim=spec["lora_dim"],
        lora_alpha=spec["lora_alpha"],
        std=spec["lora_std"],
        arch=arch.name,
    )
    # LoRA too: DeepSpeed casts every parameter to the engine's dtype. The native references are copies of
    # this model, so they run on the device the Hybrid Engine runs on.
    # The model, its native references and the Hybrid Engine run in the cell's dtype (DeepSpeed's CPU accelerator
    # offers fp32 and bf16; fp16 on CPU: repro.rank.cpu_fp16); tolerances per dtype: repro.tolerance.
    model.to(device=device, dtype=models.DTYPES[spec["dtype"]])
    return model, lora_names


def _initialize(spec: dict, model: torch.nn.Module, world: int):
    """`deepspeed.initialize` with the cell's Hybrid Engine config (and its mpu, where it has one)."""
    import deepspeed

    config = ds_config(
        spec["pin"],
        spec["dtype"],
        world,
        spec["threshold"],
        zero_stage=spec["zero_stage"],
        max_live_parameters=spec["max_live"],
        inference_tp_size=spec["tp"],
        tp_gather_partition_size=spec["tp_gather_partition_size"],
    )
    params = {"model_parameters": [p for p in model.parameters() if p.requires_grad]} if "optimizer" in config else {}
    if spec["mpu"]:
        params["mpu"] = TensorParallelMpu(spec["tp"])
    engine, *_ = deepspeed.initialize(model=model, config=config, **params)
    return engine


def _cycles(engine, spec: dict, ids: torch.Tensor, mask: torch.Tensor | None) -> list[list[int]]:
    """eval(), generate, train() `cycles` times: the tokens of each generate."""
    tokens = []
    for _ in range(spec["cycles"]):
        engine.eval()
        with torch.no_grad():
            tokens.append(greedy(engine.module, ids, spec["new_tokens"], spec["synced_gpus"], mask)[0])
        engine.train()
    return tokens


def _settings(spec: dict, arch: str, calls: tuple[str, ...], world: int) -> dict:
    """What the cell asked for, as the result records it."""
    return {
        "targets": spec["targets"],
        "pin_parameters": spec["pin"],
        "order": spec["order"],
        "calls": list(calls),
        "overrides": spec.get("config") or {},
        "zero_stage": spec["zero_stage"],
        "world_size": world,
        "stage3_param_persistence_threshold": spec["threshold"],
        "stage3_max_live_parameters": spec["max_live"],
        "synced_gpus": spec["synced_gpus"],
        "inference_tp_size": spec["tp"],
        "tp_gather_partition_size": spec["tp_gather_partition_size"],
        "mpu": spec["mpu"],
        "tp_slices": spec["tp_slices"],
        "left_pad": spec["left_pad"],
        "new_tokens": spec["new_tokens"],
        "cycles": spec["cycles"],
        "lora": {k: spec[k] for k in ("lora_dim", "lora_alpha", "lora_std", "lora_seed")},
        "model": spec.get("weights") or f"random:{arch}:seed={spec['seed']}",
        "dtype": spec["dtype"],
        "backend": spec["backend"],
    }


def _software() -> dict:
    """The DeepSpeed, torch and Transformers the rank imported, and whether its source has #8391's fix."""
    import deepspeed
    import transformers

    return {
        "deepspeed": {
            "version": deepspeed.__version__,
            "path": str(Path(deepspeed.__file__).resolve().parent),
            # #8391's fix, read from the source the ranks imported (`lora-qkv-layout`/`lora-non-pinned`: the host
            # records them).
            "fix_8391_in_source": fixstatus.is_fixed(
                fixstatus.fix_status_of_source(Path(importlib.import_module(HYBRID_MEGATRON).__file__).read_text())
            ),
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
        },
    }


def prompt_batch(left_pad: int, vocab_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The prompt batch and its attention mask. Without padding one prompt, every token attended (mask None:
    all 1). With `left_pad`, two: the prompt with its first `left_pad` tokens replaced by padding (0, mask 0),
    as DeepSpeed-Chat left-pads the shorter prompts of a batch, then the whole prompt. Every measurement
    reads the first, padded one."""
    ids = torch.tensor([[i % vocab_size for i in DEFAULT_PROMPT_IDS]], dtype=torch.long, device=device)
    if not left_pad:
        return ids, None
    if not 0 < left_pad < ids.shape[1]:
        raise ValueError(f"left_pad must leave a real token: 0 < left_pad < {ids.shape[1]}, not {left_pad}")
    ids, mask = ids.repeat(2, 1), torch.ones_like(ids).repeat(2, 1)
    ids[0, :left_pad], mask[0, :left_pad] = 0, 0
    return ids, mask


def _tp_share(spec: dict) -> tuple[int, int] | None:
    """(rank in its tensor-parallel group, tp) where generation copies each rank's share out of whole training
    weights: inference_tp_size > 1 without an mpu (the groups are `tp` consecutive ranks)."""
    if spec["tp"] == 1 or spec["mpu"]:
        return None
    return int(os.environ["RANK"]) % spec["tp"], spec["tp"]


def _tp_slices(spec: dict, arch, model: torch.nn.Module, world: int) -> list[str]:
    """With `tp_slices`, each rank keeps its slice of the layers' Linears: what an mpu tells DeepSpeed the
    training weights are (its tensor-parallel groups: `tp` consecutive ranks). Only with an mpu, and without LoRA
    (its factors are not sliced)."""
    if not spec["tp_slices"]:
        return []
    if not spec["mpu"] or world % spec["tp"]:
        raise ValueError("tp_slices needs mpu and inference_tp_size dividing the world size")
    rank = int(os.environ["RANK"]) % spec["tp"]  # this rank's place in its tensor-parallel group
    return tp_slices.slice_layers(arch.layer_list(model), arch.column_parallel(), arch.row_parallel, rank, spec["tp"])


def _device_name(device: torch.device) -> str:
    """What the cell ran on, for the report: "cpu", or the GPU's own name."""
    return "cpu" if device.type == "cpu" else f"{device}: {torch.cuda.get_device_name(device)}"


def approximations(config, kernel_paths: dict[str, str]) -> list[str]:
    """Where a compiled kernel computes other math than the model, named so a small difference is read as
    that and not as a bug: DeepSpeed's compiled MLP applies tanh-approximate GELU (csrc gelu), where a model
    whose activation is "gelu" computes the exact one (about 1e-4 apart in fp32)."""
    activation = getattr(config, "hidden_act", None) or getattr(config, "activation_function", None)
    compiled_mlp = any(k.startswith(("MLPGemmOp", "GELUGemmOp")) and v == "compiled" for k, v in kernel_paths.items())
    if activation == "gelu" and compiled_mlp:
        return ["the compiled MLP applies tanh-approximate GELU; the model's `gelu` is exact (about 1e-4 in fp32)"]
    return []


def _tensor_parallel(containers) -> dict | None:
    """What the injected layers were built for: the inference config's mp_size and the heads each rank holds
    (DeepSpeed slices the heads across `inference_tp_size` ranks)."""
    if not containers:
        return None
    module = containers[0].module
    return {"mp_size": module.config.mp_size,
            "heads_per_rank": getattr(module.attention, "num_attention_heads_per_partition", None)}  # fmt: skip


def _layer_policy(layer: torch.nn.Module) -> dict:
    """Why DeepSpeed built no container: the policies that name the decoder layer's class (none: no policy
    matched it), and those that found no class to name (their import of it failed, or the model is absent)."""
    from deepspeed.module_inject.replace_policy import replace_policies

    def names(policy) -> bool:
        found = policy._orig_layer_class
        return type(layer) in found if isinstance(found, list) else type(layer) is found

    return {"layer_class": type(layer).__name__,
            "named_by": [p.__name__ for p in replace_policies if names(p)],
            "named_nothing": sorted(p.__name__ for p in replace_policies if not p._orig_layer_class)}  # fmt: skip


def _engine_generate(engine, ids: torch.Tensor, mask: torch.Tensor | None, ref_tokens: list[int]) -> dict:
    """`engine.generate` (the Hybrid Engine's own method, which callers other than DeepSpeed-Chat use) when
    DeepSpeed built no container: what it raised, or whether its first token is native's."""
    try:
        with torch.no_grad():
            tokens, _ = greedy(engine, ids, 1, attention_mask=mask)
    except Exception as exc:
        return {"raised": he_faults.crash(exc)}
    return {"raised": None, "first_token_equal_native": tokens[:1] == ref_tokens[:1]}


def _margin_at_divergence(he_tokens: list[int], ref_tokens: list[int], ref_logits: list) -> float | None:
    index = measure.first_divergent_index(he_tokens, ref_tokens)
    return None if index is None or index >= len(ref_logits) else measure.top2_margin(ref_logits[index])


def _compare(he_tokens, he_logits, prompt, native, lora_names, dtype) -> dict:
    """The HE's first generate against native: tokens, and logits step by step, teacher-forced on the HE's
    tokens, against the model, the model without its LoRA and each twin. `prompt`: the batch and its mask;
    `native`: the merged and base models, the twins, and the merged model's greedy tokens and logits."""
    tol = tolerance.logits(dtype)
    ids, mask = prompt
    merged, base, twins, ref_tokens, ref_logits = native
    steps = measure.stepwise_max_abs(he_logits, measure.teacher_forced(merged, ids, he_tokens, mask))
    vs_base = measure.stepwise_max_abs(he_logits, measure.teacher_forced(base, ids, he_tokens, mask))
    matches = [
        "lora" if a <= tol else ("base" if b <= tol else "neither") for a, b in zip(steps, vs_base, strict=True)
    ]
    return {
        "he_tokens": he_tokens,
        "tokens_equal_native": he_tokens == ref_tokens,
        "first_divergent_token": measure.first_divergent_index(he_tokens, ref_tokens),
        # Native's top-1 vs top-2 gap where the tokens part (the prefix is shared there): a near-tie when smaller
        # than the tolerance, where noise within it may flip the token.
        "native_margin_at_divergence": _margin_at_divergence(he_tokens, ref_tokens, ref_logits),
        "first_step_logits_max_abs": measure.stepwise_max_abs(he_logits[:1], ref_logits[:1])[0],
        "per_step_logits_vs_native_freerun": measure.stepwise_max_abs(he_logits, ref_logits),
        "per_step_logits_vs_native": steps,
        "logits_finite": all(math.isfinite(x) for x in steps),
        # With LoRA: did the HE compute the model without it? Without LoRA both are the same model.
        "per_step_logits_vs_without_lora": vs_base if lora_names else None,
        "per_step_matches": matches,
        "first_step_not_lora": next((i for i, s in enumerate(matches) if s != "lora"), None),
        "per_step_logits_vs_twin": {
            name: measure.stepwise_max_abs(he_logits, measure.teacher_forced(twin, ids, he_tokens, mask))
            for name, twin in twins.items()
        },
    }


def main(out: str) -> int:
    out_path = Path(out)
    spec_file = spec_path(out_path)
    spec = {**DEFAULTS, **(json.loads(spec_file.read_text()) if spec_file.exists() else {})}
    result = run(spec)
    if "crash" in result:
        # The HE raised: ZeRO-3 may have collectives in flight (prefetch, a gather), so a barrier or a normal
        # interpreter exit can abort the rank after the finding is made. Rank 0 records it and every rank
        # leaves at once; a rank that did not crash waits in a collective until the host's timeout, which
        # the host reports as a broken cell.
        rank = int(os.environ.get("RANK", "0"))
        if rank == 0:
            results.write(out_path, result)
        else:
            own = {"rank": rank, "crash": result["crash"], "crash_time": result["crash_time"]}
            results.write(peer_crash_path(out_path, rank), own)
        leave(0)
    finish(out_path, result)
    return 0


if __name__ == "__main__":
    run_and_leave(main, sys.argv[1])
