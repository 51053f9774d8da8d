"""Builds the GPT-NeoX model a run measures: a named architecture with seeded random weights
(no network), or real weights from the Hugging Face hub / a local directory."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..model_registry import ARCHITECTURES, DEFAULT_PROMPT_IDS, ModelUnavailable, _unavailable
from ..paths import replace_atomically

log = logging.getLogger(__name__)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: Any | None
    source: str  # "random:<arch>:seed=<n>" or the hub id / directory it was loaded from
    weights: str = "loaded"  # seeded weights: "initialized" or "from cache <file>"


def build(
    name: str, dtype: str, seed: int = 1234, cache_dir: Path | None = None, overrides: dict | None = None
) -> LoadedModel:
    """Same `name`, `dtype` and `seed` give bitwise-identical weights on every rank.

    Seeded initialization of Pythia-410M takes ~5 s per rank and variant on 2 cores; with `cache_dir`,
    the initialized fp32 weights are kept there (keyed by architecture, seed, torch and Transformers
    versions, since their init code draws the numbers) and later builds load them in ~1 s. `overrides`: config
    fields that differ from the architecture's (the conformance suite's configurations)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    if name not in ARCHITECTURES:
        return _from_pretrained(name, dtype)
    fields = {**ARCHITECTURES[name], **(overrides or {})}
    config = GPTNeoXConfig(**fields)
    cached = cache_dir / _cache_name(name, seed, fields) if cache_dir is not None else None
    model, weights = _load_cached(config, cached) if cached is not None else (None, "")
    if model is None:
        torch.manual_seed(seed)
        model, weights = GPTNeoXForCausalLM(config), "initialized"
        if cached is not None:
            _save_cached(model, cached)
    source = f"random:{name}:seed={seed}" + (f":{json.dumps(overrides, sort_keys=True)}" if overrides else "")
    return LoadedModel(model.to(DTYPES[dtype]).eval(), None, source, weights)


def _cache_name(name: str, seed: int, fields: dict | None = None) -> str:
    import transformers

    fields = ARCHITECTURES[name] if fields is None else fields
    key = json.dumps([fields, seed, torch.__version__, transformers.__version__], sort_keys=True)
    return f"{name}-seed{seed}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.safetensors"


def _load_cached(config, path: Path) -> tuple[torch.nn.Module | None, str]:
    """The model with the cached weights, or None when there is no usable cache file (then it is rebuilt)."""
    from safetensors.torch import load_file
    from transformers import GPTNeoXForCausalLM

    try:
        from transformers.initialization import no_init_weights  # Transformers 5 moved it here
    except ImportError:
        from transformers.modeling_utils import no_init_weights

    if not path.is_file():
        return None, ""
    try:
        state = load_file(path)
        with no_init_weights():  # buffers (rotary inv_freq) are still computed, as in a fresh build
            model = GPTNeoXForCausalLM(config)
        model.load_state_dict(state, strict=True, assign=True)
    except Exception as exc:  # truncated or foreign file: a fresh build is always correct
        log.warning("ignoring model cache %s (%s); initializing the weights", path, exc)
        return None, ""
    return model, f"from cache {path}"


def _save_cached(model: torch.nn.Module, path: Path) -> None:
    """Local rank 0 writes it, atomically; a cache that cannot be written only costs time."""
    from safetensors.torch import save_file

    if os.environ.get("LOCAL_RANK", "0") != "0":
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, lambda tmp: save_file(model.state_dict(), tmp))
    except OSError as exc:
        log.warning("could not cache the model weights in %s (%s)", path.parent, exc)


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
