"""Builds the GPT-NeoX model a run measures: a named architecture with seeded random weights
(no network), or real weights from the Hugging Face hub / a local directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# EleutherAI/pythia-410m-deduped's config.json, so the default run needs no download.
PYTHIA_410M = dict(vocab_size=50304, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                   intermediate_size=4096, rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=2048,
                   use_parallel_residual=True, layer_norm_eps=1e-5, hidden_act="gelu", tie_word_embeddings=False,
                   bos_token_id=0, eos_token_id=0, attention_bias=True)
# Same family, small enough for tests. QKV weight is 768 x 256 = 196,608 elements, above ZeRO-3's
# default stage3_param_persistence_threshold (1e5), so it is partitioned and reaches the buggy branch.
TINY = dict(PYTHIA_410M, vocab_size=1024, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=1024, max_position_embeddings=256)
ARCHITECTURES = {"pythia-410m": PYTHIA_410M, "tiny": TINY}
DEFAULT_PROMPT_IDS = (12092, 13, 309, 1353, 253, 1921, 310, 247)


class ModelUnavailable(RuntimeError):
    """The model cannot be loaded here; the message says how to make it available."""


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

    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")
    try:
        model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=DTYPES[dtype])
    except OSError as exc:
        where = "local directory" if Path(name).exists() else "hub id"
        hint = ("it is not in the Hugging Face cache (HF_HOME=" + os.environ.get("HF_HOME", "~/.cache/huggingface")
                + ") and HF_HUB_OFFLINE is set" if offline else "it could not be downloaded or found")
        raise ModelUnavailable(f"cannot load model {name!r} ({where}): {hint}; download it on a connected "
                               f"machine with `huggingface-cli download {name}` and copy HF_HOME, or pass "
                               "a local directory") from exc
    if model.config.model_type != "gpt_neox":
        raise ModelUnavailable(f"{name!r} is a {model.config.model_type} model; this reproduction needs GPT-NeoX")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError):
        tokenizer = None
    return LoadedModel(model.eval(), tokenizer, name)


def prompt_ids(loaded: LoadedModel, prompt: str | None) -> torch.Tensor:
    """Token ids [1, n]: the fixed default ids, or `prompt` tokenized when the model has a tokenizer."""
    if prompt is None:
        vocab = loaded.model.config.vocab_size
        return torch.tensor([[i % vocab for i in DEFAULT_PROMPT_IDS]], dtype=torch.long)
    if loaded.tokenizer is None:
        raise ModelUnavailable(f"--prompt needs a tokenizer and {loaded.source} has none; omit --prompt "
                               "to use fixed token ids")
    return loaded.tokenizer(prompt, return_tensors="pt").input_ids
