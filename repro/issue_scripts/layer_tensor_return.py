"""Injected GPT-NeoX, OPT and GPT-J layers return a tuple; from Transformers 5.2 (GPT-NeoX), 5.4 (OPT) and 5.24
(GPT-J) every Hybrid Engine / kernel injection generate fails (`'tuple' object has no attribute 'size'`).

A tiny model of the architecture (random weights): greedy generate through the Hybrid Engine against Hugging Face
on the same weights. Exit status 1: the bug (the generate fails on the tuple, or the logits differ), 0: it runs and
the logits agree. OPT crashes alike, but with the fix its decode steps still run at the wrong positions from
Transformers 5.4 (a second bug, not patched yet), so its run fails both ways.

GPU: deepspeed --num_gpus 1 layer_tensor_return.py --arch gpt-neox
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 layer_tensor_return.py --arch gpt-neox (DeepSpeed's CPU build
     has no transformer_inference kernels; see the issue text for what stands in for them)
"""

import argparse
import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator

TOLERANCE = 1e-3  # fp32: max abs logit difference (the injected MLP's tanh GELU is ~1e-4 from the exact one here)
CONFIGS = {
    "gpt-neox": lambda: transformers.GPTNeoXConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=2,
                                                   num_attention_heads=4, intermediate_size=1024,
                                                   max_position_embeddings=256, rotary_pct=0.25),
    "opt": lambda: transformers.OPTConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=2,
                                          num_attention_heads=4, ffn_dim=1024, max_position_embeddings=256),
    "gpt-j": lambda: transformers.GPTJConfig(vocab_size=1024, n_embd=256, n_layer=2, n_head=4, rotary_dim=16,
                                             n_positions=256),
}  # fmt: skip


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
    parser.add_argument("--arch", choices=sorted(CONFIGS), default="gpt-neox")
    args = parser.parse_args()
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[args.arch]()).to(device).eval()
    if args.arch == "gpt-neox":  # what DeepSpeed's GPT-NeoX policy reads, gone from the attention since 4.49
        for layer in model.gpt_neox.layers:
            layer.attention.hidden_size = model.config.hidden_size
            layer.attention.num_attention_heads = model.config.num_attention_heads
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
    if not engine._inference_containers:
        print("not reproduced: the Hybrid Engine injected no layer (nothing to return a tuple)")
        return 2
    engine.eval()
    try:
        with torch.no_grad():
            tokens, logits = greedy(engine, ids)
    except AttributeError as exc:
        print(f"BUG: the Hybrid Engine's generate fails: AttributeError: {exc}")
        return 1
    diff = (logits - expected).abs().max().item()
    print(f"Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, logits max abs diff {diff:.3g}")
    if not diff <= TOLERANCE:
        print("BUG: the Hybrid Engine does not compute the model")
        return 1
    print("OK: the Hybrid Engine computes the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
