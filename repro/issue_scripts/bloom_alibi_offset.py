"""Hybrid Engine with BLOOM on more than one data-parallel rank: every rank but 0 adds the wrong heads' ALiBi.

BloomSelfAttention hands the softmax kernel `head_offset = dist.get_rank() * heads per partition`: the global rank,
where ALiBi holds every head of the model and, without tensor parallelism, every rank holds every head.

A tiny BLOOM, random weights, ZeRO-2 on 2 ranks (inference_tp_size 1, as DeepSpeed-Chat runs it): each rank
generates greedily through the Hybrid Engine and compares with Hugging Face on the same weights; records the head
offset every injected attention hands the softmax. Exit status 1: the bug (a rank's logits differ, or its generate
fails), 0: every rank computes the model. Run it with Transformers 4.43 (pip install transformers==4.43.4):
DeepSpeed's BLOOM container refuses newer ones.

GPU: deepspeed --num_gpus 2 bloom_alibi_offset.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 bloom_alibi_offset.py (DeepSpeed's CPU build has no
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


def record_head_offsets(engine, offsets):
    """The ALiBi head offset each injected attention hands its softmax (BloomSelfAttention passes it by name)."""

    def hook(module, args, kwargs):
        offsets.add(kwargs["head_offset"])

    return [c.module.attention.softmax_func.register_forward_pre_hook(hook, with_kwargs=True)
            for c in engine._inference_containers]  # fmt: skip


def main():
    deepspeed.init_distributed()
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)  # the same weights on every rank
    config = transformers.BloomConfig(vocab_size=1024, hidden_size=256, n_layer=2, n_head=4)
    model = transformers.BloomForCausalLM(config).to(device).eval()
    ids = torch.arange(10, 26, device=device).unsqueeze(0)
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
    engine.eval()
    offsets = set()
    handles = record_head_offsets(engine, offsets)
    try:
        with torch.no_grad():
            tokens, logits = greedy(engine, ids)
        found = (
            f"tokens {tokens} vs {expected_tokens}, logits max abs diff {(logits - expected).abs().max().item():.3g}"
        )
        wrong = not (logits - expected).abs().max().item() <= TOLERANCE
    except RuntimeError as exc:  # the rank's own failure is its finding; the others still report theirs
        found, wrong = f"generate failed: {str(exc).splitlines()[0]}", True
    finally:
        for handle in handles:
            handle.remove()
    engine.train()
    every = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(every, (sorted(offsets), found, wrong))  # deepspeed.comm has it from 0.17
    if rank == 0:
        for r, (heads_from, what, _) in enumerate(every):
            print(f"rank {r}: ALiBi head offsets handed to the softmax {heads_from}; Hybrid Engine vs Hugging Face: "
                  f"{what}")  # fmt: skip
    if any(bad for *_, bad in every):
        if rank == 0:
            print("BUG: a data-parallel rank adds the wrong heads' ALiBi")
        return 1
    if rank == 0:
        print("OK: every rank computes the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
