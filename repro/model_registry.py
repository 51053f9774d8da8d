"""The models a run can name, and whether one is reachable from here: no torch, so the host side
(CLI, containers, tasks) can validate `--model` before any rank starts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

DTYPE_NAMES = ("fp32", "bf16", "fp16")

# EleutherAI/pythia-410m-deduped's config.json, so the default run needs no download.
PYTHIA_410M = dict(
    vocab_size=50304,
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    rotary_pct=0.25,
    rotary_emb_base=10000,
    max_position_embeddings=2048,
    use_parallel_residual=True,
    layer_norm_eps=1e-5,
    hidden_act="gelu",
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=0,
    attention_bias=True,
)
# Same family, small enough for tests. QKV weight is 768 x 256 = 196,608 elements, above ZeRO-3's
# default stage3_param_persistence_threshold (1e5), so it is partitioned and reaches the buggy branch.
TINY = dict(
    PYTHIA_410M,
    vocab_size=1024,
    hidden_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=1024,
    max_position_embeddings=256,
)
# Pythia-410M's architecture with seeded random weights: the default model on CPU (no model hub needed).
RANDOM_PYTHIA = "pythia-410m"
# The real model, on the hub: the default on an AMD host where it can be loaded (repro.host.jobs.default_model).
REAL_PYTHIA = "EleutherAI/pythia-410m-deduped"
ARCHITECTURES = {RANDOM_PYTHIA: PYTHIA_410M, "tiny": TINY}
DEFAULT_PROMPT_IDS = (12092, 13, 309, 1353, 253, 1921, 310, 247)


class ModelUnavailable(RuntimeError):
    """The model cannot be loaded here; the message says how to make it available."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("", "0", "false", "no")


def _unavailable(name: str, why: str) -> ModelUnavailable:
    return ModelUnavailable(
        f"cannot load model {name!r}: {why}; download it on a connected machine with "
        f"`huggingface-cli download {name}` and copy HF_HOME, or pass a local directory"
    )


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_available(name: str) -> None:
    """Cheap pre-flight (no torch, no weights): is the model's config reachable from here, and is it a
    GPT-NeoX? Every failure is one line saying which: a local path, or a hub id."""
    if name in ARCHITECTURES:
        return
    path = Path(name).expanduser()
    if path.exists() or not HUB_ID.match(name):
        _check_local_dir(name, path)
        return
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json")
    if isinstance(cached, str):
        _check_config(name, Path(cached))
        return
    if _offline():
        raise _unavailable(
            name,
            "it is not in the Hugging Face cache (HF_HOME="
            + os.environ.get("HF_HOME", "~/.cache/huggingface")
            + ") and HF_HUB_OFFLINE is set",
        )
    try:
        config = hf_hub_download(name, "config.json")
    except Exception as exc:  # network, auth, missing repo: all end the same way for the user
        raise _unavailable(name, f"the hub did not provide it ({type(exc).__name__})") from exc
    _check_config(name, Path(config))


def check_cached(name: str) -> None:
    """Like `check_available` for a hub id, from the local Hugging Face cache only (no network)."""
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json")
    if not isinstance(cached, str):
        raise _unavailable(name, "it is not in the Hugging Face cache (not looked up on the hub in a dry run)")
    _check_config(name, Path(cached))


def _check_local_dir(name: str, path: Path) -> None:
    if not path.exists():
        raise ModelUnavailable(
            f"--model {name}: no such local directory (and not a hub id like {REAL_PYTHIA}, "
            f"nor {RANDOM_PYTHIA} or tiny)"
        )
    if not path.is_dir():
        raise ModelUnavailable(f"--model {name}: is a file; pass the directory save_pretrained wrote")
    if not (path / "config.json").is_file():
        raise ModelUnavailable(f"--model {name}: directory has no config.json (expected a save_pretrained dir)")
    _check_config(name, path / "config.json")


def _check_config(name: str, config: Path) -> None:
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelUnavailable(
            f"--model {name}: {config} is not a readable JSON config ({type(exc).__name__})"
        ) from exc
    if model_type != "gpt_neox":
        raise ModelUnavailable(
            f"--model {name} is a {model_type or 'model of unknown type'}; this reproduction needs GPT-NeoX"
        )
