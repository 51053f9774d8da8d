"""The native Hugging Face reference a variant compares the Hybrid Engine with: greedy tokens, each
step's logits and each layer's first-call outputs. Native generation does not involve DeepSpeed, so
`before` and `after` of one run share it: the first variant computes it and stores it in the run
directory, the second loads it (same model, weights, dtype, prompt and token count, or it recomputes)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..paths import replace_atomically
from . import measure
from .engine import greedy

log = logging.getLogger(__name__)
FILE_NAME = "native-reference.pt"


@dataclass
class NativeReference:
    tokens: list[int]
    logits: list[torch.Tensor]
    trace: measure.Trace
    origin: str  # "computed" or "loaded from <file>"

    @property
    def margins(self) -> list[float]:
        return [measure.top2_margin(step) for step in self.logits]

    @property
    def top1(self) -> list[float]:
        return [step.max().item() for step in self.logits]


def key(source: str, weights_digest: str, dtype: str, ids: torch.Tensor, new_tokens: int) -> dict:
    """What makes two references interchangeable. The weights' digest, not only their name: a local
    directory can change between variants, and a seeded build depends on the library versions."""
    import transformers

    return {
        "model": source,
        "weights_sha256": weights_digest,
        "dtype": dtype,
        "prompt_ids": ids[0].tolist(),
        "device": ids.device.type,  # CPU and GPU kernels round differently
        "new_tokens": new_tokens,
        "torch": str(torch.__version__),
        "transformers": transformers.__version__,
    }


def compute(model: torch.nn.Module, layers, ids: torch.Tensor, new_tokens: int) -> NativeReference:
    trace = measure.Trace()
    for i, layer in enumerate(layers):
        trace.hook(layer.attention, i, "attention")
        trace.hook(layer, i, "layer")
    with torch.no_grad():
        tokens, logits = greedy(model, ids, new_tokens)
    trace.remove()
    return NativeReference(tokens, logits, trace, "computed")


def load(path: Path, expected_key: dict, device: torch.device) -> NativeReference | None:
    """The stored reference when its key matches, else None (then the caller computes its own)."""
    if not path.is_file():
        return None
    try:
        data = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # truncated or foreign file: computing is always correct
        log.warning("ignoring %s (%s)", path, exc)
        return None
    if data.get("key") != expected_key:
        return None
    trace = measure.Trace(attention=data["attention"], layer=data["layer"])
    return NativeReference(data["tokens"], data["logits"], trace, f"loaded from {path}")


def save(ref: NativeReference, path: Path, the_key: dict) -> None:
    """Rank 0 writes it, atomically: the next variant sees the whole file or none."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    data = {
        "key": the_key,
        "tokens": ref.tokens,
        "logits": [t.cpu() for t in ref.logits],
        "attention": {i: t.cpu() for i, t in ref.trace.attention.items()},
        "layer": {i: t.cpu() for i, t in ref.trace.layer.items()},
    }
    replace_atomically(path, lambda tmp: torch.save(data, tmp))
