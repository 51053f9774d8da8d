"""`python -m repro conformance`: the Hybrid Engine against native Hugging Face, cell by cell.

Architectures: GPT-NeoX (with each model configuration that changes its forward math), GPT-Neo and Llama;
axes: DeepSpeed build, ZeRO-2/3, 1/2 ranks and the caller's scenario (call order, DeepSpeed-Chat LoRA,
pin_parameters). Every cell runs one probe (`repro.rank.cell_probe`, the architecture's adapter from
`repro.rank.archs`: native vs HE per generated step, native twins, weights restored, and for a fused QKV the
weight states per layer), in a warm pool or one torchrun per cell. Diagnoses come from the measurements only
(`diagnosis`). Writes OUT/conformance.json, OUT/CONFORMANCE.md, OUT/conformance.png and one issue text per
confirmed bug (`report`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from ... import results
from ...findings import verdicts
from ...options import EXIT_BROKEN, EXIT_INTERRUPTED, EXIT_OK, UsageError, ds_accelerator
from .. import launch, pool, table_dir, tables
from ..cell_progress import Progress
from ..envs import transformers_env
from ..upstream import patched_copy
from ..upstream.ds_report import ds_report_text
from . import devices, my_model
from .cells import run_cell
from .diagnosis import diagnose
from .evidence import CPU_EVIDENCE
from .plan import ARCH_CONFIGS, BUILDS, COMMAND, SCENARIOS, key, plan_of, shard_of
from .report import write_reports


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
    model: dict | None = None,
    backend: str = "cpu",
    ranks: int | None = None,
    again: tuple[str, ...] = (),
) -> int:
    """Runs the plan (or a shard of it; `archs`: only these architectures' cells), each finished cell
    journaled at once; `resume` runs only the cells OUT's journal lacks, with the options it was started
    with. Exit 0, 3 if a cell could not be measured, 130 on Ctrl-C / SIGTERM (every rank stopped; the
    finished cells kept). `model`: "check my model" ({"config": PATH, "weights": bool, "allow_pickle": bool}):
    my_model's cells instead of the plan's. `backend`: cpu, or rocm / cuda: refused (exit 2) unless the machine
    has what the cells need (`devices.check`); GPU cells run one torchrun per cell. `ranks`: only the cells of
    this world size (a machine with one GPU). `again` (build names), with `resume`: those builds' cells are measured
    again (a patch joined or left the build since), and the run says so."""
    out = Path(out)
    if again and not resume:
        raise UsageError("--again re-measures builds of an earlier run: give --resume OUT")
    if not resume:  # refused before OUT is claimed: a --regenerate refused here has removed nothing
        planned = _planned(model, quick, archs, shard, ranks)
        evidence = devices.check(backend, planned)
    resumed = table_dir.claim(out, "conformance.json", "conformance", resume=resume, regenerate=regenerate)
    reruns: list = []  # cells measured again since the run began (--again), recorded in run.json
    if resumed is not None:
        quick, isolated = resumed.get("quick", quick), resumed.get("isolated", isolated)
        shard = tuple(resumed["shard"]) if resumed.get("shard") else None
        archs = tuple(resumed["archs"]) if resumed.get("archs") else None
        model, backend, ranks = resumed.get("model"), resumed.get("backend", "cpu"), resumed.get("ranks")
        planned = _planned(model, quick, archs, shard, ranks)
        evidence = devices.check(backend, planned)
        reruns = _drop(out, resumed, again, log) if again else resumed.get("reruns", [])
    if backend != "cpu" and not isolated:
        log(f"[conformance] --backend {backend}: one torchrun per cell (a warm pool forks its ranks after its "
            "imports, which CUDA and ROCm do not survive)")  # fmt: skip
        isolated = True
    if resumed is None:
        table_dir.start(out, {"quick": quick, "isolated": isolated, "shard": list(shard) if shard else None,
                              "archs": list(archs) if archs else None, "model": model, "backend": backend,
                              "ranks": ranks, "evidence": evidence})  # fmt: skip
    launch.interrupt_on_sigterm()
    keys = {key(p) for p in planned}
    done = {key(c): c for c in table_dir.finished(out) if key(c) in keys}
    earlier = sum(c["duration_s"] for c in done.values())  # the resumed cells' own time
    todo = [axes for axes in planned if key(axes) not in done]
    started = time.time()
    progress = Progress(len(planned), len(done), log)
    roots = prepare(todo)
    pools = contextlib.nullcontext(None) if isolated else pool.Pools(out / "cells" / "pools")
    try:
        with pools as warm:
            probe = launch.run_probe if warm is None else warm.run_probe
            for axes in todo:
                cell = measure(out, roots, axes, timeout_s, probe, progress, backend=backend)
                table_dir.record(out, cell)
                done[key(cell)] = cell
    except (KeyboardInterrupt, launch.Interrupted) as exc:
        name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc)
        log(f"[conformance] interrupted ({name}): {len(done)} of {len(planned)} cells finished, kept in "
            f"{out / table_dir.JOURNAL}; `python -m repro conformance --resume {out}` runs the rest")  # fmt: skip
        return EXIT_INTERRUPTED
    cells = [done[key(axes)] for axes in planned]
    write(out, cells, quick, shard, round(time.time() - started + earlier, 1), model, evidence, reruns)
    log(f"[conformance] {len(cells)} cells in {time.time() - started:.0f} s -> {out / 'CONFORMANCE.md'}; "
        + progress.summary(cells))  # fmt: skip
    return EXIT_BROKEN if any("error" in c for c in cells) else EXIT_OK


def _drop(out: Path, options: dict, again: tuple[str, ...], log: Callable[[str], None]) -> list:
    """These builds' journal cells measured again by the resume (table_dir.measure_again); every rerun recorded, for
    conformance.json. UsageError for a build with no cell there."""
    cells = table_dir.finished(out)
    for build in again:
        if not any(c["build"] == build for c in cells):
            builds = sorted({c["build"] for c in cells})
            raise UsageError(f"--again {build!r}: no cell of that build in {out} (its builds: {', '.join(builds)})")
    spec = ",".join(f"'{b}'" for b in again)
    reruns = table_dir.measure_again(out, options, cells, lambda c: c["build"] in again,
                                     f"python -m repro conformance --resume {out} --again {spec}")  # fmt: skip
    log(f"[conformance] measuring {reruns[-1]['cells']} cells again: {spec}")
    return reruns


def _planned(model: dict | None, quick: bool, archs, shard: tuple[int, int] | None, ranks: int | None) -> list:
    if model and model.get("setup"):  # `affected --run`: the user's setup
        cells = my_model.setup_plan(model["setup"], Path(model["config"]) if model.get("config") else None)
    elif model:
        config, weights, pickle = Path(model["config"]), model["weights"], model["allow_pickle"]
        cells = my_model.plan(config, weights, pickle, model.get("transformers"))
    else:
        cells = plan_of(quick, archs)
    if ranks is not None:
        cells = [c for c in cells if c["world_size"] == ranks]
        if not cells:
            raise UsageError(f"--ranks {ranks}: no cell of this plan runs on {ranks} ranks")
    return shard_of(cells, shard)


def prepare(cells: list[dict]) -> dict[tuple[str, str], tuple[Path | None, str | None]]:
    """Per (build, Transformers version) of `cells`: the directory the ranks put first on PYTHONPATH (None:
    the environment's own), or why it could not be made (recorded on every cell that needs it). Each patched
    copy and each overlay is made once."""
    builds = {build: made(build_root, build) for build in dict.fromkeys(c["build"] for c in cells)}
    overlays = {v: made(transformers_env.overlay, v) for v in dict.fromkeys(c["transformers"] for c in cells)}
    roots = {}
    for build, version in dict.fromkeys((c["build"], c["transformers"]) for c in cells):
        roots[(build, version)] = joined_root(builds[build], overlays[version])
    return roots


def joined_root(
    build: tuple[Path | None, str | None], overlay: tuple[Path | None, str | None]
) -> tuple[Path | None, str | None]:
    """A made build and a made overlay (each `made`'s pair) as the one directory the ranks put first, or the first
    error of the two."""
    (root, build_error), (overlay_dir, overlay_error) = build, overlay
    error = build_error or overlay_error
    return (None if error else transformers_env.joined(root, overlay_dir), error)


def build_root(build: str) -> Path | None:
    """The patched copy of DeepSpeed a build runs (None: the installed one)."""
    return patched_copy.prepare_patched_copy(patches=BUILDS[build]) if BUILDS[build] else None


def made(make: Callable[[str], Path | None], name: str) -> tuple[Path | None, str | None]:
    """What `make(name)` made, or why it could not: the error every cell that needs it records."""
    try:
        return make(name), None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _on_intended_transformers(result: dict, axes: dict) -> dict:
    """A cell that ran another Transformers than its axis says is broken, never a measurement of that axis."""
    ran = result.get("versions", {}).get("transformers")
    if ran != axes["transformers"]:
        raise RuntimeError(f"the ranks imported Transformers {ran}, not {axes['transformers']}")
    return result


def measure(
    out: Path, roots: dict, axes: dict, timeout_s: float, probe: Callable[..., dict], progress, backend: str = "cpu"
) -> dict:
    root, error = roots[(axes["build"], axes["transformers"])]
    label = (f"{axes['arch']} {axes['configuration']} {axes['scenario']} {axes['build']} zero{axes['zero_stage']} "
             f"ws{axes['world_size']} transformers {axes['transformers']}")  # fmt: skip
    progress.begin(label)
    cell = tables.measure_cell(
        axes,
        # A cell takes seconds; a rank left waiting in a collective by its peer's crash is stopped within 5 min.
        lambda: _on_intended_transformers(
            run_cell(out / "cells", root, axes, min(timeout_s, 300), probe=probe, backend=backend), axes
        ),
        diagnose,
        label,
        progress.end,
        error=error,
        error_limit=400,
    )
    cell["verdicts"] = [verdicts.of(d) for d in cell["diagnosis"]]
    return cell


def write(
    out: Path,
    cells: list[dict],
    quick: bool,
    shard: tuple[int, int] | None,
    duration_s: float,
    model: dict | None = None,
    evidence: dict | None = None,
    reruns: list[dict] | None = None,
) -> None:
    """conformance.json and the reports, rendered from the file as `--render` does (its sorted keys order the
    builds and scenarios), so a run, a resumed run, a merge and a re-render give the same reports."""
    evidence = evidence or CPU_EVIDENCE
    backend = evidence["backend"]
    command = COMMAND + (" --quick" if quick else "") + (f" --backend {backend}" if backend != "cpu" else "")
    configs = ARCH_CONFIGS
    if model:
        flags = " --weights" * model["weights"] + " --allow-pickle" * model["allow_pickle"]
        command = f"python -m repro conformance --config {model['config']}{flags} --out {out}"
        configs = {cells[0]["arch"]: {my_model.NAME: cells[0]["config"]}} if cells else {}
    data = {
        "command": command,
        "configs": configs,
        "scenarios": SCENARIOS,
        "builds": {name: list(patches) for name, patches in BUILDS.items()},
        "cells": cells,
        "duration_s": duration_s,
        "ds_report": ds_report_text(ds_accelerator(backend)),  # DeepSpeed's template asks for it
        "backend": backend,
        "evidence": evidence,
    }
    if shard is not None:
        data["shard"] = f"{shard[0]}/{shard[1]}"
    if reruns:
        data["reruns"] = reruns
    results.write(out / "conformance.json", data)
    write_reports(out, results.load(out / "conformance.json"))


def merge(out: Path, shards: list[Path], log: Callable[[str], None] = print, regenerate: bool = False) -> int:
    """`--merge DIR...`: the shards' cells as one run's JSON and reports. Refused (exit 2), with nothing written,
    unless the shards come from one plan, each cell of it present exactly once."""
    out = Path(out)
    options = [results.load_if_written(d / table_dir.RUN) for d in shards]
    plans = {(o["quick"], tuple(o.get("archs") or ()), o.get("backend", "cpu"), o.get("ranks")) for o in options
             if o is not None}  # fmt: skip
    if None in options or len(plans) != 1:
        raise UsageError("--merge takes shard directories of one plan (each with its run.json; the same --quick, "
                         "--arch, --backend and --ranks)")  # fmt: skip
    quick, archs, _, ranks = plans.pop()
    planned = _planned(None, quick, archs or None, None, ranks)
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
    # OUT is claimed only once the shards are known to make one run: a refusal above writes nothing.
    table_dir.claim(out, "conformance.json", "conformance", regenerate=regenerate)
    for cell in cells:
        table_dir.record(out, cell)
    evidence = options[0].get("evidence") or CPU_EVIDENCE  # shards from before the backend option: CPU
    write(out, cells, quick, None, round(sum(c["duration_s"] for c in cells), 1), evidence=evidence)
    log(f"[conformance] merged {len(shards)} shards: {len(cells)} cells -> {out / 'CONFORMANCE.md'}")
    return EXIT_BROKEN if any("error" in c for c in cells) else EXIT_OK


def rediagnose(out: Path, log: Callable[[str], None] = print) -> int:
    """`--rediagnose`: every cell's diagnosis and findings again from its stored measurements (a tolerance or a
    diagnosis rule changed), measuring nothing; then the reports."""
    path = Path(out) / "conformance.json"
    if not path.is_file():
        raise UsageError(f"{path} does not exist: run `python -m repro conformance --out {out}` first")
    data = results.load(path)
    changed = 0
    for cell in data["cells"]:
        if "error" not in cell:  # a cell that did not run has no measurements to diagnose
            new = diagnose(cell)
            changed += new != cell["diagnosis"]
            cell["diagnosis"] = new
        cell.pop("findings", None)  # the ids alone, recorded before cells carried their verdicts
        cell["verdicts"] = [verdicts.of(d) for d in cell["diagnosis"]]
    results.write(path, data)
    write_reports(Path(out), data)
    log(f"[conformance] rediagnosed {len(data['cells'])} cells from their measurements: {changed} changed; "
        f"reports rendered in {out}")  # fmt: skip
    return EXIT_OK


def render_only(out: Path, log: Callable[[str], None] = print) -> int:
    """`--render`: the reports again from OUT/conformance.json, measuring nothing; each cell's diagnosis is worded
    again from its verdicts first (a finding's sentence reworded in the registry), and the JSON rewritten if so."""
    path = Path(out) / "conformance.json"
    if path.exists():
        data = results.load(path)
        reworded = reword(data["cells"])
        if reworded:
            results.write(path, data)
            log(f"[conformance] {reworded} cells worded again from their verdicts in {path}")
    return tables.rerender(Path(out), "conformance.json", write_reports, "conformance", log)


def reword(cells: list[dict]) -> int:
    """Each cell's diagnosis in the registry's words of today, from its verdicts; how many changed (a cell of an
    older run without verdicts keeps its words)."""
    changed = 0
    for cell in cells:
        if "verdicts" in cell:
            words = [verdicts.sentence(v) for v in cell["verdicts"]]
            changed += words != cell["diagnosis"]
            cell["diagnosis"] = words
    return changed
