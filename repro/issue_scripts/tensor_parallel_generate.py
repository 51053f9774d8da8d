"""Hybrid Engine tensor-parallel generation (inference_tp_size 2, no mpu, as DeepSpeed-Chat) hands the injected
layers unsliced weights.

A tiny GPT-Neo, random weights, ZeRO-3 with pinned parameters on 2 ranks, inference_tp_size 2 and no mpu, as
DeepSpeed-Chat's OPT-13B script runs it. Records the query weight every injected attention holds when it is
called, against the slice of hidden / 2 rows a rank of a 2-way tensor-parallel layer holds, and compares the
logits of greedy generate through the Hybrid Engine with Hugging Face on the same weights. Exit status 1: the
bug (a weight that is not the rank's slice, a crash, or logits that differ), 0: every weight handed over is
the rank's slice and the logits agree, or DeepSpeed refuses the configuration by name.

GPU: deepspeed --num_gpus 2 tensor_parallel_generate.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 tensor_parallel_generate.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.transformer.inference.ds_attention import DeepSpeedSelfAttention

TOLERANCE = 1e-3  # fp32: max abs logit difference
TP = 2


def greedy(model, lm_head, ids):
    """Generated tokens and each step's last-position logits, read from the LM head (the Hybrid Engine's
    tensor-parallel generate returns only the token ids of this rank's prompts)."""
    logits = []
    hook = lm_head.register_forward_hook(lambda mod, args, out: logits.append(out[0, -1].float().cpu()))
    try:
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4,
                             do_sample=False, pad_token_id=0)  # fmt: skip
    finally:
        hook.remove()
    return out[0, ids.shape[1] :].tolist(), torch.stack(logits)


def record_query_weights(shapes):
    """Records, at each call of an injected attention, the heads it computes per rank and its query weight
    (GPT-Neo's q, k and v are separate: `attn_qw`, merged with k and v inside the attention under ZeRO-3)."""

    def hook(module, args):
        if isinstance(module, DeepSpeedSelfAttention):
            shapes.append((module.num_attention_heads_per_partition, tuple(module.attn_qw.shape)))

    return torch.nn.modules.module.register_module_forward_pre_hook(hook)


def main():
    deepspeed.init_distributed()
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    config = transformers.GPTNeoConfig(
        vocab_size=1024,
        hidden_size=256,
        num_layers=2,
        num_heads=4,
        intermediate_size=1024,
        max_position_embeddings=256,
        window_size=256,
        attention_types=[[["global", "local"], 1]],
    )
    model = transformers.GPTNeoForCausalLM(config).to(device).eval()
    ids = torch.arange(10, 74, device=device).unsqueeze(0)
    with torch.no_grad():
        expected_tokens, expected = greedy(model, model.lm_head, ids)
    ds_config = {
        "train_batch_size": int(os.environ.get("WORLD_SIZE", "1")),
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {
            "enabled": True,
            "max_out_tokens": 256,
            "inference_tp_size": TP,
            "pin_parameters": True,
            "tp_gather_partition_size": 1,
        },
    }
    try:
        engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    except ValueError as exc:
        print(f"rank {rank}: OK: DeepSpeed refuses the configuration: {exc}")
        return 0
    shapes = []
    record_query_weights(shapes)
    engine.eval()
    try:
        with torch.no_grad():
            tokens, logits = greedy(engine.module, engine.module.lm_head, ids)
    except RuntimeError as exc:
        tokens, logits = None, exc
    slice_rows = config.hidden_size // TP
    for heads, shape in sorted(set(shapes)):
        print(f"rank {rank}: injected attention for {heads} heads per rank holds a query weight of shape "
              f"{list(shape)} (this rank's slice: {slice_rows} rows of {config.hidden_size})")  # fmt: skip
    unsliced = [shape for _, shape in shapes if shape != (slice_rows, config.hidden_size)]
    if tokens is None:
        print(f"rank {rank}: BUG: tensor-parallel generate fails: {type(logits).__name__}: {logits}"[:400])
        return 1
    diff = (logits - expected).abs().max().item()
    print(f"rank {rank}: Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, "
          f"logits max abs diff {diff:.3g}")  # fmt: skip
    if unsliced or not shapes or not diff <= TOLERANCE:
        print(f"rank {rank}: BUG: tensor-parallel generate does not compute the model")
        return 1
    print(f"rank {rank}: OK: every injected attention held its slice and the logits agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
