"""What a Transformers Cache holds beside the injected layers' own keys and values (`python -m repro.rank.cache_cost
OUT ARCH [BACKEND]`, under torchrun; host side: repro.host.upstream.cache_cost): a tiny model of ARCH, greedy generate
natively and through the Hybrid Engine (pinned ZeRO-3, DeepSpeed-Chat's call), and the bytes of keys and values the
Cache generate returns holds, per token it counts, with the tokens against native; time per generate and, on a GPU,
the device memory a generate peaks at above what was held before it.

The injected attention keeps its keys and values in DeepSpeed's inference workspace; a Cache that holds them too is a
second KV cache. On the CPU (the default) DeepSpeed's kernels are our PyTorch stand-ins (`fallbacks`); with BACKEND
cuda or rocm, the compiled kernels on the rank's GPU (`placement`)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

from .. import results
from . import fallbacks, placement
from .lifecycle import init_distributed, run_and_leave, shutdown

SIZES = {"hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 1024}
CONFIGS = {
    "llama": ("LlamaConfig", {**SIZES, "intermediate_size": 512}),
    "gpt-neo": ("GPTNeoConfig", {"hidden_size": 256, "num_heads": 4, "num_layers": 2, "vocab_size": 1024,
                                 "attention_types": [[["global", "local"], 1]], "window_size": 256}),
    "opt": ("OPTConfig", {**SIZES, "ffn_dim": 512, "word_embed_proj_dim": 256}),
    # for repro.host.upstream.pr_cost: every model a pull request may concern
    "gpt-neox": ("GPTNeoXConfig", {**SIZES, "intermediate_size": 1024}),
    "gpt-j": ("GPTJConfig", {"n_embd": 256, "n_head": 4, "n_layer": 2, "vocab_size": 1024, "rotary_dim": 32}),
}  # fmt: skip
PROMPT, NEW_TOKENS = 8, 8
KEPT = ("cache_bytes", "cache_tokens", "generate_s", "peak_bytes_above_held")


def cache_bytes(cache) -> tuple[int, int]:
    """The bytes of keys and values a Cache holds, and the tokens it counts (its length)."""
    if cache is None:
        return 0, 0
    if hasattr(cache, "layers"):
        tensors = [t for layer in cache.layers for t in (layer.keys, layer.values) if t is not None]
    elif hasattr(cache, "key_cache"):
        tensors = [*cache.key_cache, *cache.value_cache]
    else:  # a legacy tuple of (key, value) per layer
        tensors = [t for layer in cache for t in layer]
    held = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    length = cache.get_seq_length() if hasattr(cache, "get_seq_length") else 0
    return held, length


def generate(model, ids: torch.Tensor, synced: bool) -> dict:
    """One greedy generate, with its wall time and, on a GPU, the device memory it peaked at above what was held."""
    gpu = ids.device.type != "cpu"
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        held_before = torch.cuda.memory_allocated()
    started = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                         min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                         output_logits=True, use_cache=True, **({"synced_gpus": True} if synced else {}))  # fmt: skip
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() - held_before if gpu else None
    held, length = cache_bytes(out.past_key_values)
    return {"tokens": out.sequences[0, ids.shape[1] :].tolist(), "logits": [s[0].float().cpu() for s in out.logits],
            "cache_bytes": held, "cache_tokens": length, "generate_s": round(seconds, 4),
            "peak_bytes_above_held": peak}  # fmt: skip


def main(out: Path, arch: str, backend: str = "cpu") -> None:
    import deepspeed
    import transformers

    init_distributed(placement.dist_backend(backend))
    op_state = fallbacks.install()
    device = placement.rank_device(backend)
    name, fields = CONFIGS[arch]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, name)(**fields)).to(device).eval()
    ids = torch.arange(10, 10 + PROMPT, device=device).unsqueeze(0)
    with torch.no_grad():
        native = generate(model, ids, synced=False)
    ds_config = {
        "train_batch_size": int(os.environ["WORLD_SIZE"]),
        "zero_optimization": {"stage": 3},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 128, "inference_tp_size": 1, "pin_parameters": True},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    engine.eval()
    with torch.no_grad():
        he = generate(engine.module, ids, synced=True)
        again = generate(engine.module, ids, synced=True)  # the first pays for allocations the kernels keep
    engine.train()
    if int(os.environ["RANK"]) == 0:
        steps = [float((a - b).abs().max()) for a, b in zip(native["logits"], he["logits"], strict=True)]
        result = {
            "arch": arch,
            "transformers": transformers.__version__,
            "deepspeed": deepspeed.__file__,
            "ranks": int(os.environ["WORLD_SIZE"]),
            "backend": backend,
            "device": str(device) if backend == "cpu" else torch.cuda.get_device_name(device),
            "dist_backend": placement.dist_backend(backend),
            "compiled_op": op_state["compiled_op"],
            "kernel_paths": fallbacks.kernel_paths([engine.module]),
            "inference_containers": len(engine._inference_containers),
            "native": {k: native[k] for k in KEPT},
            "hybrid_engine": {k: he[k] for k in KEPT},
            "hybrid_engine_again": {k: again[k] for k in KEPT},
            "tokens_equal_native": he["tokens"] == native["tokens"],
            "logits_max_abs_vs_native": max(steps),
        }
        results.write(out, result, sort_keys=False)
    shutdown()


if __name__ == "__main__":
    run_and_leave(main, Path(sys.argv[1]), sys.argv[2], *sys.argv[3:4])
