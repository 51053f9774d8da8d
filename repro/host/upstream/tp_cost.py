"""What the series' tensor-parallel generation without an mpu costs (`python -m repro.host.upstream.tp_cost OUT`):
on 2 ranks, on each ZeRO path (pinned ZeRO-3, non-pinned ZeRO-3, ZeRO-2), the whole series at inference_tp_size 1
and 2, beside the series without `tensor-parallel`'s patch at inference_tp_size 1 (DeepSpeed's own path there, in
the same run; at 2 without an mpu it cannot generate: `tensor-parallel`), with repro.rank.tp_cost, writing
OUT/tp-cost.json. CPU evidence: our kernel stand-ins, gloo, 2 cores."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ... import findings, results
from .. import launch
from . import cost_run, patched_copy
from .cost_reports import PATHS, path_of, tp_table
from .script_runs import series_without

RANKS = 2
TPS = (1, 2)
FINDING = "tensor-parallel"


def cells() -> list[tuple[str, tuple[str, ...], int]]:
    """(build, its patches, inference_tp_size) on each ZeRO path: without the fix at 1, with it at 1 and 2."""
    patch = findings.by_id(FINDING).patch
    without = (f"series without {patch}", series_without(patch))
    return [(*without, 1)] + [("whole series", findings.SERIES, tp) for tp in TPS]


def measure(timeout_s: float = 900) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for zero, pin in PATHS:
            for build, patches, tp in cells():
                root = patched_copy.prepare_patched_copy(patches=patches)
                out = Path(tmp) / f"zero{zero}-{pin}-tp{tp}-{len(runs)}.json"
                args = [str(out), str(tp), str(zero), "pinned" if pin else "unpinned"]
                returncode, output = launch.run_module("repro.rank.tp_cost", args, root, RANKS, timeout_s)
                if returncode != 0 or not out.exists():
                    raise RuntimeError(f"{path_of(zero, pin)}, inference_tp_size {tp}, {build}: the ranks failed "
                                       f"(exit {returncode}): {output[-800:]}")  # fmt: skip
                runs.append({"build": build, **results.load(out)})
    return {"evidence": "CPU (PyTorch stand-ins for DeepSpeed's kernels, gloo)", "runs": runs}


def main(argv: list[str]) -> int:
    return cost_run.main(argv, "repro.host.upstream.tp_cost", "tp-cost", measure, tp_table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
