"""GPT-NeoX kernel injection / Hybrid Engine ignores hidden_act (a ReLU model is computed with GELU), crashes
on attention_bias=False (AttributeError: 'NoneType' object has no attribute 'shape'), and on Transformers 4.45
to 4.51 injects no layer at all (the policy imports GPTNeoXLayer from the top-level transformers package, which
does not export it there).

A tiny GPT-NeoX with `--setting` (default hidden_act=relu; `default`: Transformers' defaults), random weights:
the Hybrid Engine must build one inference container per layer, and greedy generate through it is compared with
Hugging Face on the same weights. Exit status 1: the bug (no container, so generate ran the Hugging Face layers;
the logits differ; or a crash inside the Hybrid Engine), 0: the logits agree or DeepSpeed refuses the
configuration by name.

GPU: deepspeed --num_gpus 1 gptneox_config.py [--setting attention_bias|default]
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 gptneox_config.py (DeepSpeed's CPU build has no
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
    "relu": {"hidden_act": "relu"},
    "attention_bias": {"attention_bias": False},
    "default": {},
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
    parser.add_argument("--setting", choices=SETTINGS, default="relu")
    setting = parser.parse_args().setting
    deepspeed.init_distributed()
    try:
        from transformers import GPTNeoXLayer  # noqa: F401  (what DeepSpeed's GPTNEOXLayerPolicy imports)

        exported = "exports"
    except ImportError:
        exported = "does not export"
    print(f"transformers {transformers.__version__} {exported} GPTNeoXLayer from its top-level package")
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(
        vocab_size=1024,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=256,
        initializer_range=0.1,
        **SETTINGS[setting],
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
    try:
        engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    except ValueError as exc:
        print(f"OK: DeepSpeed refuses the configuration: {exc}")
        return 0
    containers = len(engine._inference_containers)
    print(f"Hybrid Engine inference containers: {containers} (the model has {config.num_hidden_layers} layers)")
    if containers == 0:
        print("BUG: no GPT-NeoX layer was injected: generate runs the Hugging Face layers, without a word")
        return 1
    try:
        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, ids)
    except AttributeError as exc:
        print(f"BUG: the Hybrid Engine accepted {setting} and its eval/generate fails: AttributeError: {exc}")
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
