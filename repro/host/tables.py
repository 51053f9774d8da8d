"""What every table (the family, the conformance suite) shares: one cell measured without letting its failure
end the table, and the reports rendered again from a table's JSON alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .. import results
from ..options import EXIT_OK, EXIT_USAGE


def rerender(out: Path, name: str, write: Callable[[Path, dict], None], command: str, log=print) -> int:
    """Writes a table's reports again from its JSON (OUT/`name`) only, for `python -m repro COMMAND --render`."""
    path = out / name
    if not path.exists():
        log(f"[{command}] {path} does not exist: run `python -m repro {command} --out {out}` first")
        return EXIT_USAGE
    write(out, results.load(path))
    log(f"[{command}] rendered the reports in {out} from {path}")
    return EXIT_OK


def measure_cell(
    head: dict,
    measure: Callable[[], dict],
    diagnose: Callable[[dict], list[str]],
    label: str,
    log: Callable[[str], None],
    error: str | None = None,
    error_limit: int | None = None,
) -> dict:
    """One cell of a table (this one, or the conformance suite's): its measurements, or why it could not
    run (`error`: known before; else what `measure` raised); then its diagnosis and one log line. Never
    raises (except an interrupt): a failed or hung cell is data, not the end of the table."""
    t0 = time.time()
    if error is None:
        try:
            cell = {**head, **measure()}
        except Exception as exc:
            cell = {**head, "error": f"{type(exc).__name__}: {exc}"[:error_limit]}
    else:
        cell = {**head, "error": error[:error_limit]}
    cell["duration_s"] = round(time.time() - t0, 1)
    cell["diagnosis"] = diagnose(cell)
    log(f"{label}: {'; '.join(cell['diagnosis'])} ({cell['duration_s']:.0f} s)")
    return cell


def num(v: float) -> str:
    """A measured difference as the tables print it: 0 exactly, else 3 significant digits."""
    return "0" if v == 0 else f"{v:.3g}"
