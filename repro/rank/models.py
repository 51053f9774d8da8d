"""Builds the GPT-NeoX model a run measures: a named architecture with seeded random weights
(no network), or real weights from the Hugging Face hub / a local directory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..model_registry import ARCHITECTURES, DEFAULT_PROMPT_IDS, ModelUnavailable, _unavailable

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: Any | None
    source: str  # "random:<arch>:seed=<n>" or the hub id / directory it was loaded from


def build(name: str, dtype: str, seed: int = 1234) -> LoadedModel:
    """Same `name`, `dtype` and `seed` give bitwise-identical weights on every rank."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    if name in ARCHITECTURES:
        torch.manual_seed(seed)
        config = GPTNeoXConfig(**ARCHITECTURES[name])
        model = GPTNeoXForCausalLM(config)
        return LoadedModel(model.to(DTYPES[dtype]).eval(), None, f"random:{name}:seed={seed}")
    return _from_pretrained(name, dtype)


def _from_pretrained(name: str, dtype: str) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=DTYPES[dtype])
    except OSError as exc:
        raise _unavailable(name, "from_pretrained could not find its files") from exc
    if model.config.model_type != "gpt_neox":
        raise ModelUnavailable(f"{name!r} is a {model.config.model_type} model; this reproduction needs GPT-NeoX")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except Exception:  # no tokenizer files, or a missing tokenizer backend: token ids still work
        tokenizer = None
    return LoadedModel(model.eval(), tokenizer, name)


def prompt_ids(loaded: LoadedModel, prompt: str | None) -> torch.Tensor:
    """Token ids [1, n]: the fixed default ids, or `prompt` tokenized when the model has a tokenizer."""
    if prompt is None:
        vocab = loaded.model.config.vocab_size
        return torch.tensor([[i % vocab for i in DEFAULT_PROMPT_IDS]], dtype=torch.long)
    if loaded.tokenizer is None:
        raise ModelUnavailable(
            f"--prompt needs a tokenizer and {loaded.source} has none; omit --prompt to use fixed token ids"
        )
    return loaded.tokenizer(prompt, return_tensors="pt").input_ids
