"""Can one process hold two Hybrid Engine models? A probe, not yet a finding of the series.

The injected layers number themselves in two process-global counters (`DeepSpeedTransformerInference.layer_id`, and
`DeepSpeedSelfAttention.num_layers`, which sets each layer's `config.layer_id`), and only layer 0 allocates the
KV-cache workspace, sized for the layers counted so far. `deepspeed.init_inference` resets them when a workspace
exists (`InferenceEngine.destroy`, #4384); the Hybrid Engine never does. So a second Hybrid Engine model in the same
process numbers its layers after the first model's and indexes a workspace that has no entries for them. Each model
here is a fresh tiny Llama (random weights) whose greedy generate through the Hybrid Engine is compared with its own.

    DS_ACCELERATOR=cpu torchrun --nproc_per_node 1 scripts/probe-two-engines.py

On CPU this needs a DeepSpeed whose PyTorch fallbacks of transformer_inference are complete (the patched wheel,
`invoke patched-deepspeed`), and a Llama that DeepSpeed 0.19.8 serves on the installed Transformers (the wheel's
fixes). Prints one line per model: its tokens and logits against the model's own, or the error, and the counters.
"""

import sys

import deepspeed
import deepspeed.ops
import torch
import transformers
from deepspeed.model_implementations.transformers.ds_transformer import DeepSpeedTransformerInference
from deepspeed.ops.transformer.inference.ds_attention import DeepSpeedSelfAttention


def tiny_llama(seed: int) -> transformers.LlamaForCausalLM:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config)


def greedy(model: torch.nn.Module, ids: torch.Tensor) -> tuple[list[int], torch.Tensor]:
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
    return out.sequences[0, ids.shape[1] :].tolist(), torch.stack(out.logits)


def hybrid_engine(model: torch.nn.Module) -> deepspeed.DeepSpeedEngine:
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "hybrid_engine": {"enabled": True, "max_out_tokens": 64},
    }
    engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
    return engine


def main() -> int:
    deepspeed.ops.__compatible_ops__ = dict(deepspeed.ops.__compatible_ops__, deepspeed_shm_comm=False)
    deepspeed.init_distributed(dist_backend="gloo")
    ids = torch.tensor([[5, 6, 7, 8]])
    failed = 0
    for n in (1, 2):
        model = tiny_llama(n)
        with torch.no_grad():
            native = greedy(model, ids)
        engine = hybrid_engine(model)
        engine.eval()
        try:
            with torch.no_grad():
                tokens, logits = greedy(engine.module, ids)
            diff = (logits - native[1]).abs().max().item()
            said = f"tokens {tokens} vs {native[0]}, logits max abs diff {diff:.3g}"
            failed += tokens != native[0] or diff > 1e-3
        except Exception as exc:  # noqa: BLE001 - the probe reports what the second model raises
            said = f"{type(exc).__name__}: {exc}"
            failed += 1
        print(
            f"model {n}: {said} (after it: DeepSpeedTransformerInference.layer_id "
            f"{DeepSpeedTransformerInference.layer_id}, DeepSpeedSelfAttention.num_layers "
            f"{DeepSpeedSelfAttention.num_layers})",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
