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
    steps: list[torch.Tensor] = []
    kwargs = {"output_logits": True}
    hook = None
    if not _generate_copies_logits():  # each step's logits as the output layer returns them
        kwargs, head = {}, model.get_output_embeddings()
        # a copy: the logits processors then write into the step's logits in place (-inf over a masked token)
        hook = head.register_forward_hook(lambda _m, _args, output: steps.append(output[:, -1, :].detach().clone()))
        eos = getattr(model.generation_config, "eos_token_id", None)
        if isinstance(eos, int) and eos >= head.weight.shape[0]:
            # an end token beyond the tiny vocabulary (GPT-Neo's and GPT-J's 50256) can never be generated, which
            # later releases' processors ignore and these index out of range: no end token, the same tokens
            kwargs["eos_token_id"] = None
    try:
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids) if attention_mask is None else attention_mask,
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            pad_token_id=0,
            return_dict_in_generate=True,
            **kwargs,
            **({"synced_gpus": True} if synced_gpus else {}),
        )
    finally:
        if hook is not None:
            hook.remove()
    if not hasattr(out, "sequences"):  # positive evidence, named for the diagnosis (`tensor-parallel-output`)
        raise TypeError(f"generate(return_dict_in_generate=True) returned {type(out).__name__}, not a ModelOutput")
    if hook is not None and len(steps) != n:
        raise RuntimeError(f"the output layer ran {len(steps)} times in a generate of {n} tokens")
    logits = out.logits if hook is None else steps
    return out.sequences[0, ids.shape[1] :].tolist(), [step[0].float().clone() for step in logits]


def _generate_copies_logits() -> bool:
    """generate(output_logits=True) returns each step's logits as the model computed them: from Transformers 4.43.
    Before, there is no output_logits (< 4.38), or it holds the very tensor the logits processors then write into
    (-inf over the end token while min_new_tokens holds; 4.40.2's generation/utils.py, copied in 4.43.4's)."""
    import transformers

    return tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 43)
