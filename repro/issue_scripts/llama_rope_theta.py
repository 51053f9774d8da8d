"""Hybrid Engine / kernel injection: Llama on transformers 4.31 and 4.32 (Llama-2's first releases, DeepSpeed-Chat's
oldest) fails at `deepspeed.initialize`: `AttributeError: 'LlamaAttention' object has no attribute 'rope_theta'`.

Neither LlamaConfig nor LlamaAttention has `rope_theta` before transformers 4.33 (the attention builds its rotary
embedding with a base of 10000), and the Llama container's `_get_rope_theta` falls through to
`self_attn.rope_theta`. A tiny Llama (random weights) through the Hybrid Engine (ZeRO-2 by default): its greedy
generate against the model's own. Exit status 1: the bug (initialize or generate raises, or the logits differ), 0: the
Hybrid Engine computes the model. On transformers >= 4.33 it prints OK with or without the fix (nothing to show).

GPU: deepspeed --num_gpus 1 llama_rope_theta.py [--zero 1|2|3]   (with transformers==4.32.1)
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 llama_rope_theta.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import argparse
import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator

TOLERANCE = 1e-3  # fp32: max abs score difference
CONFIG = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
              intermediate_size=128, max_position_embeddings=64)  # fmt: skip


def greedy(model, ids):
    # output_scores, not output_logits (transformers >= 4.38): the same processors run on both sides
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=False,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_scores=True,
    )
    return out.sequences[0, ids.shape[1] :].tolist(), torch.stack(out.scores).float().cpu()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--zero", type=int, default=2, choices=(1, 2, 3))
    args = parser.parse_args()
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).to(device).eval()
    attention = model.model.layers[0].self_attn
    base = getattr(getattr(attention, "rotary_emb", None), "base", "none")
    print(f"transformers {transformers.__version__}: LlamaConfig has rope_theta: "
          f"{hasattr(model.config, 'rope_theta')}, LlamaAttention has rope_theta: "
          f"{hasattr(attention, 'rope_theta')}, its rotary embedding's base: {base}")  # fmt: skip
    ids = torch.arange(5, 13, device=device).unsqueeze(0)
    with torch.no_grad():
        expected_tokens, expected_scores = greedy(model, ids)
    ds_config = {
        "train_batch_size": int(os.environ.get("WORLD_SIZE", "1")),
        "zero_optimization": {"stage": args.zero},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 64},
    }
    try:
        engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
        engine.eval()
        with torch.no_grad():
            tokens, scores = greedy(engine, ids)
    except Exception as exc:  # noqa: BLE001 - what the Hybrid Engine raises is the finding
        print(f"BUG: the Hybrid Engine on a Llama of transformers {transformers.__version__}: "
              f"{type(exc).__name__}: {exc}")  # fmt: skip
        return 1
    # min_new_tokens masks the end token with -inf on both sides: compare where the model's scores are finite
    finite = torch.isfinite(expected_scores)
    same_masked = torch.equal(finite, torch.isfinite(scores))
    diff = (scores[finite] - expected_scores[finite]).abs().max().item()
    print(f"Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, scores max abs diff {diff:.3g} where "
          f"finite, the same masked: {same_masked}")  # fmt: skip
    if tokens != expected_tokens or not same_masked or not diff <= TOLERANCE:
        print("BUG: the Hybrid Engine's Llama does not compute the model")
        return 1
    print(f"OK: the Hybrid Engine computes the Llama on transformers {transformers.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
