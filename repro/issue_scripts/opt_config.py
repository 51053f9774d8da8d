"""Hybrid Engine computes OPT with ReLU whatever its activation_function, crashes on enable_bias=False (TypeError:
expected Tensor as element 0 in argument 0, but got NoneType) and on layer_norm_elementwise_affine=False (TypeError:
'NoneType' object is not iterable), and computes post-LayerNorm OPT (opt-350m) with its LayerNorms swapped, under
ZeRO-3 without its q/k/v biases, and, where DeepSpeed's PyTorch attention runs, with its decode steps taken for
prompts.

A tiny OPT with `--setting` (default activation_function=gelu), random weights: greedy generate through the
Hybrid Engine against Hugging Face on the same weights. Exit status 1: the bug (the logits differ, or a crash
inside DeepSpeed), 0: the logits agree or DeepSpeed refuses the configuration by name, 2: this Transformers
keeps OPT on the native path (DeepSpeed injects OPT only for decoders without Cache objects: Transformers < 4.49).

GPU: deepspeed --num_gpus 1 opt_config.py [--setting no_bias|layer_norm_not_affine|post_layer_norm] [--zero 3]
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 opt_config.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import argparse
import inspect
import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator

TOLERANCE = 1e-3  # fp32: max abs logit difference
SETTINGS = {
    "gelu": {"activation_function": "gelu"},
    "no_bias": {"enable_bias": False},
    "layer_norm_not_affine": {"layer_norm_elementwise_affine": False},
    "post_layer_norm": {"do_layer_norm_before": False},
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
    parser.add_argument("--setting", choices=SETTINGS, default="gelu")
    parser.add_argument("--zero", type=int, choices=(2, 3), default=2, help="ZeRO stage")
    args = parser.parse_args()
    setting = args.setting
    forward = inspect.signature(transformers.models.opt.modeling_opt.OPTDecoderLayer.forward).parameters
    if "cache_position" in forward or "past_key_values" in forward:
        print(f"Transformers {transformers.__version__}: the Hybrid Engine keeps OPT native; run with < 4.49")
        return 2
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
        init_std=0.1,
        **SETTINGS[setting],
    )
    model = transformers.OPTForCausalLM(config).to(device).eval()
    with torch.no_grad():  # Transformers initialises biases to 0 and LayerNorms to 1 and 0: a dropped bias or
        for name, p in model.named_parameters():  # swapped LayerNorms would go unseen
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)
            elif "layer_norm" in name:
                p.normal_(1.0, 0.1)
    ids = torch.arange(10, 74, device=device).unsqueeze(0)
    with torch.no_grad():
        expected_tokens, expected = greedy(model, ids)
    ds_config = {
        "train_batch_size": int(os.environ.get("WORLD_SIZE", "1")),
        "zero_optimization": {"stage": args.zero},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 256},
    }
    try:
        engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    except ValueError as exc:
        print(f"OK: DeepSpeed refuses the configuration: {exc}")
        return 0
    except TypeError as exc:
        print(f"BUG: the Hybrid Engine accepted {setting} and its initialize fails: TypeError: {exc}")
        return 1
    try:
        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, ids)
    except (TypeError, ValueError, RuntimeError) as exc:
        print(f"BUG: the Hybrid Engine accepted {setting} and its eval/generate fails: {type(exc).__name__}: {exc}")
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
