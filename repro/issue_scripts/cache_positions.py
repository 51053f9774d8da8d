"""Injected layers leave the Transformers Cache empty; from Transformers 5.4 GPT-Neo (and OPT) place each decode step
by that Cache's length, and GPT-J on 5.2 to 5.23 sizes each decode step's attention mask by it, so every generated
token after the first is computed wrong, silently.

A tiny GPT-Neo or GPT-J (`--arch`; random weights), ZeRO-2 on one rank: greedy generate through the Hybrid Engine
against Hugging Face on the same weights. Exit status 1: the bug (the logits differ from the second token on), 0: the
logits agree.

GPU: deepspeed --num_gpus 1 cache_positions.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 cache_positions.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import argparse
import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator

TOLERANCE = 1e-3  # fp32: max abs logit difference (the injected MLP's tanh GELU is ~1e-4 from gelu_new here)


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


CONFIGS = {
    "gpt-neo": lambda: transformers.GPTNeoConfig(vocab_size=1024, hidden_size=256, num_layers=2, num_heads=4,
                                                 intermediate_size=1024, max_position_embeddings=256,
                                                 attention_types=[[["global", "local"], 1]], window_size=256),
    "gpt-j": lambda: transformers.GPTJConfig(vocab_size=1024, n_embd=256, n_layer=2, n_head=4, rotary_dim=16,
                                             n_positions=256),
}  # fmt: skip


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", choices=sorted(CONFIGS), default="gpt-neo")
    args = parser.parse_args()
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[args.arch]()).to(device).eval()
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
    print(f"{args.arch} on transformers {transformers.__version__}; Hybrid Engine inference containers: "
          f"{len(engine._inference_containers)}")  # fmt: skip
    engine.eval()
    with torch.no_grad():
        tokens, logits = greedy(engine, ids)
    first, rest = (logits[0] - expected[0]).abs().max().item(), (logits[1:] - expected[1:]).abs().max().item()
    print(f"Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, logits max abs diff {first:.3g} at "
          f"the first token, {rest:.3g} after it")  # fmt: skip
    if not (first <= TOLERANCE and rest <= TOLERANCE):
        print("BUG: the Hybrid Engine does not compute the model" + (" after the first token" if first <= TOLERANCE
                                                                        else ""))  # fmt: skip
        return 1
    print("OK: the Hybrid Engine computes the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
