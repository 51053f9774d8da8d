"""Hybrid Engine: engine.generate() fails with AttributeError '_generate' when no inference container was built.

A tiny OPT, random weights: DeepSpeed 0.19.8 keeps OPT's layers native with Transformers >= 4.49 (its injected
layer takes no Cache) and warns that rollout uses the model's native generate(). Greedy generate through
`engine.generate()` against Hugging Face on the same weights. Exit status 1: the bug (engine.generate() fails,
or its tokens differ), 0: engine.generate() generates what the model generates.

GPU: deepspeed --num_gpus 1 engine_generate_without_containers.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 engine_generate_without_containers.py (no DeepSpeed kernel is
     needed: no layer is injected)
"""

import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator


def greedy(generate, ids):
    out = generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4, do_sample=False,
                   pad_token_id=1)  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


def main():
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    config = transformers.OPTConfig(
        vocab_size=1024,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        ffn_dim=1024,
        max_position_embeddings=256,
        word_embed_proj_dim=256,
    )
    model = transformers.OPTForCausalLM(config).to(device).eval()
    ids = torch.arange(10, 74, device=device).unsqueeze(0)
    with torch.no_grad():
        expected = greedy(model.generate, ids)
    ds_config = {
        "train_batch_size": int(os.environ.get("WORLD_SIZE", "1")),
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 256},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    engine.eval()
    try:
        with torch.no_grad():
            tokens = greedy(engine.generate, ids)
    except AttributeError as exc:
        print(f"BUG: engine.generate() fails: AttributeError: {exc}")
        return 1
    print(f"engine.generate() vs Hugging Face: tokens {tokens} vs {expected}")
    if tokens != expected:
        print("BUG: engine.generate() does not generate what the model generates")
        return 1
    print("OK: engine.generate() generates what the model generates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
