"""Where a run's results go when no --out is given: a directory that does not exist yet, never reused."""

from __future__ import annotations

import time
from pathlib import Path

from ..options import UsageError
from ..paths import RESULTS_DIR, RUNS_DIR


def new_run_dir(model: str, backend: str, dtype: str | None = None, gpu: str | None = None) -> Path:
    """A directory that does not exist yet. CPU runs go to results/runs/ (not committed); AMD runs to
    results/amd-<gpu>-<dtype>-<model>-<time>/, ready to commit as AMD evidence."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    slug = "".join(c if c.isalnum() or c in "-." else "-" for c in Path(model).name)
    if backend == "rocm":
        base, name = RESULTS_DIR, f"amd-{gpu or 'gpu'}-{dtype or 'bf16'}-{slug}-{stamp}"
    else:
        base, name = RUNS_DIR, f"{stamp}-{backend}-{slug}"
    for n in range(1000):
        candidate = base / (name + ("" if n == 0 else f"-{n}"))
        if not candidate.exists():
            return candidate
    raise UsageError(f"cannot find a free run directory under {base}")
