"""One conformance cell for an architecture other than GPT-NeoX: a tiny seeded model of that architecture
under the Hybrid Engine, its greedy tokens and per-step logits against native Hugging Face (teacher-forced
on the Hybrid Engine's own tokens), or the exception the Hybrid Engine raised and where.

Usage: `python -m repro.rank.arch_probe OUT.json` under torchrun; settings in OUT.spec.json (the host
writes them). A crash inside the Hybrid Engine is the cell's result, not a failed run: every rank records
it and leaves cleanly, so the host sees a finding, not a broken launch.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from pathlib import Path

import torch

from .. import shim
from . import fallbacks
from .engine import ds_config, greedy
from .lifecycle import finish, init_distributed
from .lora_probe import spec_path, teacher_forced

# Tiny configurations: the same sizes as GPT-NeoX's tiny default (hidden 256, 2 layers, 4 heads).
ARCHS = {
    "gpt-neo": (
        "GPTNeoConfig",
        "GPTNeoForCausalLM",
        dict(vocab_size=1024, hidden_size=256, num_layers=2, num_heads=4, intermediate_size=1024,
             max_position_embeddings=256, attention_types=[[["global", "local"], 1]], window_size=256),
    ),
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(vocab_size=1024, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
             intermediate_size=512, max_position_embeddings=256),
    ),
}  # fmt: skip
PROMPT = [12, 13, 309, 353, 253, 921, 310, 247]


def build(arch: str, seed: int) -> torch.nn.Module:
    import transformers

    config_cls, model_cls, fields = ARCHS[arch]
    torch.manual_seed(seed)
    return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**fields)).eval()


def _where(exc: BaseException) -> str:
    """The innermost frame inside DeepSpeed or Transformers (installed or a patched copy), as
    `package/file.py:line`; torch's own call machinery is skipped."""
    for f in reversed(traceback.extract_tb(exc.__traceback__)):
        for package in ("/deepspeed/", "/transformers/"):
            if package in f.filename:
                return f"{package.strip('/')}/{f.filename.rsplit(package, 1)[1]}:{f.lineno}"
    return ""


def run(spec: dict) -> dict:
    shim.apply()
    import deepspeed
    import transformers

    op_state = fallbacks.install()
    init_distributed("gloo")
    world = int(os.environ["WORLD_SIZE"])
    model = build(spec["arch"], spec.get("seed", 1234))
    ids = torch.tensor([PROMPT])
    n = spec.get("new_tokens", 6)
    with torch.no_grad():
        native_tokens, _ = greedy(model, ids, n)
    reference = build(spec["arch"], spec.get("seed", 1234))  # the same weights, kept out of ZeRO's hands
    result = {
        "arch": spec["arch"],
        "zero_stage": spec["zero_stage"],
        "world_size": world,
        "deepspeed": {"version": deepspeed.__version__, "path": str(Path(deepspeed.__file__).resolve().parent)},
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
        },  # fmt: skip
        "kernel": op_state,
        "native_tokens": native_tokens,
    }
    try:
        config = ds_config(True, "fp32", world, 0, zero_stage=spec["zero_stage"])
        params = {"model_parameters": list(model.parameters())} if "optimizer" in config else {}
        engine, *_ = deepspeed.initialize(model=model, config=config, **params)
        engine.eval()
        with torch.no_grad():
            he_tokens, he_logits = greedy(engine, ids, n)
        engine.train()
    except Exception as exc:  # the Hybrid Engine's own failure: the cell's finding
        result["crash"] = {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:300], "at": _where(exc)}
        return result
    native_logits = teacher_forced(reference, ids, he_tokens)
    steps = [(a.float() - b.float()).abs().max().item() for a, b in zip(he_logits, native_logits, strict=True)]
    result.update(
        he_tokens=he_tokens,
        tokens_equal_native=he_tokens == native_tokens,
        per_step_logits_vs_native=steps,
        logits_finite=all(math.isfinite(x) for x in steps),
    )
    return result


def main(out: str) -> int:
    out_path = Path(out)
    spec_file = spec_path(out_path)
    finish(out_path, run(json.loads(spec_file.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
