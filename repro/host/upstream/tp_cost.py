"""What the series' tensor-parallel generation without an mpu costs (`python -m repro.host.upstream.tp_cost OUT`):
pinned ZeRO-3 on 2 ranks with the whole series, inference_tp_size 1 against 2 (repro.rank.tp_cost), writing
OUT/tp-cost.json. DeepSpeed 0.19.8 as released cannot be the baseline: at inference_tp_size 2 without an mpu it
generates from released partitions (`tensor-parallel`). CPU evidence: our kernel stand-ins, gloo, 2 cores."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from ... import findings
from .. import launch
from . import cost_run, patched_copy

RANKS = 2
TPS = (1, 2)


def measure(timeout_s: float = 900) -> dict:
    root = patched_copy.prepare_patched_copy(patches=findings.SERIES)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for tp in TPS:
            out = Path(tmp) / f"tp{tp}.json"
            returncode, output = launch.run_module("repro.rank.tp_cost", [str(out), str(tp)], root, RANKS, timeout_s)
            if returncode != 0 or not out.exists():
                raise RuntimeError(f"inference_tp_size {tp}: the ranks failed (exit {returncode}): {output[-800:]}")
            runs.append(json.loads(out.read_text()))
    return {"evidence": "CPU (PyTorch stand-ins for DeepSpeed's kernels, gloo)", "build": "whole series", "runs": runs}


def render(result: dict) -> str:
    lines = ["| inference_tp_size | layer weights held per rank while generating | of the layers' weights | "
             "generate, median of 5 |", "|---|---|---|---|"]  # fmt: skip
    for run in result["runs"]:
        held, whole = run["held_during_generate_bytes"], run["layer_weight_bytes"]
        lines.append(f"| {run['inference_tp_size']} | {held / 2**20:.1f} MiB | {held / whole:.2f} | "
                     f"{run['generate_median_s']:.3f} s |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return cost_run.main(argv, "repro.host.upstream.tp_cost", "tp-cost", measure, render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
