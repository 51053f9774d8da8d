"""One conformance cell's probe, launched on its build's DeepSpeed: GPT-NeoX cells run the family's probe
(`repro.rank.lora_probe`), the other architectures `repro.rank.arch_probe`; through `probe`, a warm pool's
`run_probe` or one torchrun per cell (`launch.run_probe`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .. import launch
from ..family import run as family
from .plan import CONFIGS

ARCH_PROBE = "repro.rank.arch_probe"


def _slug(axes: dict) -> str:
    return f"{axes['arch']}-{axes['configuration']}-{axes['scenario']}-z{axes['zero_stage']}-ws{axes['world_size']}"


def run_arch_cell(
    work: Path, root: Path | None, axes: dict, timeout_s: float = 300, probe: Callable[..., dict] = launch.run_probe
) -> dict:
    out = work / "arch" / axes["build"].replace(" ", "-") / f"{_slug(axes)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = out.with_suffix(".spec.json")
    keys = ("arch", "zero_stage", "order", "lora", "pin", "config")
    spec.write_text(json.dumps({k: axes[k] for k in keys}))
    try:
        return probe(ARCH_PROBE, out, root, ranks=axes["world_size"], timeout_s=timeout_s)
    finally:
        spec.unlink(missing_ok=True)
        out.unlink(missing_ok=True)


def run_cell(
    work: Path, root: Path | None, axes: dict, timeout_s: float = 600, probe: Callable[..., dict] = launch.run_probe
) -> dict:
    """A GPT-NeoX cell: the family's probe with the configuration's overrides and the scenario's settings."""
    probe_axes = {
        "build": axes["build"],
        "targets": axes["lora"],  # repro.rank.lora.TARGETS: "none" or "all"
        "world_size": axes["world_size"],
        "pin_parameters": axes["pin"],
        "order": axes["order"],
        "zero_stage": axes["zero_stage"],
    }
    where = work / f"{axes['configuration']}-{axes['scenario']}"
    extra = {"config": CONFIGS[axes["configuration"]]}
    return family.run_cell(where, root, probe_axes, timeout_s, extra=extra, probe=probe)
