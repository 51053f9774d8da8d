"""Llama kernel injection / Hybrid Engine silently computes a different model for hidden_act != silu (and
attention_bias, mlp_bias).

A tiny Llama with `--setting` (default hidden_act=gelu), random weights: greedy generate through the Hybrid
Engine against Hugging Face on the same weights. Exit status 1: the bug (the logits differ, or a crash
inside the Hybrid Engine), 0: the logits agree or DeepSpeed refuses the configuration by name.

GPU: deepspeed --num_gpus 1 llama_unservable_config.py [--setting attention_bias]
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 llama_unservable_config.py (DeepSpeed's CPU build has no
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
SETTINGS = {
    "hidden_act": {"hidden_act": "gelu"},
    "attention_bias": {"attention_bias": True},
    "mlp_bias": {"mlp_bias": True},
}


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
    parser.add_argument("--setting", choices=SETTINGS, default="hidden_act")
    setting = parser.parse_args().setting
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=1024,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=512,
        max_position_embeddings=256,
        **SETTINGS[setting],
    )
    model = transformers.LlamaForCausalLM(config).to(device).eval()
    with torch.no_grad():  # Transformers initialises biases to zero: a dropped bias would go unseen
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)
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
    try:
        engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    except ValueError as exc:
        print(f"OK: DeepSpeed refuses the configuration: {exc}")
        return 0
    engine.eval()
    try:
        with torch.no_grad():
            tokens, logits = greedy(engine, ids)
    except RuntimeError as exc:
        print(f"BUG: the Hybrid Engine accepted {setting} and its generate fails: RuntimeError: {exc}")
        return 1
    diff = (logits - expected).abs().max().item()
    print(
        f"Hybrid Engine vs Hugging Face ({setting}): tokens {tokens} vs {expected_tokens}, "
        f"logits max abs diff {diff:.3g}"
    )
    if not diff <= TOLERANCE:
        print(f"BUG: the Hybrid Engine accepted {setting} and computes another model")
        return 1
    print("OK: the Hybrid Engine computes the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
