"""Hybrid Engine tensor-parallel generation with an mpu: each rank trains its Megatron slice of the layers, and
generate() must compute the whole model.

A tiny model, random weights, on 2 ranks: an mpu with both ranks in one tensor-parallel group (each its own
data-parallel group) and inference_tp_size 2. Each rank keeps its slice of every layer's Linears, as a
Megatron-style trainer hands them to DeepSpeed: Q, K, V (GPT-NeoX: the fused QKV, its heads) and the MLP's first
projection by output rows, the attention output and the MLP's last projection by input columns (their biases
whole). Greedy generate through the Hybrid Engine, with return_dict_in_generate=True to read the logits, is
compared with Hugging Face on the whole model. Records the query weight every injected attention holds when it is
called. Exit status 1: the bug (a crash, or logits that differ), 0: the Hybrid Engine computes the model.

  --arch gpt-neo --zero 3: separate Q, K, V under pinned ZeRO-3 (the layers must keep their copies)
  --arch gpt-neox --zero 2: GPT-NeoX's head-interleaved QKV (the layout transform must split the rank's heads)
  --arch bloom --zero 3: BLOOM's head-interleaved QKV under pinned ZeRO-3 (the copy must keep the rank's heads;
    Transformers 4.43: DeepSpeed's BLOOM container refuses newer ones)

GPU: deepspeed --num_gpus 2 tensor_parallel_mpu.py --arch gpt-neo --zero 3
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 tensor_parallel_mpu.py ... (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import argparse
import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.transformer.inference.ds_attention import DeepSpeedSelfAttention

TOLERANCE = 1e-3  # fp32: max abs logit difference
TP = 2
# Per architecture: the model, its layers, the Linears split by output rows (column-parallel) and by input
# columns (row-parallel) within a layer.
ARCHS = {
    "gpt-neo": (
        lambda: transformers.GPTNeoForCausalLM(transformers.GPTNeoConfig(
            vocab_size=1024, hidden_size=256, num_layers=2, num_heads=4, intermediate_size=1024,
            max_position_embeddings=256, window_size=256, attention_types=[[["global", "local"], 1]])),
        lambda model: model.transformer.h,
        ("attn.attention.q_proj", "attn.attention.k_proj", "attn.attention.v_proj", "mlp.c_fc"),
        ("attn.attention.out_proj", "mlp.c_proj"),
    ),
    "gpt-neox": (
        lambda: transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
            vocab_size=1024, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024,
            max_position_embeddings=256, rotary_pct=0.25)),
        lambda model: model.gpt_neox.layers,
        ("attention.query_key_value", "mlp.dense_h_to_4h"),
        ("attention.dense", "mlp.dense_4h_to_h"),
    ),
    "bloom": (
        lambda: transformers.BloomForCausalLM(transformers.BloomConfig(
            vocab_size=1024, hidden_size=256, n_layer=2, n_head=4)),
        lambda model: model.transformer.h,
        ("self_attention.query_key_value", "mlp.dense_h_to_4h"),
        ("self_attention.dense", "mlp.dense_4h_to_h"),
    ),
}  # fmt: skip


class MPU:
    """Every rank in one tensor-parallel group, each rank its own data-parallel group."""

    def __init__(self):
        self.rank, self.world_size = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
        self.tp_group = deepspeed.comm.new_group(list(range(self.world_size)))
        groups = [deepspeed.comm.new_group([r]) for r in range(self.world_size)]  # every rank creates every group
        self.dp_group = groups[self.rank]

    def get_model_parallel_rank(self):
        return self.rank

    def get_model_parallel_world_size(self):
        return self.world_size

    def get_model_parallel_group(self):
        return self.tp_group

    def get_data_parallel_rank(self):
        return 0

    def get_data_parallel_world_size(self):
        return 1

    def get_data_parallel_group(self):
        return self.dp_group


def keep_slice(layer, path, dim, rank):
    """Replaces the Linear at `path` by this rank's slice along `dim` (0: output rows with their bias; 1: input
    columns, the bias whole)."""
    whole = layer.get_submodule(path)
    weight = whole.weight.detach().chunk(TP, dim=dim)[rank]
    bias = whole.bias.detach() if whole.bias is not None else None
    if bias is not None and dim == 0:
        bias = bias.chunk(TP)[rank]
    part = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device)
    with torch.no_grad():
        part.weight.copy_(weight)
        if bias is not None:
            part.bias.copy_(bias)
    parent, _, name = path.rpartition(".")
    setattr(layer.get_submodule(parent), name, part)


def greedy(model, ids):
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4,
                         do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                         output_logits=True)  # fmt: skip
    return out.sequences[0, ids.shape[1] :].tolist(), torch.stack([step[0].float().cpu() for step in out.logits])


def record_query_weights(shapes):
    """At each call of an injected attention: the heads it computes per rank and its query weight (fused QKV:
    `attn_qkvw`, 3 x hidden / TP rows per rank; separate Q: `attn_qw`, hidden / TP rows)."""

    def hook(module, args):
        if isinstance(module, DeepSpeedSelfAttention):
            weight = module.attn_qkvw if module.attn_qkvw is not None else module.attn_qw
            shapes.append((module.num_attention_heads_per_partition, tuple(weight.shape)))

    return torch.nn.modules.module.register_module_forward_pre_hook(hook)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", choices=sorted(ARCHS), default="gpt-neo")
    parser.add_argument("--zero", type=int, choices=(2, 3), default=3)
    args, _ = parser.parse_known_args()  # the launcher may add --local_rank
    build, layers_of, columns, rows = ARCHS[args.arch]
    deepspeed.init_distributed()
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    model = build().to(device).eval()
    ids = torch.arange(10, 74, device=device).unsqueeze(0)
    with torch.no_grad():
        expected_tokens, expected = greedy(model, ids)
    for layer in layers_of(model):
        for path in columns:
            keep_slice(layer, path, 0, rank)
        for path in rows:
            keep_slice(layer, path, 1, rank)
        if args.arch == "gpt-neox":  # read by DeepSpeed's policy, gone from Transformers 4.49 (patch 0000)
            layer.attention.hidden_size = model.config.hidden_size
            layer.attention.num_attention_heads = model.config.num_attention_heads
    ds_config = {
        "train_batch_size": 1,
        "zero_optimization": {"stage": args.zero, "stage3_param_persistence_threshold": 0},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 256, "inference_tp_size": TP, "pin_parameters": True},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters(), mpu=MPU())
    shapes = []
    record_query_weights(shapes)
    engine.eval()
    try:
        with torch.no_grad():
            tokens, logits = greedy(engine.module, ids)
    except (RuntimeError, AttributeError) as exc:
        tokens, logits = None, exc
    for heads, shape in sorted(set(shapes)):
        print(f"rank {rank}: injected attention for {heads} heads per rank holds a query weight of shape "
              f"{list(shape)}")  # fmt: skip
    if tokens is None:
        print(f"rank {rank}: BUG: tensor-parallel generate fails: {type(logits).__name__}: {logits}"[:400])
        return 1
    diff = (logits - expected).abs().max().item()
    print(f"rank {rank}: Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, "
          f"logits max abs diff {diff:.3g}")  # fmt: skip
    if not diff <= TOLERANCE:
        print(f"rank {rank}: BUG: tensor-parallel generate does not compute the model")
        return 1
    print(f"rank {rank}: OK: tensor-parallel generate computes the model from each rank's slice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
