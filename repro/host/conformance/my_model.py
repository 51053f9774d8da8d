"""`conformance --config PATH`: "check my model". PATH is a Hugging Face `config.json`, or a model directory
holding one. The suite builds the config's tiny twin (layers, hidden size, heads and vocabulary shrunk, every
other field kept) and runs the quick scenarios on it, on the released build and the whole series. With
`--weights` the model itself runs, with its own weights, unshrunk.

A model directory is untrusted input: nothing from it is executed (a config that asks for its own code,
`auto_map`, is refused; Transformers' classes for the six architectures are the only code that runs), and
weights load from safetensors only, unless `--allow-pickle` says a pickled checkpoint may be read too. Host
side: reads JSON, imports no torch."""

from __future__ import annotations

import json
from pathlib import Path

from ...findings.registry import ARCHITECTURES
from ...options import UsageError
from ..envs import transformers_env
from .plan import ARCHS, ENGAGED_ON, PINNED, SCENARIOS, cell_axes

# Transformers' model_type -> the suite's architecture (repro.rank.archs has an adapter for each).
MODEL_TYPES = {a.model_type: a.name for a in ARCHITECTURES}
# Fields that name or describe a checkpoint rather than the forward math: not handed to the config class.
NOT_MATH = ("architectures", "auto_map", "_name_or_path", "transformers_version", "torch_dtype", "dtype",
            "model_type", "_commit_hash", "quantization_config", "head_dim")  # fmt: skip
TWIN = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 1024, "positions": 256}
NAME = "my-model"


def read(path: Path, code_ok: bool = False) -> tuple[dict, Path]:
    """The config and the directory it lives in; UsageError (exit 2) in one line for what is wrong. `code_ok`: the
    caller only reads the config (an answer), so a config that names its directory's own code is no reason to
    refuse."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"no Hugging Face config at {file}: pass a config.json or a model directory holding one")
    try:
        config = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read {file} as a Hugging Face config: {exc}") from None
    if not isinstance(config, dict):
        raise UsageError(f"{file} is JSON but not a Hugging Face config (an object with a model_type)")
    if config.get("auto_map") and not code_ok:
        raise UsageError(f"{file} asks for the model directory's own code (auto_map); this suite never runs code "
                         "from a model directory, only Transformers' own classes")  # fmt: skip
    return config, file.parent


def served(path: Path) -> bool:
    """Whether the config's model type is one the Hybrid Engine injects (the suite's cells check it); any other is
    measured as not served (repro.host.conformance.unserved). A config that cannot be read is refused here."""
    return read(path)[0].get("model_type") in MODEL_TYPES


def transformers_of(version: str | None) -> str | None:
    """The Transformers a --config check runs on: None (the architecture's default), the pinned one, or one pinned in a
    constraints/transformers-VERSION.txt (UsageError, exit 2, for any other)."""
    if version is None or version == PINNED or transformers_env.constraints_file(version).is_file():
        return version
    raise UsageError(f"--transformers {version}: the suite runs Transformers {PINNED} (pinned) and "
                     f"{', '.join(transformers_env.others())} (constraints/transformers-*.txt)")  # fmt: skip


def arch_of(config: dict) -> str:
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UsageError(f"model_type {model_type!r}: the Hybrid Engine conformance suite checks "
                         f"{', '.join(sorted(MODEL_TYPES))} (each has an adapter in repro/rank/archs/)")  # fmt: skip
    return MODEL_TYPES[model_type]


def _first(config: dict, *names: str) -> str | None:
    return next((n for n in names if config.get(n) is not None), None)


def tiny_twin(config: dict) -> dict:
    """The config with its sizes shrunk to the suite's tiny ones and every other field kept: the forward math
    the Hybrid Engine must reproduce stays the user's (ratios of FFN and projection sizes, grouped-query heads,
    rotary, norms, activations, biases). A grouped-query twin keeps query heads per key/value head, and 2 key/value
    heads where the model's count is even, so that tensor parallel 2 divides them as it divides the model's."""
    twin = {k: v for k, v in config.items() if k not in NOT_MATH}
    hidden_key = _first(config, "hidden_size", "n_embd", "n_embed")
    heads_key = _first(config, "num_attention_heads", "num_heads", "n_head")
    if hidden_key is None or heads_key is None:
        raise UsageError("the config names no hidden size or head count: not a decoder this suite can shrink")
    hidden, heads = config[hidden_key], config[heads_key]
    twin[hidden_key], twin[heads_key] = TWIN["hidden"], TWIN["heads"]
    layers_key = _first(config, "num_hidden_layers", "num_layers", "n_layer")
    if layers_key:
        twin[layers_key] = TWIN["layers"]
    kv_heads = config.get("num_key_value_heads")
    if kv_heads and kv_heads != heads:  # grouped-query: its ratio, and an even count stays even (tensor parallel 2)
        twin["num_key_value_heads"] = 2 if kv_heads % 2 == 0 else 1
        twin[heads_key] = twin["num_key_value_heads"] * (heads // kv_heads)
        if TWIN["hidden"] % twin[heads_key]:  # heads of the tiny default's size where they do not divide it
            twin[hidden_key] = twin[heads_key] * (TWIN["hidden"] // TWIN["heads"])
    elif kv_heads:
        twin["num_key_value_heads"] = TWIN["heads"]
    for key in ("intermediate_size", "ffn_dim", "word_embed_proj_dim", "n_inner"):
        if config.get(key):
            twin[key] = max(1, round(twin[hidden_key] * config[key] / hidden))
    if config.get("vocab_size"):
        twin["vocab_size"] = min(config["vocab_size"], TWIN["vocab"])
    for key in ("max_position_embeddings", "n_positions"):
        if config.get(key):
            twin[key] = min(config[key], TWIN["positions"])
    if config.get("rotary_dim"):  # GPT-J: the fraction of each head that is rotated
        twin["rotary_dim"] = max(2, TWIN["hidden"] // TWIN["heads"] * config["rotary_dim"] * heads // hidden)
    if config.get("window_size"):
        twin["window_size"] = min(config["window_size"], TWIN["positions"])
    if config.get("attention_types"):  # GPT-Neo: the first two layers' kinds, in its own format
        kinds = [kind for group, repeat in config["attention_types"] for _ in range(repeat) for kind in group]
        twin["attention_types"] = [[kinds[: TWIN["layers"]], 1]]
    for token in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(twin.get(token), int) and twin[token] >= twin.get("vocab_size", TWIN["vocab"]):
            twin[token] = 0
    return twin


def weights_file(directory: Path, allow_pickle: bool) -> Path:
    """The checkpoint --weights loads: model.safetensors; a pickle (pytorch_model.bin) only with allow_pickle."""
    safetensors = directory / "model.safetensors"
    if safetensors.is_file():
        return safetensors
    pickled = directory / "pytorch_model.bin"
    if pickled.is_file():
        if allow_pickle:
            return pickled
        raise UsageError(f"{directory} holds only a pickled checkpoint (pytorch_model.bin): loading a pickle can "
                         "run code; pass --allow-pickle if you trust it, or save it as model.safetensors")  # fmt: skip
    raise UsageError(f"--weights: no model.safetensors in {directory}")


def plan(path: Path, weights: bool = False, allow_pickle: bool = False, transformers: str | None = None) -> list[dict]:
    """The cells: every scenario that fits 2 ranks under ZeRO-3 on 2 (not `ds-chat-tp4`) and the reference scenario
    under ZeRO-2 on 1, before and after the series, on the Transformers where the Hybrid Engine engages the
    architecture."""
    config, directory = read(path)
    arch = arch_of(config)
    version = transformers_of(transformers) or ENGAGED_ON.get(arch, PINNED)
    overrides = {k: v for k, v in config.items() if k not in NOT_MATH} if weights else tiny_twin(config)
    model = {"weights": str(weights_file(directory, allow_pickle)), "allow_pickle": allow_pickle} if weights else {}
    sizes = [(2, 1, "reference")] + [(3, 2, s) for s, v in SCENARIOS.items() if v.get("probe", {}).get("tp", 1) <= 2]
    cells = []
    for build in ("released", "whole series"):
        for zero, ranks, scenario in sizes:
            axes = cell_axes(arch, "default", build, zero, ranks, scenario, version)
            axes.update(configuration=NAME, config=overrides)
            if model:
                axes["probe"] = {**axes.get("probe", {}), **model}
            cells.append(axes)
    return cells


# `affected --run`: the user's setup as cells. Their axes compose the scenarios' own probe settings.
SETUP_SCENARIO = "your-setup"
MAX_CPU_RANKS = 4  # what 2 cores run in minutes; more ranks is a GPU job


def setup_plan(setup: dict, path: Path | None = None) -> list[dict]:
    """Two cells, DeepSpeed as released and with the series, measuring exactly `setup` (repro.findings.setup.Setup
    as a dict: arch, zero, lora, tp, mpu, pin, left_pad, dtype, transformers) on the architecture's tiny default, or
    on the tiny twin of the config at `path`."""
    arch, tp = setup["arch"], setup["tp"]
    if arch not in MODEL_TYPES.values():
        raise UsageError(f"--run measures the injected architectures the suite has adapters for ({', '.join(ARCHS)}), "
                         f"not {arch!r}: DeepSpeed injects it, but the suite has no adapter for it yet")  # fmt: skip
    if tp > MAX_CPU_RANKS:
        raise UsageError(f"--run --tp {tp}: on CPU at most {MAX_CPU_RANKS} ranks run; measure tp {tp} on GPUs")
    ranks = max(2, tp)  # the bugs of partitioned ZeRO-3 need 2 ranks (one rank hides them)
    probe = {"tp": tp, "mpu": setup["mpu"], "left_pad": 3 if setup["left_pad"] else 0}
    if setup["lora"]:  # DeepSpeed-Chat's LoRA and ZeRO-3 settings (the ds-chat scenario's)
        probe.update(SCENARIOS["ds-chat"]["probe"])
    cells = []
    for build in ("released", "whole series"):
        axes = cell_axes(arch, "default", build, setup["zero"], ranks, "reference", setup["transformers"],
                         setup["dtype"])  # fmt: skip
        axes.update(scenario=SETUP_SCENARIO, lora="all" if setup["lora"] else "none", pin=setup["pin"], probe=probe)
        if path is not None:
            axes.update(configuration=NAME, config=tiny_twin(read(path)[0]))
        cells.append(axes)
    return cells
