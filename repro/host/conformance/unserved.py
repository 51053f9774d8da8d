"""`conformance --config` for a model type DeepSpeed has no injection policy for (Mistral, Qwen2, Falcon, Gemma, Phi,
...): the Hybrid Engine injects nothing there, so the cell probe's questions (which layer computed what) have no
subject. What a user needs instead is measured by repro.rank.unserved_probe on the config's tiny twin: how many
containers the engine built, `module.generate` (DeepSpeed-Chat's call) and `engine.generate` against native, and the
time of each. Each cell is reported as "not served: runs Hugging Face's own forward" with its numbers, never as
correct and never as a crash of ours. Host side: imports no torch."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ... import results, tolerance
from ...findings import policies, shows
from ...options import EXIT_BROKEN, EXIT_OK, UsageError
from .. import launch, table_dir
from ..envs import transformers_env
from . import my_model
from .plan import PINNED
from .suite import build_root

PROBE = "repro.rank.unserved_probe"
RESULTS = "unserved.json"
# (build, ZeRO stage, ranks): released and with the series, ZeRO-2 on 1 rank and ZeRO-3 on 2 (partitioned).
CELLS = tuple((build, zero, ranks) for build in ("released", "whole series") for zero, ranks in ((2, 1), (3, 2)))
NOT_SERVED = "not served: runs Hugging Face's own forward"
INITIALIZE_FAILS = "deepspeed.initialize with the Hybrid Engine fails"
BUG_ENGINE_GENERATE = shows("engine-generate")


def plan(path: Path, transformers: str | None = None) -> list[dict]:
    """The cells for the config at `path` (UsageError, exit 2, for a config this path does not take)."""
    config, _ = my_model.read(path)
    if config.get("model_type") in my_model.MODEL_TYPES:
        raise UsageError(f"model_type {config['model_type']!r} is one the Hybrid Engine serves: the suite's cells "
                         "check it (conformance --config)")  # fmt: skip
    if not config.get("model_type"):
        raise UsageError(f"{path} names no model_type: not a Hugging Face model config")
    twin = {"model_type": config["model_type"], **my_model.tiny_twin(config)}
    version = my_model.transformers_of(transformers) or PINNED
    return [{"model_type": config["model_type"], "config": twin, "build": build, "zero_stage": zero,
             "world_size": ranks, "transformers": version} for build, zero, ranks in CELLS]  # fmt: skip


def verdict(result: dict, dtype: str = "fp32") -> list[str]:
    """What the measurement says, in the suite's words; a model DeepSpeed did inject after all is said loudly."""
    raised = result.get("initialize_raised")
    if raised:  # DeepSpeed injects it, without a Hybrid Engine container (GPT-2): initialize fails
        return [f"{INITIALIZE_FAILS}: {raised['type']}: {raised['message'][:160]} ({raised['at']})"]
    module, engine = result["module_generate"], result["engine_generate"]
    containers = result["inference_containers"]
    if containers:
        return [f"served by a policy DeepSpeed's list lacks: {containers} inference containers (please report it)"]
    within = module["logits_max_abs_vs_native"] <= tolerance.logits(dtype)
    found = [
        f"{NOT_SERVED} (0 inference containers; module.generate "
        + ("equals native" if module["tokens_equal_native"] and within else "DIFFERS from native")
        + f", logits within {module['logits_max_abs_vs_native']:.3g}, {module['seconds']} s vs native "
        f"{result['native_generate_s']} s)"
    ]
    restored = (result.get("train_restores_weights") or {}).get("max_abs")
    if restored is None or restored > tolerance.weights(dtype):
        found.append(f"training weights not restored by train() (max abs change {restored})")
    if "raised" in engine:
        found.append(f"{BUG_ENGINE_GENERATE}: {engine['raised']['type']}: {engine['raised']['message'][:160]}")
    elif not engine["tokens_equal_native"]:
        found.append("engine.generate() without a container differs from native (cause not established)")
    return found


def main(path: Path, out: Path, transformers: str | None = None, log: Callable[[str], None] = print,
         timeout_s: float = 600) -> int:  # fmt: skip
    """Measures every cell into OUT/unserved.json and OUT/UNSERVED.md. Exit 0 when each cell was measured, 3 when
    one could not be (its log kept beside)."""
    cells = plan(path, transformers)
    out = Path(out)
    table_dir.claim(out, RESULTS, "conformance")
    broken = 0
    for i, axes in enumerate(cells, 1):
        label = (f"{axes['model_type']} (tiny twin) {axes['build']} zero{axes['zero_stage']} ws{axes['world_size']} "
                 f"transformers {axes['transformers']}")  # fmt: skip
        name = f"{axes['build'].replace(' ', '-')}-z{axes['zero_stage']}-ws{axes['world_size']}"
        result_file, log_file = out / f"{name}.json", out / f"{name}.log"
        try:
            root = transformers_env.joined(build_root(axes["build"]), transformers_env.overlay(axes["transformers"]))
            code, output = launch.run_module(PROBE, ["--config", json.dumps(axes["config"]), "--zero",
                                                     str(axes["zero_stage"]), "--out", str(result_file)],
                                             root, axes["world_size"], timeout_s)  # fmt: skip
        except (launch.LaunchError, transformers_env.OverlayError, OSError) as exc:
            code, output = 1, str(exc)
        log_file.write_text(output)
        if code != 0 or not result_file.is_file():
            axes.update(error=launch.first_error(output), log=str(log_file))
            broken += 1
            log(f"[conformance] {i}/{len(cells)} {label}: could not be measured ({axes['error']}); log: {log_file}")
            continue
        axes["result"] = results.load(result_file)
        axes["verdict"] = verdict(axes["result"])
        log(f"[conformance] {i}/{len(cells)} {label}: {'; '.join(axes['verdict'])}")
    results.write(out / RESULTS, {"config": str(path), "cells": cells}, indent=1, sort_keys=False)
    (out / "UNSERVED.md").write_text(render(path, cells))
    log(f"[conformance] {len(cells) - broken} of {len(cells)} cells measured -> {out / 'UNSERVED.md'}")
    return EXIT_BROKEN if broken else EXIT_OK


def render(path: Path, cells: list[dict]) -> str:
    """The cells as a table a user reads: what ran, what DeepSpeed did, and the times."""
    rows = [
        f"| {c['build']} | {c['zero_stage']} | {c['world_size']} | {c['transformers']} | "
        + ("; ".join(c["verdict"]) if "verdict" in c else f"not measured: {c['error']}")
        + " |"
        for c in cells
    ]
    model_type = cells[0]["model_type"] if cells else "?"
    return "\n".join(
        [
            f"# Check my model: {model_type} ({path})",
            "",
            (
                f"DeepSpeed injects `{model_type}` ({policies.policy_of(model_type)}), but the suite has no adapter "
                "for it: what the Hybrid Engine does with it is measured here as it is. "
                if policies.policy_of(model_type)
                else f"DeepSpeed has no kernel-injection policy for `{model_type}`: the Hybrid Engine builds no "
                "inference container, and generation runs Hugging Face's own forward (without the Hybrid Engine's "
                "speed-up). "
            )
            + "Measured on the config's tiny twin (layers, hidden size, heads and vocabulary shrunk, every other "
            "field kept; seeded random weights; fp32; CPU evidence where it ran on CPU).",
            "",
            "| DeepSpeed | ZeRO | ranks | Transformers | verdict |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
