"""Hybrid Engine / kernel injection with Transformers >= 4.53: a left-padded prompt attends to its padding.

Transformers 4.53 hand GPT-NeoX and Llama layers a bool attention mask sized by their Cache; DeepSpeed's injected
attention adds any mask that is not int64 to the scores, and its layers never fill the Cache, so each decode step's
mask covers one key. DeepSpeed-Chat left-pads the shorter prompts of a batch.

A tiny Llama, random weights, a batch of two prompts whose first is left-padded (mask 0 over 3 tokens): greedy
generate through the Hybrid Engine against Hugging Face on the same weights, every row. Records the masks the first
injected attention was handed. Exit status 1: the bug (a row's logits differ), 0: every row agrees. Run it with
Transformers 4.53 (pip install transformers==4.53.0): from 4.54 the released Llama layer first fails on what it
returns, a separate bug.

GPU: deepspeed --num_gpus 1 left_padding.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 left_padding.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator

TOLERANCE = 1e-3  # fp32: max abs logit difference
PAD = 3


def greedy(model, ids, mask):
    out = model.generate(ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4, do_sample=False,
                         pad_token_id=0, return_dict_in_generate=True, output_logits=True)  # fmt: skip
    return out.sequences[:, ids.shape[1] :].tolist(), torch.stack(out.logits).float().cpu()


def record_masks(attention, masks):
    """The mask each call of the first injected attention was handed: dtype and the keys it covers."""

    def hook(module, args, kwargs):
        mask = args[1] if len(args) > 1 else kwargs.get("input_mask")
        masks.append("none" if mask is None else f"{str(mask.dtype).removeprefix('torch.')} over {mask.shape[-1]}")

    return attention.register_forward_pre_hook(hook, with_kwargs=True)


def main():
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=512, max_position_embeddings=256)  # fmt: skip
    model = transformers.LlamaForCausalLM(config).to(device).eval()
    ids = torch.arange(10, 26, device=device).repeat(2, 1)
    mask = torch.ones_like(ids)
    ids[0, :PAD], mask[0, :PAD] = 0, 0  # the first prompt left-padded, as DeepSpeed-Chat pads a batch's prompts
    with torch.no_grad():
        expected_tokens, expected = greedy(model, ids, mask)
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
    masks = []
    handle = record_masks(engine._inference_containers[0].module.attention, masks)
    try:
        with torch.no_grad():
            tokens, logits = greedy(engine, ids, mask)
    finally:
        handle.remove()
    print(f"masks the first injected attention was handed, per call: {', '.join(masks)}")
    ok = True
    for row, what in enumerate(("left-padded", "unpadded")):
        diff = (logits[:, row] - expected[:, row]).abs().max().item()
        print(f"{what} prompt: Hybrid Engine tokens {tokens[row]} vs Hugging Face {expected_tokens[row]}, "
              f"logits max abs diff {diff:.3g}")  # fmt: skip
        ok = ok and diff <= TOLERANCE
    if not ok:
        print("BUG: the Hybrid Engine's generate differs from the model on a left-padded batch")
        return 1
    print("OK: the Hybrid Engine generates the model on a left-padded batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
