"""Hybrid Engine: deepspeed.initialize freezes the model's output layer (lm_head; with tied embeddings, the input
embeddings): PPO's training steps never update it.

A tiny model (random weights, Llama by default: untied lm_head), AdamW with lr 1e-2 and no weight decay, as
DeepSpeed-Chat's step 3 trains its actor. The same model is initialized with the Hybrid Engine on; every parameter's
requires_grad is compared with what it was before, then one training step is taken and the output layer is compared
with what it was before the step. Exit status 1: the bug (a parameter was frozen, or the step left the output layer
as it was), 0: initialize left every parameter trainable and the step moved the output layer.

GPU: deepspeed --num_gpus 1 frozen_lm_head.py [--arch llama|opt|gpt-neox|gpt-neo|gpt-j|bloom] [--zero 1|2|3]
     [--workaround: set each parameter's requires_grad again after initialize, as a user can today]
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 frozen_lm_head.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import argparse
import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator

# Tiny configurations, each with the output layer Hugging Face gives the architecture (tied or not).
MODELS = {
    "llama": ("Llama", dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=4, intermediate_size=128, max_position_embeddings=64)),
    "opt": ("OPT", dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                        max_position_embeddings=64, word_embed_proj_dim=64)),
    "gpt-neox": ("GPTNeoX", dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=128, max_position_embeddings=64)),
    "gpt-neo": ("GPTNeo", dict(vocab_size=128, hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=64,
                               attention_types=[[["global"], 2]])),
    "gpt-j": ("GPTJ", dict(vocab_size=128, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64)),
    "bloom": ("Bloom", dict(vocab_size=128, hidden_size=64, n_layer=2, n_head=4)),
}  # fmt: skip


def say(line):
    """Rank 0 speaks for all: every rank measures the same parameters."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(line)


def output_weight(engine, model):
    """The output layer's whole weight, as a copy (gathered under ZeRO-3)."""
    weight = model.get_output_embeddings().weight
    with deepspeed.zero.GatheredParameters([weight], enabled=hasattr(weight, "ds_id")):
        return weight.detach().clone().float().cpu()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="llama", choices=sorted(MODELS))
    parser.add_argument("--zero", type=int, default=2, choices=(1, 2, 3))
    parser.add_argument("--workaround", action="store_true", help="set requires_grad again after initialize")
    args = parser.parse_args()
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    torch.manual_seed(0)
    prefix, config = MODELS[args.arch]
    config_class = getattr(transformers, f"{prefix}Config")
    model = getattr(transformers, f"{prefix}ForCausalLM")(config_class(**config)).to(device)
    before = {name: p.requires_grad for name, p in model.named_parameters()}
    ds_config = {
        "train_batch_size": world_size,
        "zero_optimization": {"stage": args.zero},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.0, "torch_adam": True}},
        "hybrid_engine": {"enabled": True, "max_out_tokens": 64},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    frozen = [name for name, p in model.named_parameters() if before[name] and not p.requires_grad]
    if args.workaround:
        for name, p in model.named_parameters():
            p.requires_grad_(before[name])
        say(f"workaround: requires_grad set again after initialize on {frozen or 'nothing'}")
        frozen = [name for name, p in model.named_parameters() if before[name] and not p.requires_grad]
    head = output_weight(engine, model)
    engine.train()
    ids = torch.arange(3, 19, device=device).unsqueeze(0)
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    moved = (output_weight(engine, model) - head).abs().max().item()
    name = f"{type(model).__name__}, ZeRO-{args.zero}"
    when = "after the workaround" if args.workaround else "by deepspeed.initialize"
    say(f"{name}: frozen {when}: {frozen or 'none'}; one AdamW step moved the output layer by max abs {moved:.3g}")
    if frozen or moved == 0.0:
        say("BUG: the Hybrid Engine froze a training parameter: training never updates it")
        return 1
    say("OK: every parameter stays trainable and the step updates the output layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
