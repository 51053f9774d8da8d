"""What grouped-query attention costs through the Hybrid Engine (`python -m repro.rank.gqa_cost OUT KV_HEADS
[BACKEND]`, under torchrun; host side: repro.host.upstream.gqa_cost): a Llama twin with KV_HEADS key/value heads of
its 16, greedy generate natively and through the Hybrid Engine (pinned ZeRO-3, DeepSpeed-Chat's call), each timed over
several generates; the bytes of the fused QKV weights the injected layers compute with, and of the keys and values
DeepSpeed's inference workspace holds (its PyTorch path: the compiled kernels keep their own, not read here); on a GPU
the device memory a generate peaks at above what was held before it."""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import torch

from .. import results
from . import fallbacks, placement
from .cache_cost import generate
from .lifecycle import init_distributed, run_and_leave, shutdown

CONFIG = {"hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 4, "intermediate_size": 2816,
          "vocab_size": 4096, "max_position_embeddings": 512}  # fmt: skip
PROMPT, REPEATS = 64, 5
KEPT = ("generate_s", "peak_bytes_above_held")


def timed(model, ids: torch.Tensor, synced: bool) -> dict:
    """The median of REPEATS generates after a first that pays for allocations; the last one's tokens and logits."""
    generate(model, ids, synced)
    runs = [generate(model, ids, synced) for _ in range(REPEATS)]
    return {**runs[-1], "generate_s": statistics.median(r["generate_s"] for r in runs),
            "generate_s_all": [r["generate_s"] for r in runs]}  # fmt: skip


def workspace_kv_bytes() -> int | None:
    """The keys and values DeepSpeed's PyTorch inference workspace holds (None where the compiled op keeps its own)."""
    from deepspeed.ops.transformer.inference.op_binding.workspace import InferenceContext

    cache = InferenceContext.Instance().kv_cache
    if cache is None:
        return None
    return sum(t.numel() * t.element_size() for layer in cache for t in layer)


def qkv_bytes(engine) -> int:
    """The bytes of the model's q, k and v projections (whole, under ZeRO-3 too): what the injected layers fuse."""
    return sum(
        getattr(p, "ds_numel", p.numel()) * p.element_size()
        for name, p in engine.module.named_parameters()
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight"))
    )


def main(out: Path, kv_heads: int, backend: str = "cpu") -> None:
    import deepspeed
    import transformers

    init_distributed(placement.dist_backend(backend))
    op_state = fallbacks.install()
    device = placement.rank_device(backend)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**CONFIG, num_key_value_heads=kv_heads)
    model = transformers.LlamaForCausalLM(config).to(device).eval()
    ids = torch.arange(10, 10 + PROMPT, device=device).unsqueeze(0)
    with torch.no_grad():
        native = timed(model, ids, synced=False)
    ds_config = {
        "train_batch_size": int(os.environ["WORLD_SIZE"]),
        "zero_optimization": {"stage": 3},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 256, "inference_tp_size": 1, "pin_parameters": True},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    engine.eval()
    with torch.no_grad():
        he = timed(engine.module, ids, synced=True)
    kv = workspace_kv_bytes()
    engine.train()
    if int(os.environ["RANK"]) == 0:
        steps = [float((a - b).abs().max()) for a, b in zip(native["logits"], he["logits"], strict=True)]
        result = {
            "key_value_heads": kv_heads,
            "config": {**CONFIG, "num_key_value_heads": kv_heads},
            "prompt": PROMPT,
            "new_tokens": len(he["tokens"]),
            "transformers": transformers.__version__,
            "deepspeed": deepspeed.__file__,
            "ranks": int(os.environ["WORLD_SIZE"]),
            "backend": backend,
            "device": str(device) if backend == "cpu" else torch.cuda.get_device_name(device),
            "compiled_op": op_state["compiled_op"],
            "kernel_paths": fallbacks.kernel_paths([engine.module]),
            "inference_containers": len(engine._inference_containers),
            "qkv_weight_bytes": qkv_bytes(engine),
            "workspace_kv_bytes": kv,
            "native": {k: native[k] for k in (*KEPT, "generate_s_all")},
            "hybrid_engine": {k: he[k] for k in (*KEPT, "generate_s_all")},
            "tokens_equal_native": he["tokens"] == native["tokens"],
            "logits_max_abs_vs_native": max(steps),
        }
        results.write(out, result, sort_keys=False)
    shutdown()


if __name__ == "__main__":
    run_and_leave(main, Path(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4])
