"""What the Hybrid Engine does with a model it has no injection policy for (Mistral: no DeepSpeed release injects it;
OPT on Transformers 4.49 to 5.23, whose policy DeepSpeed 0.19.7 and later skip; GPT-NeoX on 4.45 to 4.51, whose
policy cannot import its layer class).

A tiny Mistral, OPT or GPT-NeoX (`--arch`; random weights), ZeRO-2 on one rank, the Hybrid Engine on: does
`deepspeed.initialize` say so (the warning 0.19.7 and later log), does it inject or wrap anything, does it leave every
parameter trainable, and does generate compute what Hugging Face computes (`actor_model.module.generate`,
DeepSpeed-Chat's call; `engine.generate()` without an injected layer is the finding `engine-generate`)? Prints one line
per question, then `OK:` when the Hybrid Engine stays out of the way (nothing wrapped or frozen, generate as Hugging
Face's) and `BUG:` otherwise. Exit 1 on BUG.

GPU: deepspeed --num_gpus 1 no_policy.py
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 no_policy.py
"""

import argparse
import logging
import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator

TOLERANCE = 1e-4  # fp32: max abs logit difference; with nothing injected both sides run the same forward


class Recorded(logging.Handler):
    """DeepSpeed's own log records, as its logger emits them."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def greedy(model, ids):
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4, do_sample=False,
                         pad_token_id=0, return_dict_in_generate=True, output_logits=True)  # fmt: skip
    return out.sequences[0, ids.shape[1] :].tolist(), torch.stack(out.logits).float().cpu()


CONFIGS = {
    "mistral": lambda: transformers.MistralConfig(vocab_size=1024, hidden_size=256, intermediate_size=512,
                                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                  max_position_embeddings=256),
    "gpt-neox": lambda: transformers.GPTNeoXConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=2,
                                                   num_attention_heads=4, intermediate_size=1024,
                                                   max_position_embeddings=256, rotary_pct=0.25),
    "opt": lambda: transformers.OPTConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                          ffn_dim=1024, max_position_embeddings=256),
}  # fmt: skip


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", choices=sorted(CONFIGS), default="mistral")
    args = parser.parse_args()
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[args.arch]()).to(device).eval()
    ids = torch.arange(10, 42, device=device).unsqueeze(0)
    with torch.no_grad():
        expected_tokens, expected = greedy(model, ids)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    ds_config = {
        "train_batch_size": int(os.environ.get("WORLD_SIZE", "1")),
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 256},
    }
    recorded = Recorded()
    deepspeed.utils.logger.addHandler(recorded)
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    deepspeed.utils.logger.removeHandler(recorded)
    warned = [m for m in recorded.messages if "inference policy" in m.lower()]
    frozen = sorted(name for name, p in engine.module.named_parameters() if name in trainable and not p.requires_grad)
    containers = len(getattr(engine, "_inference_containers", []) or [])
    wrapped = len(getattr(engine, "_other_layers", []) or [])
    print(f"{args.arch}: deepspeed {deepspeed.__version__}, transformers {transformers.__version__}")
    print(f"initialize logged: {warned[0] if warned else 'nothing about a policy'}")
    print(f"injected layers: {containers}; other layers wrapped: {wrapped}; frozen by initialize: {frozen or 'none'}")
    engine.eval()
    try:
        with torch.no_grad():
            tokens, logits = greedy(engine.module, ids)
    except Exception as exc:  # what a user sees at their first generate
        print(f"generate failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        print("BUG: the Hybrid Engine does not stay out of the way of a model it has no policy for")
        return 1
    gap = (logits - expected).abs().max().item()
    print(f"Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected_tokens}, logits max abs diff {gap:.3g}")
    if containers or wrapped or frozen or not gap <= TOLERANCE:
        print("BUG: the Hybrid Engine does not stay out of the way of a model it has no policy for")
        return 1
    print("OK: the Hybrid Engine stays out of the way (generate is Hugging Face's own)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
