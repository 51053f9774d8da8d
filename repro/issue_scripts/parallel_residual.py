"""GPT-NeoX with use_parallel_residual=False runs as a parallel-residual model under kernel injection / the
Hybrid Engine (DeepSpeed #3453).

A tiny GPT-NeoX with use_parallel_residual=False, random weights: greedy generate through the Hybrid Engine against
Hugging Face on the same weights. Exit status 1: the bug (logits differ), 0: they agree.

GPU: deepspeed --num_gpus 1 parallel_residual.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 parallel_residual.py (DeepSpeed's CPU build has no
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
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(
        vocab_size=1024,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=256,
        use_parallel_residual=False,
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
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 256},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    engine.eval()
    with torch.no_grad():
        tokens, logits = greedy(engine, ids)
    diff = (logits - expected).abs().max().item()
    print(f"Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, logits max abs diff {diff:.3g}")
    if not diff <= TOLERANCE:
        print("BUG: the Hybrid Engine does not compute the model (sequential residual computed as parallel)")
        return 1
    print("OK: the Hybrid Engine computes the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
