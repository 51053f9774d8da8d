"""Hybrid Engine: a second Hybrid Engine model in the same process fails its first generate, and the first model
generates wrong after it.

The injected layers are numbered by two process-global counters (`DeepSpeedTransformerInference.layer_id`, and
`DeepSpeedSelfAttention.num_layers`, which sets each layer's `config.layer_id`), and only layer 0 allocates the
KV-cache workspace; `deepspeed.init_inference` resets them, the Hybrid Engine never does. Two tiny models of the same
configuration (random weights, Llama by default), each through its own Hybrid Engine (ZeRO-2 by default) in one
process: the first generates, the second is built and generates, then the first generates again; each greedy generate
is compared with the model's own. Exit status 1: the bug (a generate that raises, or logits that differ), 0: every
generate computes its model.

GPU: deepspeed --num_gpus 1 two_engines.py [--arch llama|gpt-neo|gpt-j|opt|gpt-neox|bloom] [--zero 1|2|3]
CPU: DS_ACCELERATOR=cpu torchrun --nproc-per-node 1 two_engines.py (DeepSpeed's CPU build has no
     transformer_inference kernels; see the issue text for what stands in for them)
"""

import argparse
import os
import sys

import deepspeed
import torch
import transformers
from deepspeed.accelerator import get_accelerator
from deepspeed.model_implementations.transformers.ds_transformer import DeepSpeedTransformerInference
from deepspeed.ops.transformer.inference.ds_attention import DeepSpeedSelfAttention

TOLERANCE = 1e-3  # fp32: max abs logit difference
# Tiny configurations of each architecture the Hybrid Engine injects.
MODELS = {
    "llama": ("Llama", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=4, intermediate_size=128, max_position_embeddings=64)),
    "opt": ("OPT", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                        max_position_embeddings=64, word_embed_proj_dim=64)),
    "gpt-neox": ("GPTNeoX", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=128, max_position_embeddings=64)),
    "gpt-neo": ("GPTNeo", dict(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=64,
                               attention_types=[[["global"], 2]])),
    "gpt-j": ("GPTJ", dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64)),
    "bloom": ("Bloom", dict(vocab_size=256, hidden_size=64, n_layer=2, n_head=4)),
}  # fmt: skip


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


def counters():
    return (f"DeepSpeedTransformerInference.layer_id {DeepSpeedTransformerInference.layer_id}, "
            f"DeepSpeedSelfAttention.num_layers {DeepSpeedSelfAttention.num_layers}")  # fmt: skip


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="llama", choices=sorted(MODELS))
    parser.add_argument("--zero", type=int, default=2, choices=(1, 2, 3))
    args = parser.parse_args()
    deepspeed.init_distributed()
    device = torch.device(get_accelerator().device_name(int(os.environ.get("LOCAL_RANK", "0"))))
    prefix, config = MODELS[args.arch]
    config_class, model_class = getattr(transformers, f"{prefix}Config"), getattr(transformers, f"{prefix}ForCausalLM")
    ds_config = {
        "train_batch_size": int(os.environ.get("WORLD_SIZE", "1")),
        "zero_optimization": {"stage": args.zero},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 64},
    }
    ids = torch.arange(5, 13, device=device).unsqueeze(0)
    models, engines, expected = [], [], []
    failed = 0

    def generate(n, when):
        """The Hybrid Engine's greedy generate of model n against the model's own; True where it computes it."""
        try:
            with torch.no_grad():
                tokens, logits = greedy(engines[n], ids)
        except Exception as exc:  # noqa: BLE001 - what the Hybrid Engine raises is the finding
            print(f"model {n + 1}, {when}, Hybrid Engine vs Hugging Face: {type(exc).__name__}: {exc} ({counters()})")
            return False
        diff = (logits - expected[n][1]).abs().max().item()
        print(f"model {n + 1}, {when}, Hybrid Engine vs Hugging Face: tokens {tokens} vs {expected[n][0]}, logits "
              f"max abs diff {diff:.3g} ({counters()})")  # fmt: skip
        return diff <= TOLERANCE

    for n in range(2):
        torch.manual_seed(n + 1)
        models.append(model_class(config_class(**config)).to(device).eval())
        with torch.no_grad():
            expected.append(greedy(models[n], ids))
        engine, *_ = deepspeed.initialize(model=models[n], config=ds_config, model_parameters=models[n].parameters())
        engine.eval()
        engines.append(engine)
        failed += not generate(n, "its first generate")
    failed += not generate(0, "again, after model 2 was built")
    if failed:
        print(f"BUG: {failed} of 3 Hybrid Engine generates in one process do not compute their model")
        return 1
    print("OK: both Hybrid Engine models in one process compute their model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
