"""Conformance bench: the same plan pooled and `--isolated`, one after the other on this machine; wall time
of each, the cell-by-cell diagnoses compared, per-cell wall time against the cell's own measured work, and
the largest resident set of any process either run started.

Usage: .venv/bin/python scripts/bench-conformance.py [--full] OUT_DIR   (OUT_DIR must not exist)
A benchmark, not a test: run it on a quiet machine (two jobs on 2 cores halve both).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from repro.host.conformance import plan, suite


def _run(out: Path, quick: bool, isolated: bool) -> tuple[float, list[dict]]:
    started = time.monotonic()
    status = suite.main(out, quick=quick, isolated=isolated, log=lambda line: None)
    if status not in (0, 3):
        raise SystemExit(f"conformance run into {out} ended with status {status}")
    return time.monotonic() - started, json.loads((out / "conformance.json").read_text())["cells"]


def main(argv: list[str]) -> int:
    quick = "--full" not in argv
    out = Path([a for a in argv if not a.startswith("--")][0])
    if out.exists():
        raise SystemExit(f"{out} exists: choose a new directory")
    pooled_s, pooled = _run(out / "pooled", quick, isolated=False)
    isolated_s, isolated = _run(out / "isolated", quick, isolated=True)
    differ = [plan.key(a) for a, b in zip(pooled, isolated, strict=True) if a["diagnosis"] != b["diagnosis"]]
    firsts = {c["build"]: i for i, c in reversed(list(enumerate(pooled)))}  # each pool's first cell starts it
    ratios = [
        c["duration_s"] / sum(c["timings_s"].values())
        for i, c in enumerate(pooled)
        if i not in firsts.values() and sum((c.get("timings_s") or {}).values()) > 0
    ]
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024 / 1024
    print(f"plan: {'quick' if quick else 'full'}, {len(pooled)} cells")
    print(f"pooled: {pooled_s:.0f} s; isolated: {isolated_s:.0f} s; speed-up {isolated_s / pooled_s:.2f}x")
    print(f"diagnoses identical cell by cell: {not differ} ({len(differ)} differ: {differ[:3]})")
    if ratios:
        print(f"pooled GPT-NeoX cells, wall / own measured work: max {max(ratios):.2f}x, median "
              f"{sorted(ratios)[len(ratios) // 2]:.2f}x ({len(ratios)} cells; pool starts left out)")  # fmt: skip
    print(f"largest resident set of one process started by either run: {peak_gb:.2f} GB")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
