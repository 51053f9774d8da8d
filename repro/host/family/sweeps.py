"""`python -m repro family`: every cell of the chosen sweeps, one probe (repro.rank.cell_probe) per cell on its
build's DeepSpeed, then family.json and the reports."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ... import results
from ...fixstatus import installed_deepspeed
from ...options import EXIT_BROKEN, EXIT_OK, UsageError
from .. import launch, table_dir
from ..tables import measure_cell
from ..upstream import patched_copy
from .diagnosis import diagnose
from .plan import AXES, BUILDS, COMMAND, PATCHES, PROBE, SWEEPS, cells_of, name_of
from .report import write_reports


def applied_patches(root: Path | None) -> dict[str, bool]:
    """Which of our patches the DeepSpeed under `root` (None: the installed one) carries, by reversing them."""
    tree = root if root is not None else installed_deepspeed()[0].parent
    return {number: patched_copy.is_applied(tree, number) for number in PATCHES}


def run_cell(
    work: Path,
    root: Path | None,
    axes: dict,
    timeout_s: float = 600,
    extra: dict | None = None,
    probe: Callable[..., dict] = launch.run_probe,
) -> dict:
    """One cell under torchrun (or `probe`: a warm pool's); returns its measurements (raises on a failed or
    hung cell). `extra`: more probe settings (the conformance suite's model configuration)."""
    slug = "-".join(f"{axes[k]}" for k in AXES[1:]).replace(" ", "").lower()
    out = work / axes["build"] / f"{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = out.with_suffix(".spec.json")  # repro.rank.cell_probe.spec_path
    keys = {"targets": "targets", "pin_parameters": "pin", "order": "order", "zero_stage": "zero_stage"}
    results.write(
        spec, {**{probe_key: axes[k] for k, probe_key in keys.items()}, **(extra or {})}, indent=None, sort_keys=False
    )
    try:
        result = probe(PROBE, out, root, ranks=axes["world_size"], timeout_s=timeout_s)
    finally:
        spec.unlink(missing_ok=True)
    out.unlink(missing_ok=True)  # kept in family.json
    return result


def main(
    out: Path,
    sweeps: Sequence[str] = tuple(SWEEPS),
    builds: Sequence[str] | None = None,
    timeout_s: float = 600,
    log: Callable[[str], None] = print,
    regenerate: bool = False,
) -> int:
    """Runs every cell, writes OUT/family.json and OUT/FAMILY.md. 0: every cell measured; 3: some cell
    broke (recorded with its error, the others measured); 2: an unknown sweep or build, before anything runs.
    UsageError (exit 2): OUT holds cells of these sweeps (without `regenerate`), or cannot be written."""
    unknown = [w for w in sweeps if w not in SWEEPS] + [b for b in builds or () if b not in BUILDS]
    if unknown:
        log(f"[family] unknown sweep or build {unknown}: sweeps are {list(SWEEPS)}, builds {list(BUILDS)}")
        return 2
    out = Path(out)
    work = out / "cells"
    # Sweeps fill OUT in several sittings (a sweep's cells replace only that sweep's): refuse to replace any
    # without `regenerate`.
    held = (results.load_if_written(out / "family.json") or {}).get("cells", [])
    again = sorted({c["sweep"] for c in held if c.get("sweep") in sweeps})
    if again and not regenerate:
        raise UsageError(f"{out / 'family.json'} already holds the {', '.join(again)} sweep's cells: pass "
                         "`--regenerate` to measure them again and replace them, or choose another --out")  # fmt: skip
    table_dir.check_writable(out)
    started = time.time()
    planned = cells_of(sweeps, builds)
    build_info, roots = {}, {}
    for build in dict.fromkeys(c["build"] for c in planned):
        try:
            root = patched_copy.prepare_patched_copy(patches=BUILDS[build]) if BUILDS[build] else None
            applied: dict | None = applied_patches(root)
            error = None
        except Exception as exc:  # a patch that does not apply: every cell of this build records it
            root, applied, error = None, None, f"{type(exc).__name__}: {exc}"
        roots[build] = (root, applied, error)
        build_info[build] = {
            "patches": list(BUILDS[build]),
            "patches_applied": applied,
            "deepspeed_root": None if root is None else str(root),
            "error": error,
        }
    log(f"[family] {len(planned)} cells ({', '.join(sweeps)})")
    cells = [_cell(work, *roots[axes["build"]], axes, timeout_s, log) for axes in planned]
    # Cells of other sweeps already in OUT/family.json are kept (a sweep can be re-run or added on its own).
    previous = results.load_if_written(out / "family.json") or {}
    kept = [c for c in previous.get("cells", []) if c.get("sweep") not in sweeps]
    cells = kept + cells
    build_info = {**previous.get("builds", {}), **build_info}
    sweeps = tuple(dict.fromkeys([*(c.get("sweep") for c in kept), *sweeps]))
    if work.exists() and not any(p.is_file() for p in work.rglob("*")):
        shutil.rmtree(work)
    data = {
        "command": COMMAND + ("" if set(sweeps) == set(SWEEPS) else f" --sweeps {','.join(sweeps)}"),
        "sweeps": {name: {k: list(v) for k, v in SWEEPS[name].items()} for name in sweeps},
        "builds": build_info,
        "cells": cells,
        "duration_s": round(time.time() - started, 1) + previous.get("duration_s", 0.0) * bool(kept),
    }
    results.write(out / "family.json", data)
    # Rendered from the file, as `--render` does (the JSON's sorted keys order the builds), so a run's reports
    # and a re-render are the same bytes.
    write_reports(out, results.load(out / "family.json"))
    failed = [c for c in cells if "error" in c]
    log(f"[family] {len(cells) - len(failed)}/{len(cells)} cells measured -> {out / 'FAMILY.md'}")
    return EXIT_BROKEN if failed else EXIT_OK


def _cell(work, root, applied, error, axes: dict, timeout_s, log) -> dict:
    """Runs one cell, or records why it could not run."""

    def measure() -> dict:
        result = run_cell(work, root, axes, timeout_s)
        return {**result, "deepspeed_as_intended": _as_intended(result, root, applied)}

    head = {**axes, "patches_applied": applied}
    return measure_cell(head, measure, diagnose, f"[family] {name_of(head)}", log, error=error)


def _as_intended(result: dict, root: Path | None, applied: dict) -> bool:
    """The ranks imported the build's DeepSpeed (the patched copy when there is one) and its #8391 state
    read from source agrees with the patches the host found applied."""
    path = Path(result["deepspeed"]["path"])
    where = root is None or path.is_relative_to(Path(root).resolve())
    return where and result["deepspeed"]["fix_8391_in_source"] == applied[patched_copy.FIX_8391]
