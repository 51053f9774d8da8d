"""GPT-Neo (and GPT-NeoX) kernel injection / Hybrid Engine fails at the second generated token on Transformers 4.45
to 4.53: ValueError: not enough values to unpack (expected 2, got 1) in DynamicCache.from_legacy_cache. The injected
layer hands back its own key and value where those versions return the Cache they passed every layer.

A tiny GPT-Neo, random weights: greedy generate through the Hybrid Engine against Hugging Face on the same weights.
Exit status 1: the bug (generate fails on the cache, or the logits differ), 0: the logits agree.

GPU: deepspeed --num_gpus 1 gptneo_cache.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 gptneo_cache.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator

TOLERANCE = 1e-3  # fp32: max abs logit difference (an exact GELU for gelu_new's tanh form is ~1e-4 here)


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
    config = transformers.GPTNeoConfig(
        vocab_size=1024,
        hidden_size=256,
        num_layers=2,
        num_heads=4,
        intermediate_size=1024,
        max_position_embeddings=256,
        attention_types=[[["global", "local"], 1]],
        window_size=256,
    )
    model = transformers.GPTNeoForCausalLM(config).to(device).eval()
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
    print(f"transformers {transformers.__version__}; Hybrid Engine inference containers: "
          f"{len(engine._inference_containers)}")  # fmt: skip
    engine.eval()
    try:
        with torch.no_grad():
            tokens, logits = greedy(engine, ids)
    except ValueError as exc:
        print(f"BUG: the Hybrid Engine's generate fails on the cache the injected layers hand back: {exc}")
        return 1
    diff = (logits - expected).abs().max().item()
    print(f"Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, logits max abs diff {diff:.3g}")
    if not diff <= TOLERANCE:
        print("BUG: the Hybrid Engine computes another model")
        return 1
    print("OK: the Hybrid Engine generates the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
