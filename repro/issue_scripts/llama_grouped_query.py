"""Llama with grouped-query attention (Llama-2-70B, Llama-3) through the Hybrid Engine: accepted, then generate
fails on the shapes.

A tiny Llama with `--key-value-heads` of its 4 heads (default 2; 1: multi-query), random weights: greedy generate
through the Hybrid Engine (ZeRO-2; `--tp 2`: inference_tp_size 2 on two ranks, where each rank copies its part of the
fused QKV) against Hugging Face on the same weights. Exit status 1: the bug (a crash inside the Hybrid Engine, or
logits that differ), 0: the logits agree.

GPU: deepspeed --num_gpus 1 llama_grouped_query.py [--key-value-heads 1]
     deepspeed --num_gpus 2 llama_grouped_query.py --tp 2
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 llama_grouped_query.py (DeepSpeed's CPU build has no
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
    parser.add_argument("--key-value-heads", type=int, choices=(1, 2), default=2)
    parser.add_argument("--tp", type=int, choices=(1, 2), default=1, help="hybrid_engine.inference_tp_size")
    args = parser.parse_args()
    kv_heads = args.key_value_heads
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=1024,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        intermediate_size=512,
        max_position_embeddings=256,
    )
    model = transformers.LlamaForCausalLM(config).to(device).eval()
    ids = torch.arange(10, 74, device=device).unsqueeze(0)
    with torch.no_grad():
        expected_tokens, expected = greedy(model, ids)
    ds_config = {
        "train_batch_size": int(os.environ.get("WORLD_SIZE", "1")),
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 256, "inference_tp_size": args.tp},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    engine.eval()
    try:
        with torch.no_grad():
            tokens, logits = greedy(engine, ids)
    except (RuntimeError, IndexError) as exc:
        print(f"BUG: the Hybrid Engine accepted {kv_heads} key/value heads of 4 (inference_tp_size {args.tp}) and its "
              f"generate fails: {type(exc).__name__}: {exc}")  # fmt: skip
        return 1
    diff = (logits - expected).abs().max().item()
    print(f"Hybrid Engine vs Hugging Face ({kv_heads} key/value heads of 4): tokens {tokens} vs {expected_tokens}, "
          f"logits max abs diff {diff:.3g}")  # fmt: skip
    if not diff <= TOLERANCE:
        print("BUG: the Hybrid Engine computes another model")
        return 1
    print("OK: the Hybrid Engine computes the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
