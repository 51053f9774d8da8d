"""Hybrid Engine / kernel injection computes GPT-J with GELU whatever its activation_function.

GPT-J's MLP reads the attention's LayerNorm, so DeepSpeed runs the injected MLP through fused_gemm_gelu, whose
activation is GELU whatever the config says.

A tiny GPT-J with activation_function=relu, random weights: greedy generate through the Hybrid Engine against
Hugging Face on the same weights. Exit status 1: the bug (the logits differ), 0: the logits agree or DeepSpeed
refuses the configuration by name.

GPU: deepspeed --num_gpus 1 gptj_config.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 gptj_config.py (DeepSpeed's CPU build has no
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
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4,
                         do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                         output_logits=True)  # fmt: skip
    return out.sequences[0, ids.shape[1] :].tolist(), torch.stack(out.logits).float().cpu()


def main():
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    config = transformers.GPTJConfig(vocab_size=1024, n_embd=256, n_layer=2, n_head=4, n_positions=256,
                                     rotary_dim=16, initializer_range=0.1, activation_function="relu")  # fmt: skip
    model = transformers.GPTJForCausalLM(config).to(device).eval()
    ids = torch.arange(10, 42, device=device).unsqueeze(0)
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
    with torch.no_grad():
        tokens, logits = greedy(engine, ids)
    diff = (logits - expected).abs().max().item()
    print(
        f"Hybrid Engine vs Hugging Face (relu): tokens {tokens} vs {expected_tokens}, logits max abs diff {diff:.3g}"
    )
    if not diff <= TOLERANCE:
        print("BUG: the Hybrid Engine accepted activation_function=relu and computes another model")
        return 1
    print("OK: the Hybrid Engine computes the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
