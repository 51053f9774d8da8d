"""What the series' tensor-parallel generation without an mpu costs (`python -m repro.host.upstream.tp_cost OUT`):
pinned ZeRO-3 on 2 ranks with the whole series, inference_tp_size 1 against 2 (repro.rank.tp_cost), writing
OUT/tp-cost.json. DeepSpeed 0.19.8 as released cannot be the baseline: at inference_tp_size 2 without an mpu it
generates from released partitions (`tensor-parallel`). CPU evidence: our kernel stand-ins, gloo, 2 cores."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ... import findings, results
from .. import launch
from . import cost_run, patched_copy
from .cost_reports import PATHS, path_of, tp_table

RANKS = 2
TPS = (1, 2)


def measure(timeout_s: float = 900) -> dict:
    root = patched_copy.prepare_patched_copy(patches=findings.SERIES)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for zero, pin in PATHS:
            for tp in TPS:
                out = Path(tmp) / f"zero{zero}-{pin}-tp{tp}.json"
                args = [str(out), str(tp), str(zero), "pinned" if pin else "unpinned"]
                returncode, output = launch.run_module("repro.rank.tp_cost", args, root, RANKS, timeout_s)
                if returncode != 0 or not out.exists():
                    raise RuntimeError(f"{path_of(zero, pin)}, inference_tp_size {tp}: the ranks failed (exit "
                                       f"{returncode}): {output[-800:]}")  # fmt: skip
                runs.append(results.load(out))
    return {"evidence": "CPU (PyTorch stand-ins for DeepSpeed's kernels, gloo)", "build": "whole series", "runs": runs}


def main(argv: list[str]) -> int:
    return cost_run.main(argv, "repro.host.upstream.tp_cost", "tp-cost", measure, tp_table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
