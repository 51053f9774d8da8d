"""What LoRA on the non-pinned ZeRO-3 path costs a rank per generate (`python -m repro.rank.lora_cost OUT`, under
torchrun; host side: repro.host.upstream.lora_cost): DeepSpeed-Chat's LoRA on every Linear of a GPT-NeoX twin,
pin_parameters false, counting the bytes ZeRO-3 broadcasts during one generate() (a gather with modifier_rank would
broadcast what it keeps) beside the bytes it all-gathers (the path's own gather of every layer at every forward), and
timing each generate. `--no-lora`: the same model without LoRA (a user the bug never
touches).

CPU evidence only: DeepSpeed's kernels are our PyTorch stand-ins (`fallbacks`) and the ranks talk over gloo."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch

from .. import results
from . import fallbacks, lora
from .lifecycle import init_distributed, run_and_leave, shutdown
from .tp_cost import MODEL, NEW_TOKENS, PROMPT, REPEATS


def main(out: Path, with_lora: bool = True) -> None:
    import deepspeed
    import deepspeed.comm as dist
    import transformers

    init_distributed("gloo")
    fallbacks.install()
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(vocab_size=1024, max_position_embeddings=128, **MODEL)
    model = transformers.GPTNeoXForCausalLM(config)
    targets = lora.attach(model, "all", arch="gpt-neox") if with_lora else []
    layer_bytes = sum(p.numel() * p.element_size() for p in model.gpt_neox.layers.parameters())
    ds_config = {
        "train_batch_size": int(os.environ["WORLD_SIZE"]),
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 10_000},
        "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
        "zero_allow_untested_optimizer": True,
        "hybrid_engine": {"enabled": True, "max_out_tokens": 128, "pin_parameters": False},
    }
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())
    broadcast, sent = dist.broadcast, []

    def counted_broadcast(tensor, *args, **kwargs):
        sent.append(tensor.numel() * tensor.element_size())
        return broadcast(tensor, *args, **kwargs)

    dist.broadcast = counted_broadcast
    # DeepSpeed's communication backend: every deepspeed.comm gather goes through it (it keeps torch's functions it
    # picked at init, so torch.distributed's names are not where to count).
    backend = comm_backend()
    gathers = {name: getattr(backend, name) for name in ("all_gather_into_tensor", "all_gather")}
    received: list[int] = []

    def counted(name):
        def gather(*args, **kwargs):  # what this rank receives: the output tensor(s), its first argument
            output = args[0] if args else kwargs.get("output_tensor", kwargs.get("tensor_list"))
            outputs = output if isinstance(output, (list, tuple)) else [output]
            received.append(sum(t.numel() * t.element_size() for t in outputs))
            return gathers[name](*args, **kwargs)

        return gather

    for name in gathers:
        setattr(backend, name, counted(name))
    engine.eval()
    ids = torch.arange(10, 10 + PROMPT).unsqueeze(0)
    times, per_generate = [], []
    with torch.no_grad():
        for _ in range(REPEATS + 1):  # the first is a warm-up
            sent.clear()
            received.clear()
            started = time.perf_counter()
            engine.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                            min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)  # fmt: skip
            times.append(time.perf_counter() - started)
            per_generate.append((len(sent), sum(sent), sum(received)))
    dist.broadcast = broadcast
    for name in gathers:
        delattr(backend, name)  # the instance attribute: the backend's own method again
    engine.train()
    if int(os.environ["RANK"]) == 0:
        calls, sent_bytes, gathered_bytes = per_generate[-1]
        result = {
            "ranks": int(os.environ["WORLD_SIZE"]),
            "model": MODEL,
            "lora_targets": len(targets),
            "prompt_tokens": PROMPT,
            "new_tokens": NEW_TOKENS,
            "layer_weight_bytes": layer_bytes,
            "broadcasts_per_generate": calls,
            "broadcast_bytes_per_generate": sent_bytes,
            "all_gather_bytes_per_generate": gathered_bytes,
            "generate_s": [round(t, 4) for t in times[1:]],
            "generate_median_s": round(statistics.median(times[1:]), 4),
        }
        results.write(out, result, sort_keys=False)
    shutdown()


def comm_backend():
    from deepspeed.comm import comm

    return comm.cdb


if __name__ == "__main__":
    run_and_leave(main, Path(sys.argv[1]), "--no-lora" not in sys.argv[2:])
