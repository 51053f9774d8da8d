"""A table's OUT directory (conformance, family, matrix): who may write there, and the journal of finished
cells that makes a run resumable.

Nothing a user ran is overwritten silently: an OUT that holds results is refused unless the caller resumes it
(`--resume`: only the missing cells run) or asks to regenerate it (`--regenerate`). An OUT that cannot be
written is refused before any cell runs. Both are usage errors (exit 2), found before anything expensive.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import date
from pathlib import Path

from .. import results as result_files
from ..options import UsageError

JOURNAL = "cells.jsonl"  # one finished cell per line, appended as it finishes
RUN = "run.json"  # what was asked for (the plan's options), so a resume runs the same plan


def claim(out: Path, results: str, command: str, resume: bool = False, regenerate: bool = False) -> dict | None:
    """Checks that OUT may be written for this run; returns the resumed run's options (None when not resuming)."""
    if resume and regenerate:
        raise UsageError(
            "--resume and --regenerate exclude each other: resume keeps OUT's cells, regenerate drops them"
        )
    held = [name for name in (results, JOURNAL) if (out / name).exists()]
    if resume:
        if not (out / JOURNAL).exists() and (out / results).exists():
            raise UsageError(f"nothing to resume in {out}: its {results} is a finished run without a journal; pass "
                             "`--regenerate` to run it again")  # fmt: skip
        if not (out / JOURNAL).exists():
            raise UsageError(f"nothing to resume in {out}: no {JOURNAL} (start it with `python -m repro {command} "
                             f"--out {out}`)")  # fmt: skip
        options = result_files.load_if_written(out / RUN) or {}
    elif held and not regenerate:
        raise UsageError(
            f"{out} holds the results of an earlier run ({', '.join(held)}): pass `--resume {out}` to run only its "
            f"missing cells, or `--regenerate` to run every cell again and replace them"
        )
    else:
        options = None
    check_writable(out)
    if regenerate:
        for name in held:
            (out / name).unlink()
    return options


def check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write to {out}: {exc.strerror or exc}; choose another --out") from None


def start(out: Path, options: dict) -> None:
    result_files.write(out / RUN, options, indent=None)


def record(out: Path, cell: dict) -> None:
    """Appends one finished cell and forces it to disk: Ctrl-C or a crash after this loses nothing of it."""
    with open(out / JOURNAL, "a") as f:
        f.write(json.dumps(cell, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def rewrite(out: Path, cells: list[dict]) -> None:
    """The journal replaced by these cells at once (a kill leaves the old journal or the new one, never half)."""
    partial = out / (JOURNAL + ".partial")
    partial.write_text("".join(json.dumps(cell, sort_keys=True) + "\n" for cell in cells))
    os.replace(partial, out / JOURNAL)


def measure_again(out: Path, options: dict, cells: list[dict], drop: Callable[[dict], bool], command: str) -> list:
    """Takes the journal's `cells` that `drop` names out of it, so that the resume measures them again (a patch joined
    or left their build since), and records that rerun (its command, day and cells) in run.json beside the options it
    was started with; returns every rerun recorded there, for the results to say so."""
    kept = [c for c in cells if not drop(c)]
    rerun = {"command": command, "date": date.today().isoformat(), "cells": len(cells) - len(kept)}
    reruns = [*options.get("reruns", []), rerun]
    rewrite(out, kept)
    start(out, {**options, "reruns": reruns})
    return reruns


def finished(out: Path) -> list[dict]:
    """The journal's cells; a last line cut short by a kill is dropped (that cell runs again)."""
    path = out / JOURNAL
    if not path.exists():
        return []
    cells = []
    for line in path.read_text().splitlines():
        try:
            cells.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return cells
