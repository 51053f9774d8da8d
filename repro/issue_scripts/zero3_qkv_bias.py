"""ZeRO-3 Hybrid Engine adds an uninitialised QKV bias to models without QKV bias (GPT-Neo, Llama).

A tiny GPT-Neo (no QKV bias), random weights, ZeRO-3 on 2 ranks: records every QKV GEMM that is handed a
bias, and compares greedy generate through the Hybrid Engine with Hugging Face on the same weights. What
the unwritten buffer holds decides the logits (correct, off, NaN, per rank), so the bias handed over is the
evidence. Exit status 1: the bug, 0: no bias handed over and the logits agree.

GPU: deepspeed --num_gpus 2 zero3_qkv_bias.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 zero3_qkv_bias.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator

TOLERANCE = 1e-3  # fp32: max abs logit difference


def greedy(model, ids):
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=False,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_logits=True,
    )
    return out.sequences[0, ids.shape[1] :].tolist(), torch.stack(out.logits).float().cpu()


def main():
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)  # the same weights on every rank
    config = transformers.GPTNeoConfig(
        vocab_size=1024,
        hidden_size=256,
        num_layers=2,
        num_heads=4,
        intermediate_size=1024,
        max_position_embeddings=256,
        window_size=256,
        attention_types=[[["global", "local"], 1]],
    )
    model = transformers.GPTNeoForCausalLM(config).to(device).eval()
    ids = torch.arange(10, 74, device=device).unsqueeze(0)
    with torch.no_grad():
        expected_tokens, expected = greedy(model, ids)
    ds_config = {
        "train_batch_size": int(os.environ.get("WORLD_SIZE", "1")),
        "zero_optimization": {"stage": 3},
        "hybrid_engine": {"enabled": True, "max_out_tokens": 256},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config)
    biases = []  # QKV GEMM calls handed a bias: GPT-Neo's q/k/v projections have none

    def record(module, args, kwargs):
        if kwargs.get("bias") is not None:
            biases.append(kwargs["bias"].abs().max().item())

    for container in engine._inference_containers:
        container.module.attention.qkv_func.register_forward_pre_hook(record, with_kwargs=True)
    engine.eval()
    with torch.no_grad():
        tokens, logits = greedy(engine, ids)
    engine.train()
    diff = (logits - expected).abs().max().item()
    rank = int(os.environ.get("RANK", "0"))
    if rank != 0:  # every rank judges; rank 0 prints, another rank only when it finds the bug
        if biases or not diff <= TOLERANCE:
            print(f"rank {rank}: BUG: QKV GEMM calls handed a bias: {len(biases)}, logits max abs diff {diff:.3g}")
            return 1
        return 0
    print(
        f"QKV GEMM calls handed a bias: {len(biases)} (max abs {max(biases, default=0):.3g}); "
        f"Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, logits max abs diff {diff:.3g}"
    )
    if biases or not diff <= TOLERANCE:
        print("BUG: the QKV GEMM adds a bias the model does not have")
        return 1
    print("OK: no bias added, the Hybrid Engine computes the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
