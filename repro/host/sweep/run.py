"""Runs the sweep's cells release by release, each finished cell journaled at once (a resume runs only the missing
ones, on the releases the run was started with), then writes OUT/sweep.json and the report. Cells are conformance
cells (repro.host.conformance: the same probe, measurements and diagnosis), so a sweep cell and a suite cell of the
same axes mean the same thing. CPU evidence: gloo, 2 cores."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

from ... import results
from ...options import EXIT_BROKEN, EXIT_INTERRUPTED, EXIT_OK, UsageError, ds_accelerator
from .. import launch, pool, table_dir
from ..cell_progress import Progress
from ..conformance.evidence import CPU_EVIDENCE
from ..conformance.plan import key
from ..conformance.suite import joined_root, made, measure
from ..envs import transformers_env
from ..upstream import patched_copy
from ..upstream.ds_report import ds_report_text
from . import plan, releases
from .report import write_reports

RESULTS = "sweep.json"
MOST_POOLS = 2  # one release's two builds warm at once (~350 MB each)


def main(
    out: Path,
    versions: list[str] | None = None,
    resume: bool = False,
    regenerate: bool = False,
    timeout_s: float = 300,
    log: Callable[[str], None] = print,
    again: tuple[tuple[str, str, str], ...] = (),
) -> int:
    """Exit 0, 3 if a cell could not be measured, 130 on Ctrl-C / SIGTERM (the finished cells kept). `again`
    ((build, arch, release), ...): with `resume`, those cells are measured again (a build changed under them: a
    patch joined the series), and sweep.json says so."""
    out = Path(out)
    if again and not resume:
        raise UsageError("--again re-measures cells of an earlier sweep: give --resume OUT")
    if resume:
        _journal_from_partial(out)
    resumed = table_dir.claim(out, RESULTS, "sweep", resume=resume, regenerate=regenerate)
    reruns = (resumed or {}).get("reruns", [])
    if again:
        reruns = _drop(out, resumed, again, log)
    if resumed is not None:
        versions, index_read = resumed["releases"], resumed.get("index_read")
    else:
        index_read = None if versions else date.today().isoformat()
        versions = versions or releases.from_index()
        unknown = [v for v in versions if not all(p.isdigit() for p in v.split("."))]
        if unknown:
            raise UsageError(f"--releases takes release numbers such as 4.31.0: not {', '.join(unknown)}")
        releases.pin_missing(versions, log)
        table_dir.start(out, {"releases": versions, "index_read": index_read})
    planned = plan.cells(versions)
    launch.interrupt_on_sigterm()
    keys = {key(p) for p in planned}
    done = {key(c): c for c in table_dir.finished(out) if key(c) in keys}
    earlier = sum(c["duration_s"] for c in done.values())
    started = time.time()
    progress = Progress(len(planned), len(done), log, prefix="[sweep]")
    roots: dict[tuple[str, str], tuple[Path | None, str | None]] = {}
    try:
        with pool.Pools(out / "cells" / "pools", most=MOST_POOLS) as warm:
            for axes in planned:
                if key(axes) in done:
                    continue
                where = (axes["build"], axes["transformers"])
                if where not in roots:  # made when the release comes up: the first cells start at once
                    roots[where] = _root(*where)
                cell = measure(out, roots, axes, timeout_s, warm.run_probe, progress)
                table_dir.record(out, cell)
                done[key(cell)] = cell
    except (KeyboardInterrupt, launch.Interrupted) as exc:
        name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc)
        finished = [done[key(axes)] for axes in planned if key(axes) in done]
        if finished:  # what ran so far, reported as partial; the journal stays for the resume
            write(out, versions, finished, round(time.time() - started + earlier, 1), index_read, len(planned), reruns)
        log(f"[sweep] interrupted ({name}): {len(done)} of {len(planned)} cells finished, kept in "
            f"{out / table_dir.JOURNAL}; `python -m repro sweep --resume {out}` runs the rest")  # fmt: skip
        return EXIT_INTERRUPTED
    cells = [done[key(axes)] for axes in planned]
    write(out, versions, cells, round(time.time() - started + earlier, 1), index_read, reruns=reruns)
    log(f"[sweep] {len(cells)} cells in {time.time() - started:.0f} s -> {out / 'SWEEP.md'}")
    return EXIT_BROKEN if any("error" in c for c in cells) else EXIT_OK


def _journal_from_partial(out: Path) -> None:
    """A committed partial sweep (a fresh checkout has its sweep.json, not the journal beside it): its cells and
    options become the journal a resume reads, so only the missing cells run."""
    data = results.load_if_written(out / RESULTS)
    if data is None or not data.get("planned") or (out / table_dir.JOURNAL).exists():
        return
    table_dir.start(out, {"releases": data["releases"], "index_read": data.get("index_read")})
    for cell in data["cells"]:
        table_dir.record(out, cell)


def _drop(out: Path, options: dict, again: tuple[tuple[str, str, str], ...], log: Callable[[str], None]) -> list:
    """The journal's cells of each (build, arch, release) measured again by the resume (table_dir.measure_again);
    every rerun recorded, for sweep.json. UsageError for a triple that names no cell."""
    cells = table_dir.finished(out)
    for build, arch, release in again:
        if not any((c["build"], c["arch"], c["transformers"]) == (build, arch, release) for c in cells):
            raise UsageError(f"--again {build}:{arch}:{release}: the sweep in {out} has no such cells (BUILD:ARCH:"
                             f"RELEASE; builds: {', '.join(plan.BUILDS)})")  # fmt: skip
    spec = ",".join(":".join(t) for t in again)
    reruns = table_dir.measure_again(out, options, cells,
                                     lambda c: (c["build"], c["arch"], c["transformers"]) in set(again),
                                     f"python -m repro sweep --resume {out} --again {spec}")  # fmt: skip
    log(f"[sweep] measuring {reruns[-1]['cells']} cells again: {spec}")
    return reruns


def _root(build: str, version: str) -> tuple[Path | None, str | None]:
    """The directory a build on a release runs from (first on the ranks' PYTHONPATH), or why it cannot be made."""
    patches, own = plan.BUILDS[build]
    copy = made(lambda _: patched_copy.prepare_patched_copy(patches=patches, environment=own), build)
    return joined_root(copy, made(transformers_env.overlay, version))


def write(
    out: Path,
    versions: list[str],
    cells: list[dict],
    duration_s: float,
    index_read: str | None,
    planned: int = 0,
    reruns: list[dict] | None = None,
) -> None:
    """sweep.json and the reports; `planned` > len(cells): a partial run (interrupted), which says so."""
    data = {
        "command": plan.COMMAND,
        "releases": versions,
        "index_read": index_read,  # the day PyPI listed these releases (None: named with --releases)
        "builds": {name: {"patches": list(p), "own_fallbacks": own} for name, (p, own) in plan.BUILDS.items()},
        "cells": cells,
        "duration_s": duration_s,
        "ds_report": ds_report_text(ds_accelerator("cpu")),
        "backend": "cpu",
        "evidence": CPU_EVIDENCE,
        **({"planned": planned} if planned > len(cells) else {}),
        **({"reruns": reruns} if reruns else {}),
    }
    results.write(out / RESULTS, data)
    write_reports(out, results.load(out / RESULTS))
