"""`python -m repro conformance`: the Hybrid Engine against native Hugging Face, cell by cell.

Architectures: GPT-NeoX (with each model configuration that changes its forward math), GPT-Neo and Llama;
axes: DeepSpeed build, ZeRO-2/3, 1/2 ranks and the caller's scenario (call order, DeepSpeed-Chat LoRA,
pin_parameters). A GPT-NeoX cell is one torchrun of the family's probe (`repro.rank.lora_probe`: native
vs HE per generated step, weight states per layer, training weights restored); another architecture's cell
is one torchrun of `repro.rank.arch_probe`. Diagnoses come from the measurements only
(`conformance_diagnosis`). Writes OUT/conformance.json, OUT/CONFORMANCE.md, OUT/conformance.png and one
issue text per confirmed bug (`conformance_report`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from ..options import EXIT_BROKEN, EXIT_OK
from ..paths import write_json
from . import family, launch, patched_copy
from .conformance_diagnosis import diagnose, diagnose_arch
from .conformance_report import write_reports
from .ds_report import ds_report_text

COMMAND = "python -m repro conformance --out results/reference/conformance"
# GPT-NeoX's tiny default (repro.model_registry.TINY) and, per field that changes the forward math, one
# value besides its default. Why these fields, and which were left out: conformance_report.CONFIG_NOTES.
CONFIGS: dict[str, dict] = {
    "default": {},
    "sequential-residual": {"use_parallel_residual": False},
    "full-rotary": {"rotary_pct": 1.0},
    "rotary-base-1e6": {"rotary_emb_base": 1_000_000},
    "layer-norm-eps-1e-3": {"layer_norm_eps": 1e-3},
}
ARCHS = ("gpt-neox", "gpt-neo", "llama")  # GPT-Neo and Llama: their tiny default (repro.rank.arch_probe.ARCHS)
# Per architecture, its configurations: overrides of its tiny default (GPT-NeoX: CONFIGS above). Why these
# fields, and which were left out: conformance_report.CONFIG_NOTES / LEFT_OUT / LEFT_OUT_ARCHS.
ARCH_CONFIGS: dict[str, dict[str, dict]] = {
    "gpt-neox": CONFIGS,
    "gpt-neo": {
        "default": {},
        "exact-gelu": {"activation_function": "gelu"},
        "layer-norm-eps-1e-3": {"layer_norm_epsilon": 1e-3},
    },
    "llama": {
        "default": {},
        "rope-theta-1e6": {"rope_theta": 1_000_000.0},
        "rms-norm-eps-1e-3": {"rms_norm_eps": 1e-3},
        "gelu-gating": {"hidden_act": "gelu"},
        "attention-bias": {"attention_bias": True},
        "mlp-bias": {"mlp_bias": True},
        "grouped-query": {"num_key_value_heads": 2},
    },
}
SERIES = ("0000", "0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011")
# Released, the whole series, and the series without one patch where that patch's bug hides behind another
# on released DeepSpeed (the Llama crash, 0008, comes first there): each such patch shown necessary.
BUILDS = {
    "released": (),
    "whole series": SERIES,
    "series without 0007": tuple(p for p in SERIES if p != "0007"),
    "series without 0009": tuple(p for p in SERIES if p != "0009"),
    "series without 0010": tuple(p for p in SERIES if p != "0010"),
}
# (build, scenarios, architectures) of the leave-one-out cells; ZeRO-3, 1 and 2 ranks (non-pinned: 2).
LEAVE_ONE_OUT = (
    ("series without 0007", ("reference", "unpinned"), ("gpt-neo", "llama")),
    ("series without 0009", ("lora", "unpinned-lora"), ("llama",)),
)
# What a caller does around generate: DeepSpeed-Chat's call order, pinned, no LoRA ("reference"); a loop
# that calls train() first or eval() twice (repro.rank.lora_probe.ORDERS); DeepSpeed-Chat LoRA on every
# Linear; ZeRO-3's non-pinned path, without and with LoRA.
SCENARIOS: dict[str, dict] = {
    "reference": {"order": "eval-generate-train", "lora": "none", "pin": True},
    "train-first": {"order": "train-first", "lora": "none", "pin": True},
    "eval-twice": {"order": "eval-twice", "lora": "none", "pin": True},
    "lora": {"order": "eval-generate-train", "lora": "all", "pin": True},
    "unpinned": {"order": "eval-generate-train", "lora": "none", "pin": False},
    "unpinned-lora": {"order": "eval-generate-train", "lora": "all", "pin": False},
}
ARCH_PROBE = "repro.rank.arch_probe"


def _cell(arch: str, configuration: str, build: str, zero_stage: int, world_size: int, scenario: str) -> dict:
    return {
        "arch": arch,
        "configuration": configuration,
        "config": ARCH_CONFIGS[arch][configuration],
        "build": build,
        "zero_stage": zero_stage,
        "world_size": world_size,
        "scenario": scenario,
        **SCENARIOS[scenario],
    }


def plan(quick: bool = False) -> list[dict]:
    """The cells to run. Full: per architecture and build, every configuration in DeepSpeed-Chat's scenario
    under ZeRO-2/3 x 1/2 ranks; the default configuration in each other scenario at 2 ranks (ZeRO-2 and 3;
    the non-pinned ones ZeRO-3 only: pin_parameters is a ZeRO-3 setting); GPT-Neo's and Llama's other
    configurations before and after the series; the leave-one-out cells. Quick: one cell per axis value."""
    if quick:
        series = "whole series"
        return [
            *(
                _cell(a, c, series, 3, 2, "reference")
                for a in ARCHS
                for c in ARCH_CONFIGS[a]
                if c != "sequential-residual"
            ),
            _cell("gpt-neox", "sequential-residual", "released", 2, 1, "reference"),  # #3453, on ZeRO-2 and 1 rank
            *(_cell("gpt-neox", "default", series, 3, 2, s) for s in SCENARIOS if s != "reference"),
        ]
    cells = []
    for arch in ARCHS:
        for build in ("released", "whole series"):
            for configuration in CONFIGS if arch == "gpt-neox" else ("default",):
                cells += [_cell(arch, configuration, build, z, w, "reference") for z in (2, 3) for w in (1, 2)]
            for scenario, settings in SCENARIOS.items():
                if scenario != "reference":
                    stages = (2, 3) if settings["pin"] else (3,)
                    cells += [_cell(arch, "default", build, z, 2, scenario) for z in stages]
    # The other architectures' configurations: DeepSpeed-Chat's scenario, ZeRO-2 on 1 rank and ZeRO-3 on 2;
    # Llama as released crashes before any configuration matters (0008), so the series without 0010 stands in.
    for arch in ("gpt-neo", "llama"):
        before = "released" if arch == "gpt-neo" else "series without 0010"
        for configuration in (c for c in ARCH_CONFIGS[arch] if c != "default"):
            cells += [_cell(arch, configuration, before, 2, 1, "reference"),
                      _cell(arch, configuration, "whole series", 3, 2, "reference")]  # fmt: skip
    for build, scenarios, archs in LEAVE_ONE_OUT:
        for arch in archs:
            for scenario in scenarios:
                sizes = (1, 2) if SCENARIOS[scenario]["pin"] else (2,)
                cells += [_cell(arch, "default", build, 3, w, scenario) for w in sizes]
    return cells


def _slug(axes: dict) -> str:
    return f"{axes['arch']}-{axes['configuration']}-{axes['scenario']}-z{axes['zero_stage']}-ws{axes['world_size']}"


def run_arch_cell(work: Path, root: Path | None, axes: dict, timeout_s: float = 300) -> dict:
    out = work / "arch" / axes["build"].replace(" ", "-") / f"{_slug(axes)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = out.with_suffix(".spec.json")
    keys = ("arch", "zero_stage", "order", "lora", "pin", "config")
    spec.write_text(json.dumps({k: axes[k] for k in keys}))
    try:
        return launch.run_probe(ARCH_PROBE, out, root, ranks=axes["world_size"], timeout_s=timeout_s)
    finally:
        spec.unlink(missing_ok=True)
        out.unlink(missing_ok=True)


def run_cell(work: Path, root: Path | None, axes: dict, timeout_s: float = 600) -> dict:
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
    return family.run_cell(where, root, probe_axes, timeout_s, extra={"config": CONFIGS[axes["configuration"]]})


def main(out: Path, quick: bool = False, timeout_s: float = 600, log: Callable[[str], None] = print) -> int:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    planned = plan(quick)
    started = time.time()
    roots: dict[str, tuple[Path | None, str | None]] = {}
    for build in dict.fromkeys(c["build"] for c in planned):
        try:
            roots[build] = (patched_copy.prepare_patched_copy(patches=BUILDS[build]) if BUILDS[build] else None, None)
        except Exception as exc:  # recorded on every cell of the build
            roots[build] = (None, f"{type(exc).__name__}: {exc}")

    def measure(axes: dict) -> dict:
        root, error = roots[axes["build"]]
        neox = axes["arch"] == "gpt-neox"
        runner = run_cell if neox else run_arch_cell
        return family.measure_cell(
            axes,
            lambda: runner(out / "cells", root, axes, timeout_s if neox else min(timeout_s, 300)),
            diagnose if neox else diagnose_arch,
            f"[conformance] {axes['arch']} {axes['configuration']} {axes['scenario']} {axes['build']} "
            f"zero{axes['zero_stage']} ws{axes['world_size']}",
            log,
            error=error,
            error_limit=400,
        )

    cells = [measure(axes) for axes in planned]
    data = {
        "command": COMMAND + (" --quick" if quick else ""),
        "configs": ARCH_CONFIGS,
        "scenarios": SCENARIOS,
        "builds": {name: list(patches) for name, patches in BUILDS.items()},
        "cells": cells,
        "duration_s": round(time.time() - started, 1),
        "ds_report": ds_report_text("cpu"),  # for the issue texts: DeepSpeed's template asks for it
    }
    write_json(out / "conformance.json", data)
    # Rendered from the file, as `--render` does: the JSON's sorted keys order the builds and scenarios.
    write_reports(out, json.loads((out / "conformance.json").read_text()))
    log(f"[conformance] {len(cells)} cells in {data['duration_s']:.0f} s -> {out / 'CONFORMANCE.md'}")
    return EXIT_BROKEN if any("error" in c for c in cells) else EXIT_OK


def render_only(out: Path, log: Callable[[str], None] = print) -> int:
    """`--render`: the reports again from OUT/conformance.json, measuring nothing."""
    return family.rerender(Path(out), "conformance.json", write_reports, "conformance", log)
