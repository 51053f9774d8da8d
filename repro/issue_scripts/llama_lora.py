"""Hybrid Engine cannot take DeepSpeed-Chat's LoRA on Llama: initialize fails on `in_features`, and the LoRA
lookup never finds LoRA.

A tiny Llama (random weights) whose every Linear in the decoder layers is replaced, as DeepSpeed-Chat's
`convert_linear_layer_to_lora` does, by a module with the base `weight` and `bias` and the factors
`lora_right_weight` / `lora_left_weight` (DeepSpeed-Chat's `LinearLayer_LoRA`, dropout 0; it has no
`in_features`). Greedy generate through the Hybrid Engine against Hugging Face on the same model. Exit status
1: the bug (initialize fails, or the Hybrid Engine generates without the LoRA), 0: the logits agree.

GPU: deepspeed --num_gpus 1 llama_lora.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 llama_lora.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import os
import sys

import deepspeed
import torch
import torch.nn.functional as F
import transformers
from deepspeed.accelerator import get_accelerator

TOLERANCE = 1e-3  # fp32: max abs logit difference


class LinearLayer_LoRA(torch.nn.Module):
    """DeepSpeed-Chat's LoRA linear (dschat/utils/module/lora.py), dropout 0, on an nn.Linear's parameters."""

    def __init__(self, linear, lora_dim=8, lora_scaling=1.0):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        rows, columns = linear.weight.shape
        self.lora_right_weight = torch.nn.Parameter(torch.randn(columns, lora_dim, device=self.weight.device) * 0.1)
        self.lora_left_weight = torch.nn.Parameter(torch.randn(lora_dim, rows, device=self.weight.device) * 0.1)
        self.lora_scaling = lora_scaling / lora_dim
        self.fuse_lora = False
        self.weight.requires_grad = False

    def forward(self, x):
        return (
            F.linear(x, self.weight, self.bias)
            + (x @ self.lora_right_weight @ self.lora_left_weight) * self.lora_scaling
        )


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
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=1024,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=512,
        max_position_embeddings=256,
    )
    model = transformers.LlamaForCausalLM(config).to(device).eval()
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(parent, name, LinearLayer_LoRA(child))
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
    trainable = [p for p in model.parameters() if p.requires_grad]
    try:
        engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=trainable)
    except AttributeError as exc:
        print(f"BUG: deepspeed.initialize fails on DeepSpeed-Chat's LoRA modules: AttributeError: {exc}")
        return 1
    engine.eval()
    with torch.no_grad():
        tokens, logits = greedy(engine, ids)
    engine.train()
    diff = (logits - expected).abs().max().item()
    print(f"Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, logits max abs diff {diff:.3g}")
    if not diff <= TOLERANCE:
        print("BUG: the Hybrid Engine does not compute the model with its LoRA")
        return 1
    print("OK: the Hybrid Engine computes the model with its LoRA")
    return 0


if __name__ == "__main__":
    sys.exit(main())
