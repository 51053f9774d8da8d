"""What tensor-parallel generation without an mpu costs a rank (`python -m repro.rank.tp_cost OUT TP ZERO PIN`,
PIN pinned or unpinned, under torchrun; host side: repro.host.upstream.tp_cost): DeepSpeed-Chat's settings (no
mpu; pinned ZeRO-3, non-pinned ZeRO-3 and ZeRO-2) on a GPT-NeoX twin, timing each `generate()` and counting the
bytes of layer weights a rank holds while the model generates, at its start, at every injected layer's forward and
after every slice copied out of a gathered weight: what the injected layers hold (the slices the fix copies out,
or at inference_tp_size 1 the layers as gathered: all of them pinned, the one running non-pinned), of it the bytes
copied beside the training weights (the slices; a gathered or whole layer is the training weights themselves), and
the peak of the layers' weights alive on the rank (their training weights gathered or whole, and the copies beside
them).

CPU evidence only: DeepSpeed's kernels are our PyTorch stand-ins (`fallbacks`) and the ranks talk over gloo."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch

from .. import results
from . import fallbacks
from .lifecycle import init_distributed, run_and_leave, shutdown

MODEL = {"hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 4, "intermediate_size": 4096}
PROMPT, NEW_TOKENS, REPEATS = 32, 8, 5
GATHER_LAYERS = 4  # tp_gather_partition_size: pinned ZeRO-3 gathers the layers to slice this many at a time
HELD = (("attention", "attn_qkvw"), ("attention", "attn_qkvb"), ("attention", "attn_ow"), ("attention", "attn_ob"),
        ("mlp", "inter_w"), ("mlp", "inter_b"), ("mlp", "output_w"), ("mlp", "output_b"))  # fmt: skip


def held_bytes(containers, training: set[int] | None = None) -> int:
    """Bytes of the attention and MLP weights the injected layers hold (a released ZeRO-3 partition holds 0); with
    `training` (the storages of the training weights), only those held in copies beside them."""
    total = 0
    for c in containers:
        for owner, name in HELD:
            t = getattr(getattr(c.module, owner), name, None)
            if t is not None and (training is None or t.untyped_storage().data_ptr() not in training):
                total += t.numel() * t.element_size()
    return total


def _sample(engine, model, seen: list[tuple[int, int, int, bool]], copied=None) -> None:
    """What the layers hold now, of it what is copied beside the training weights, and the layers' weights alive
    (their training weights gathered or whole, and the copies: the held ones, and `copied`, a slice just copied out
    and not yet handed to its layer, which marks a sample taken while the slices are made)."""
    training = {p.data.untyped_storage().data_ptr() for p in model.parameters() if p.data.numel() > 0}
    containers = engine._inference_containers
    beside = held_bytes(containers, training)
    held = {getattr(getattr(c.module, owner), name, None) for c in containers for owner, name in HELD} - {None}
    known = training | {t.untyped_storage().data_ptr() for t in held}  # a slice may be copied into a held tensor
    if copied is not None and copied.untyped_storage().data_ptr() not in known:
        beside += copied.numel() * copied.element_size()
    gathered = sum(p.numel() * p.element_size() for p in model.gpt_neox.layers.parameters() if p.data.numel() > 0)
    seen.append((held_bytes(containers), held_bytes(containers, training), gathered + beside, copied is not None))


def _sampled_copy(copy, engine, model, seen: list, sampling: list[bool]):
    """A slicing copy of the Hybrid Engine's (ReplaceWithTensorSlicing.copy or strided_copy), sampled after it."""

    def sampled(*args, **kwargs):
        copied = copy(*args, **kwargs)
        if sampling[0] and copied is not None:
            _sample(engine, model, seen, copied)
        return copied

    return sampled


def main(out: Path, tp: int, zero: int, pin: bool) -> None:
    import deepspeed
    import transformers

    init_distributed("gloo")
    fallbacks.install()
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(vocab_size=1024, max_position_embeddings=128, **MODEL)
    model = transformers.GPTNeoXForCausalLM(config)
    layer_bytes = sum(p.numel() * p.element_size() for p in model.gpt_neox.layers.parameters())
    ds_config = {
        "train_batch_size": int(os.environ["WORLD_SIZE"]),
        "zero_optimization": {"stage": zero, "stage3_param_persistence_threshold": 10_000},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 128, "inference_tp_size": tp, "pin_parameters": pin,
                          "tp_gather_partition_size": GATHER_LAYERS},
    }  # fmt: skip
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    seen: list[tuple[int, int, int, bool]] = []
    sampling = [True]  # the warm-up generate only: the timed ones run without the sampling
    generate = engine._generate

    def measured_generate(*args, **kwargs):
        if sampling[0]:
            _sample(engine, model, seen)
        return generate(*args, **kwargs)

    engine._generate = measured_generate
    for container in engine._inference_containers:  # the Hybrid Engine calls forward itself (no hooks fire)
        forward = container.module.forward

        def sampled_forward(*args, _forward=forward, **kwargs):  # inside a non-pinned layer's gather
            if sampling[0]:
                _sample(engine, model, seen)
            return _forward(*args, **kwargs)

        container.module.forward = sampled_forward
    if engine.mp_replace is not None:  # each slice copied out, while what it is copied from is gathered
        for name in ("copy", "strided_copy"):
            setattr(engine.mp_replace, name, _sampled_copy(getattr(engine.mp_replace, name), engine, model, seen,
                                                           sampling))  # fmt: skip
    engine.eval()
    ids = torch.arange(10, 10 + PROMPT).unsqueeze(0)
    times, gathers = [], []
    with torch.no_grad():
        for _ in range(REPEATS + 1):  # the first is a warm-up
            engine._gather_latency = 0  # the Hybrid Engine's own timer: set where generate() gathers up front
            started = time.perf_counter()
            engine.module.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                   min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)  # fmt: skip
            times.append(time.perf_counter() - started)
            gathers.append(engine._gather_latency)
            sampling[0] = False
    engine.train()
    if int(os.environ["RANK"]) == 0:
        result = {
            "inference_tp_size": tp,
            "zero_stage": zero,
            "pin_parameters": pin,
            "ranks": int(os.environ["WORLD_SIZE"]),
            "model": MODEL,
            "prompt_tokens": PROMPT,
            "new_tokens": NEW_TOKENS,
            "layer_weight_bytes": layer_bytes,
            "tp_gather_partition_size": GATHER_LAYERS,
            # what the layers hold while the model generates (at its start and at each layer's forward)
            "held_during_generate_bytes": max(held for held, _, _, slicing in seen if not slicing),
            "copied_during_generate_bytes": max(copied for _, copied, _, slicing in seen if not slicing),
            # the layers' weights alive on the rank at any sample, the slices' copying included
            "layer_weights_peak_bytes": max(alive for _, _, alive, _ in seen),
            "generate_s": [round(t, 4) for t in times[1:]],
            "generate_median_s": round(statistics.median(times[1:]), 4),
            # the time generate() spends before the model generates: gathering the layers (pinned ZeRO-3) and
            # copying out the slices (tp 2 but non-pinned, which does both in each layer's forward)
            "up_front_median_s": round(statistics.median(gathers[1:]), 4),
        }
        results.write(out, result, sort_keys=False)
    shutdown()


if __name__ == "__main__":
    run_and_leave(main, Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "pinned")
