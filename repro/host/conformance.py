"""`python -m repro conformance`: the Hybrid Engine against native Hugging Face, cell by cell.

Part 1 of the suite (issue 22): GPT-NeoX, the model configurations that change its forward math, under
ZeRO-2 and ZeRO-3, 1 and 2 ranks, each DeepSpeed build. Each cell is one torchrun of the family's probe
(`repro.rank.lora_probe`, the shared measurement core: native vs HE per generated step, weight states
per layer, training weights restored) with the configuration's overrides. The diagnosis comes from the
measurements only (`diagnose`). Writes OUT/conformance.json, OUT/CONFORMANCE.md and OUT/conformance.png.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..options import EXIT_BROKEN, EXIT_OK
from ..paths import write_json
from . import family, launch, patched_copy
from .conformance_diagnosis import diagnose, diagnose_arch
from .conformance_report import write_reports

COMMAND = "python -m repro conformance --out results/reference/conformance"
# GPT-NeoX's tiny default (repro.model_registry.TINY) and, per field that changes the forward math, one
# value besides its default. Why these fields, and which were left out: CONFIG_NOTES.
CONFIGS: dict[str, dict] = {
    "default": {},
    "sequential-residual": {"use_parallel_residual": False},
    "full-rotary": {"rotary_pct": 1.0},
    "rotary-base-1e6": {"rotary_emb_base": 1_000_000},
}
BUILDS = {"released": (), "whole series": ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009")}
AXES = ("configuration", "build", "zero_stage", "world_size")
FULL = {"configuration": tuple(CONFIGS), "build": tuple(BUILDS), "zero_stage": (2, 3), "world_size": (1, 2)}
QUICK = {"configuration": tuple(CONFIGS), "build": ("whole series",), "zero_stage": (3,), "world_size": (2,)}
# Other architectures, their tiny default configuration only (part 1: does the HE run them at all, and match?).
ARCH_PROBE = "repro.rank.arch_probe"
ARCH_AXES = ("arch", "build", "zero_stage", "world_size")
ARCH_FULL = {"arch": ("gpt-neo", "llama"), "build": tuple(BUILDS), "zero_stage": (3,), "world_size": (1, 2)}
ARCH_QUICK = {"arch": ("gpt-neo", "llama"), "build": ("whole series",), "zero_stage": (3,), "world_size": (2,)}


def cells_of(axes: dict[str, Sequence], names: Sequence[str] = AXES) -> list[dict]:
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(axes[k] for k in names))]


def run_arch_cell(work: Path, root: Path | None, axes: dict, timeout_s: float = 300) -> dict:
    out = (
        work
        / "arch"
        / f"{axes['arch']}-{axes['build'].replace(' ', '-')}-z{axes['zero_stage']}-ws{axes['world_size']}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = out.with_suffix(".spec.json")
    spec.write_text(json.dumps({"arch": axes["arch"], "zero_stage": axes["zero_stage"]}))
    try:
        return launch.run_probe(ARCH_PROBE, out, root, ranks=axes["world_size"], timeout_s=timeout_s)
    finally:
        spec.unlink(missing_ok=True)
        out.unlink(missing_ok=True)


def run_cell(work: Path, root: Path | None, axes: dict, timeout_s: float = 600) -> dict:
    probe_axes = {
        "build": axes["build"],
        "targets": "none",
        "world_size": axes["world_size"],
        "pin_parameters": True,
        "order": family.REFERENCE_ORDER,
        "zero_stage": axes["zero_stage"],
    }
    overrides = CONFIGS[axes["configuration"]]
    return family.run_cell(work / axes["configuration"], root, probe_axes, timeout_s, extra={"config": overrides})


def main(out: Path, quick: bool = False, timeout_s: float = 600, log: Callable[[str], None] = print) -> int:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    planned = cells_of(QUICK if quick else FULL)
    started = time.time()
    arch_planned = cells_of(ARCH_QUICK if quick else ARCH_FULL, ARCH_AXES)
    roots: dict[str, tuple[Path | None, str | None]] = {}
    for build in dict.fromkeys(c["build"] for c in [*planned, *arch_planned]):
        try:
            roots[build] = (patched_copy.prepare_patched_copy(patches=BUILDS[build]) if BUILDS[build] else None, None)
        except Exception as exc:  # recorded on every cell of the build
            roots[build] = (None, f"{type(exc).__name__}: {exc}")

    def where(axes: dict, name: str) -> str:
        return f"[conformance] {axes[name]} {axes['build']} zero{axes['zero_stage']} ws{axes['world_size']}"

    cells = [
        family.measure_cell(
            {**axes, "overrides": CONFIGS[axes["configuration"]]},
            lambda axes=axes: run_cell(out / "cells", roots[axes["build"]][0], axes, timeout_s),
            diagnose,
            where(axes, "configuration"),
            log,
            error=roots[axes["build"]][1],
            error_limit=400,
        )
        for axes in planned
    ]
    arch_cells = [
        family.measure_cell(
            axes,
            lambda axes=axes: run_arch_cell(out / "cells", roots[axes["build"]][0], axes),
            diagnose_arch,
            where(axes, "arch"),
            log,
            error=roots[axes["build"]][1],
            error_limit=400,
        )
        for axes in arch_planned
    ]
    data = {
        "command": COMMAND + (" --quick" if quick else ""),
        "arch": "gpt-neox",
        "configs": CONFIGS,
        "arch_cells": arch_cells,
        "cells": cells,
        "duration_s": round(time.time() - started, 1),
    }
    write_json(out / "conformance.json", data)
    write_reports(out, data)
    log(
        f"[conformance] {len(cells) + len(arch_cells)} cells in {data['duration_s']:.0f} s -> {out / 'CONFORMANCE.md'}"
    )
    return EXIT_BROKEN if any("error" in c for c in [*cells, *arch_cells]) else EXIT_OK


def render_only(out: Path, log: Callable[[str], None] = print) -> int:
    """`--render`: the reports again from OUT/conformance.json, measuring nothing."""
    return family.rerender(Path(out), "conformance.json", write_reports, "conformance", log)
