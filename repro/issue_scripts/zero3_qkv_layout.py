"""ZeRO-3 Hybrid Engine: the QKV layout conversion for inference is discarded (DeepSpeed #8391), and with
PR #8392's `modifier_rank=0` alone, a loop that calls train() before its first eval() (or eval() twice) runs
on permuted QKV weights.

A tiny GPT-NeoX (random weights) under ZeRO-3 on 2 ranks: greedy generate through the Hybrid Engine
against Hugging Face on the same weights, in DeepSpeed-Chat's order (eval, generate, train) or with
`--order train-first`. Exit status 1: the bug (logits differ), 0: they agree.

GPU: deepspeed --num_gpus 2 zero3_qkv_layout.py [--order train-first]
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 zero3_qkv_layout.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import argparse
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
    parser = argparse.ArgumentParser()
    parser.add_argument("--order", choices=("deepspeed-chat", "train-first"), default="deepspeed-chat")
    order = parser.parse_args().order
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)  # the same weights on every rank
    config = transformers.GPTNeoXConfig(
        vocab_size=1024,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=256,
    )
    model = transformers.GPTNeoXForCausalLM(config).to(device).eval()
    for layer in model.gpt_neox.layers:  # read by DeepSpeed's policy, gone from Transformers 4.49 (patch 0000)
        layer.attention.hidden_size = config.hidden_size
        layer.attention.num_attention_heads = config.num_attention_heads
    ids = torch.arange(10, 74, device=device).unsqueeze(0)
    with torch.no_grad():
        expected_tokens, expected = greedy(model, ids)
    ds_config = {
        "train_batch_size": int(os.environ.get("WORLD_SIZE", "1")),
        "zero_optimization": {"stage": 3},
        "hybrid_engine": {"enabled": True, "max_out_tokens": 256},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config)
    if order == "train-first":
        engine.train()  # as tests/unit/hybrid_engine/test_he_lora.py does right after initialize
    engine.eval()
    with torch.no_grad():
        tokens, logits = greedy(engine, ids)
    engine.train()
    diff = (logits - expected).abs().max().item()
    if int(os.environ.get("RANK", "0")) != 0:  # every rank judges; rank 0 prints
        return 1 if not diff <= TOLERANCE else 0
    print(
        f"Hybrid Engine vs Hugging Face ({order}): tokens {tokens} vs {expected_tokens}, "
        f"logits max abs diff {diff:.3g}"
    )
    if not diff <= TOLERANCE:
        print("BUG: the Hybrid Engine generates with QKV weights in the wrong layout")
        return 1
    print("OK: the Hybrid Engine computes the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
