"""What the Hybrid Engine does for a model the suite has no adapter for: one DeepSpeed has no injection policy for
(Mistral, Qwen2, Falcon, ...), or one it injects without a Hybrid Engine container (GPT-2). A tiny model from the
user's config (seeded random weights), native greedy generate, then deepspeed.initialize with the Hybrid Engine in
DeepSpeed-Chat's call order, and against native: `module.generate()` (DeepSpeed-Chat's call) and
`engine.generate()`, how many containers the engine built, and each generate's time. An initialize that raises is
recorded (`initialize_raised`), not raised: it is what the user meets.

Run under torchrun by repro.host.affected (`affected --run` for such a model); rank 0 writes OUT as JSON."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from . import fallbacks, he_faults, lifecycle
from .engine import ds_config, greedy

NEW_TOKENS = 8
PROMPT = [[11, 12, 13, 14, 15, 16, 17, 18]]


def _timed(fn):
    started = time.perf_counter()
    tokens, logits = fn()
    return tokens, logits, round(time.perf_counter() - started, 3)


def _local_weights(module: torch.nn.Module) -> list[torch.Tensor]:
    """This rank's copy of every weight: its ZeRO-3 partition, or the whole tensor under ZeRO-2."""
    return [(p.ds_tensor if hasattr(p, "ds_tensor") else p.data).detach().float().clone() for p in module.parameters()]


def _vs_native(native: list[torch.Tensor], other: list[torch.Tensor]) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(native, other, strict=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True, help="the model's Hugging Face config as JSON (tiny twin)")
    parser.add_argument("--zero", type=int, choices=(2, 3), default=3)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import deepspeed
    import transformers

    lifecycle.init_distributed("gloo")
    world = torch.distributed.get_world_size()
    overrides = json.loads(args.config)
    config = transformers.AutoConfig.for_model(overrides.pop("model_type"), **overrides)
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        native_tokens, native_logits, native_s = _timed(lambda: greedy(model, ids, NEW_TOKENS))
    result: dict = {
        "model_type": config.model_type,
        "layer_class": type(model.model.layers[0]).__name__
        if hasattr(model, "model") and hasattr(model.model, "layers")
        else None,
        "world_size": world,
        "zero_stage": args.zero,
        "versions": {
            "deepspeed": deepspeed.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },  # fmt: skip
        "native_tokens": native_tokens,
        "native_generate_s": native_s,
    }
    fallbacks.install()  # DeepSpeed's PyTorch paths, completed, for a model DeepSpeed does inject (GPT-2)
    try:
        engine, *_ = deepspeed.initialize(
            model=model, config=ds_config(True, "fp32", world, 0, zero_stage=args.zero),
            model_parameters=[p for p in model.parameters() if p.requires_grad],
        )  # fmt: skip
    except Exception as exc:  # DeepSpeed refused or broke on the model at initialize: the user's outcome
        result["initialize_raised"] = he_faults.crash(exc)
        lifecycle.finish(args.out, result)
        return
    result["inference_containers"] = len(engine._inference_containers)
    before = _local_weights(engine.module)
    engine.eval()
    with torch.no_grad():  # DeepSpeed-Chat's call; synced_gpus as its PPO trainer passes it under ZeRO-3
        tokens, logits, seconds = _timed(lambda: greedy(engine.module, ids, NEW_TOKENS, synced_gpus=args.zero == 3))
    result["module_generate"] = {
        "tokens": tokens,
        "tokens_equal_native": tokens == native_tokens,
        "logits_max_abs_vs_native": _vs_native(native_logits, logits),
        "seconds": seconds,
    }
    try:
        with torch.no_grad():
            tokens, logits, seconds = _timed(lambda: greedy(engine, ids, NEW_TOKENS, synced_gpus=args.zero == 3))
        result["engine_generate"] = {"tokens": tokens, "tokens_equal_native": tokens == native_tokens,
                                     "logits_max_abs_vs_native": _vs_native(native_logits, logits),
                                     "seconds": seconds}  # fmt: skip
    except Exception as exc:  # the finding a Hybrid Engine without containers shows: recorded, not raised
        result["engine_generate"] = {"raised": {"type": type(exc).__name__, "message": str(exc)[:300]}}
    engine.train()
    # the Hybrid Engine's eval() / generate / train() cycle hands training back the weights it took (on this rank)
    after = _local_weights(engine.module)
    changes = [float((a - b).abs().max()) for a, b in zip(before, after, strict=True) if a.numel()]
    result["train_restores_weights"] = {"max_abs": max(changes, default=0.0)}
    lifecycle.finish(args.out, result)


if __name__ == "__main__":
    lifecycle.run_and_leave(main)
