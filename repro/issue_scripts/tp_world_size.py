"""Hybrid Engine: an inference_tp_size that does not divide the number of ranks fails in deepspeed.initialize with
AttributeError: 'DeepSpeedHybridEngine' object has no attribute 'mp_group'.

A tiny GPT-Neo, random weights, ZeRO-3, no mpu (as DeepSpeed-Chat runs): inference_tp_size is twice the number of
ranks, so no rank is in a whole tensor-parallel group. Exit status 1: the bug (initialize fails on the missing
mp_group, or accepts the setting), 0: DeepSpeed refuses the setting by name.

GPU: deepspeed --num_gpus 1 tp_world_size.py (any number of ranks shows it)
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 tp_world_size.py (no DeepSpeed kernel is needed: it fails before
     any layer is injected)
"""

import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator


def main():
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    torch.manual_seed(0)
    config = transformers.GPTNeoConfig(vocab_size=64, hidden_size=32, num_layers=1, num_heads=4,
                                       max_position_embeddings=64, attention_types=[[["global"], 1]])  # fmt: skip
    model = transformers.GPTNeoForCausalLM(config).to(device)
    tp = 2 * world_size
    ds_config = {
        "train_batch_size": world_size,
        "zero_optimization": {"stage": 3},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "inference_tp_size": tp, "pin_parameters": True},
    }
    try:
        deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    except AttributeError as exc:
        if "mp_group" not in str(exc):
            raise
        print(f"BUG: inference_tp_size {tp} on {world_size} rank(s): initialize fails: AttributeError: {exc}")
        return 1
    except ValueError as exc:
        if "inference_tp_size" not in str(exc):
            raise
        print(f"OK: DeepSpeed refuses inference_tp_size {tp} on {world_size} rank(s) by name: {exc}")
        return 0
    print(f"BUG: initialize accepted inference_tp_size {tp} on {world_size} rank(s), which leaves every rank without "
          "a tensor-parallel group")  # fmt: skip
    return 1


if __name__ == "__main__":
    sys.exit(main())
