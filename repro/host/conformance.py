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

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from ..options import EXIT_BROKEN, EXIT_INTERRUPTED, EXIT_OK, UsageError
from ..paths import write_json
from . import family, launch, patched_copy, pool, table_dir
from .cell_progress import Progress
from .conformance_diagnosis import diagnose, diagnose_arch
from .conformance_report import write_reports
from .ds_report import ds_report_text

COMMAND = "python -m repro conformance --regenerate --out results/reference/conformance"
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


def key(cell: dict) -> tuple:
    """A cell's identity in the plan: what a resume or a merge matches on."""
    return tuple(cell[k] for k in ("arch", "configuration", "build", "zero_stage", "world_size", "scenario"))


def plan_of(quick: bool, archs: tuple[str, ...] | None) -> list[dict]:
    """The plan, restricted to `archs` when given (UsageError for an architecture the suite does not have)."""
    unknown = sorted(set(archs or ()) - set(ARCHS))
    if unknown:
        raise UsageError(f"no conformance cells for {', '.join(unknown)}: the architectures are {', '.join(ARCHS)}")
    return [c for c in plan(quick) if not archs or c["arch"] in archs]


def shard_of(planned: list[dict], shard: tuple[int, int] | None) -> list[dict]:
    """The K-th of N deterministic shards: every N-th cell of the plan, from the K-th (1-based)."""
    if shard is None:
        return planned
    k, n = shard
    return planned[k - 1 :: n]


def main(
    out: Path,
    quick: bool = False,
    timeout_s: float = 600,
    log: Callable[[str], None] = print,
    isolated: bool = False,
    resume: bool = False,
    regenerate: bool = False,
    shard: tuple[int, int] | None = None,
    archs: tuple[str, ...] | None = None,
) -> int:
    """Runs the plan (or a shard of it; `archs`: only these architectures' cells), each finished cell
    journaled at once; `resume` runs only the cells OUT's journal lacks, with the options it was started
    with. Exit 0, 3 if a cell could not be measured, 130 on Ctrl-C / SIGTERM (every rank stopped; the
    finished cells kept)."""
    out = Path(out)
    resumed = table_dir.claim(out, "conformance.json", "conformance", resume=resume, regenerate=regenerate)
    if resumed is not None:
        quick, isolated = resumed.get("quick", quick), resumed.get("isolated", isolated)
        shard = tuple(resumed["shard"]) if resumed.get("shard") else None
        archs = tuple(resumed["archs"]) if resumed.get("archs") else None
    else:
        table_dir.start(out, {"quick": quick, "isolated": isolated, "shard": list(shard) if shard else None,
                              "archs": list(archs) if archs else None})  # fmt: skip
    launch.interrupt_on_sigterm()
    planned = shard_of(plan_of(quick, archs), shard)
    done = {key(c): c for c in table_dir.finished(out) if key(c) in {key(p) for p in planned}}
    todo = [axes for axes in planned if key(axes) not in done]
    started = time.time()
    progress = Progress(len(planned), len(done), log)
    roots: dict[str, tuple[Path | None, str | None]] = {}
    for build in dict.fromkeys(c["build"] for c in todo):
        try:
            roots[build] = (patched_copy.prepare_patched_copy(patches=BUILDS[build]) if BUILDS[build] else None, None)
        except Exception as exc:  # recorded on every cell of the build
            roots[build] = (None, f"{type(exc).__name__}: {exc}")
    pools = contextlib.nullcontext(None) if isolated else pool.Pools(out / "cells" / "pools")
    try:
        with pools as warm:
            probe = launch.run_probe if warm is None else warm.run_probe
            for axes in todo:
                cell = _measure(out, roots, axes, timeout_s, probe, progress)
                table_dir.record(out, cell)
                done[key(cell)] = cell
    except (KeyboardInterrupt, launch.Interrupted) as exc:
        name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc)
        log(f"[conformance] interrupted ({name}): {len(done)} of {len(planned)} cells finished, kept in "
            f"{out / table_dir.JOURNAL}; `python -m repro conformance --resume {out}` runs the rest")  # fmt: skip
        return EXIT_INTERRUPTED
    earlier = sum(c["duration_s"] for k, c in done.items() if k not in {key(a) for a in todo})
    cells = [done[key(axes)] for axes in planned]
    write(out, cells, quick, shard, round(time.time() - started + earlier, 1))
    log(f"[conformance] {len(cells)} cells in {time.time() - started:.0f} s -> {out / 'CONFORMANCE.md'}; "
        + progress.summary(cells))  # fmt: skip
    return EXIT_BROKEN if any("error" in c for c in cells) else EXIT_OK


def _measure(out: Path, roots: dict, axes: dict, timeout_s: float, probe: Callable[..., dict], progress) -> dict:
    root, error = roots[axes["build"]]
    neox = axes["arch"] == "gpt-neox"
    runner = run_cell if neox else run_arch_cell
    label = (f"{axes['arch']} {axes['configuration']} {axes['scenario']} {axes['build']} zero{axes['zero_stage']} "
             f"ws{axes['world_size']}")  # fmt: skip
    progress.begin(label)
    return family.measure_cell(
        axes,
        lambda: runner(out / "cells", root, axes, timeout_s if neox else min(timeout_s, 300), probe=probe),
        diagnose if neox else diagnose_arch,
        label,
        progress.end,
        error=error,
        error_limit=400,
    )


def write(out: Path, cells: list[dict], quick: bool, shard: tuple[int, int] | None, duration_s: float) -> None:
    """conformance.json and the reports, rendered from the file as `--render` does (its sorted keys order the
    builds and scenarios), so a run, a resumed run, a merge and a re-render give the same reports."""
    data = {
        "command": COMMAND + (" --quick" if quick else ""),
        "configs": ARCH_CONFIGS,
        "scenarios": SCENARIOS,
        "builds": {name: list(patches) for name, patches in BUILDS.items()},
        "cells": cells,
        "duration_s": duration_s,
        "ds_report": ds_report_text("cpu"),  # for the issue texts: DeepSpeed's template asks for it
    }
    if shard is not None:
        data["shard"] = f"{shard[0]}/{shard[1]}"
    write_json(out / "conformance.json", data)
    write_reports(out, json.loads((out / "conformance.json").read_text()))


def merge(out: Path, shards: list[Path], log: Callable[[str], None] = print, regenerate: bool = False) -> int:
    """`--merge DIR...`: the shards' cells as one run's JSON and reports. Refused (exit 2) unless the shards
    come from one plan, each cell of it present exactly once."""
    out = Path(out)
    table_dir.claim(out, "conformance.json", "conformance", regenerate=regenerate)
    options = [json.loads((d / table_dir.RUN).read_text()) if (d / table_dir.RUN).exists() else None for d in shards]
    plans = {(o["quick"], tuple(o.get("archs") or ())) for o in options if o is not None}
    if None in options or len(plans) != 1:
        raise UsageError("--merge takes shard directories of one plan (each with its run.json; the same --quick "
                         "and --arch)")  # fmt: skip
    quick, archs = plans.pop()
    planned = plan_of(quick, archs or None)
    found: dict[tuple, dict] = {}
    for directory in shards:
        for cell in table_dir.finished(directory):
            if key(cell) in found:
                raise UsageError(f"cell {key(cell)} is in more than one shard ({directory})")
            found[key(cell)] = cell
    missing = [key(a) for a in planned if key(a) not in found]
    if missing:
        raise UsageError(f"{len(missing)} of {len(planned)} cells are in no shard (first: {missing[0]}); "
                         "run or resume the missing shards first")  # fmt: skip
    cells = [found[key(a)] for a in planned]
    for cell in cells:
        table_dir.record(out, cell)
    write(out, cells, quick, None, round(sum(c["duration_s"] for c in cells), 1))
    log(f"[conformance] merged {len(shards)} shards: {len(cells)} cells -> {out / 'CONFORMANCE.md'}")
    return EXIT_BROKEN if any("error" in c for c in cells) else EXIT_OK


def render_only(out: Path, log: Callable[[str], None] = print) -> int:
    """`--render`: the reports again from OUT/conformance.json, measuring nothing."""
    return family.rerender(Path(out), "conformance.json", write_reports, "conformance", log)
