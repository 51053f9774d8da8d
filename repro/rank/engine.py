"""The Hybrid Engine set-up and the greedy generate that every rank script shares (the reproduction and
its probes), so a probe's engine is configured and driven like the reproduction's."""

from __future__ import annotations

import torch


def ds_config(
    pin: bool,
    dtype: str,
    world_size: int,
    persistence_threshold: int | None = None,
    zero_stage: int = 3,
    max_live_parameters: int | None = None,
    inference_tp_size: int = 1,
    tp_gather_partition_size: int | None = None,
) -> dict:
    zero: dict = {"stage": zero_stage}
    if persistence_threshold is not None and zero_stage == 3:
        zero["stage3_param_persistence_threshold"] = persistence_threshold
    if max_live_parameters is not None and zero_stage == 3:
        zero["stage3_max_live_parameters"] = max_live_parameters
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "train_batch_size": world_size,
        "zero_optimization": zero,
        "hybrid_engine": {
            "enabled": True,
            "pin_parameters": pin,
            "max_out_tokens": 512,
            "inference_tp_size": inference_tp_size,
            "release_inference_cache": False,
        },
    }
    if tp_gather_partition_size is not None:
        config["hybrid_engine"]["tp_gather_partition_size"] = tp_gather_partition_size
    if zero_stage < 3:  # ZeRO-1/2 partition optimizer state, so they need an optimizer; lr 0, never stepped
        config["optimizer"] = {"type": "SGD", "params": {"lr": 0.0}}
        config["zero_allow_untested_optimizer"] = True
    if dtype == "bf16":
        config["bf16"] = {"enabled": True}
    elif dtype == "fp16":
        config["fp16"] = {"enabled": True}
    return config


def greedy(
    model: torch.nn.Module,
    ids: torch.Tensor,
    n: int,
    synced_gpus: bool = False,
    attention_mask: torch.Tensor | None = None,
) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy `n` tokens and each step's logits (fp32 copies) of the batch's first prompt. `synced_gpus`: as
    DeepSpeed-Chat's PPO trainer passes it under ZeRO-3 (every rank keeps stepping until all are done).
    `attention_mask`: 0 over a left-padded prompt's padding, as DeepSpeed-Chat's batches are; default all 1."""
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids) if attention_mask is None else attention_mask,
        max_new_tokens=n,
        min_new_tokens=n,
        do_sample=False,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_logits=True,
        **({"synced_gpus": True} if synced_gpus else {}),
    )
    if not hasattr(out, "sequences"):  # positive evidence, named for the diagnosis (`tensor-parallel-output`)
        raise TypeError(f"generate(return_dict_in_generate=True) returned {type(out).__name__}, not a ModelOutput")
    return out.sequences[0, ids.shape[1] :].tolist(), [step[0].float().clone() for step in out.logits]
