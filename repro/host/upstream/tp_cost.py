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

RANKS = 2
TPS = (1, 2)
# The ZeRO paths generate() takes: pinned ZeRO-3 (DeepSpeed-Chat's), non-pinned ZeRO-3 (a layer gathered at a time
# as released at tp 1), ZeRO-2 (whole weights on every rank; pin_parameters is a ZeRO-3 setting).
PATHS = ((3, True), (3, False), (2, True))


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


def path_of(zero: int, pin: bool) -> str:
    return "ZeRO-2" if zero == 2 else f"ZeRO-3, {'pinned' if pin else 'not pinned'}"


def setup(run: dict) -> str:
    """The measured setup in words, from a run's own record."""
    return (f"{run['ranks']} ranks, a {run['model']['num_hidden_layers']}-layer GPT-NeoX of hidden size "
            f"{run['model']['hidden_size']}")  # fmt: skip


def section(result: dict) -> str:
    """A pull request's cost section: the setup, what the fix trades on each ZeRO path, the table."""
    run = result["runs"][0]
    return (f"{setup(run)}, prompt {run['prompt_tokens']} and {run['new_tokens']} new tokens, with the whole series, "
            "on each ZeRO path generate() takes (CPU evidence: PyTorch stand-ins for the kernels, gloo; not measured "
            f"on a GPU). {trades(result)}\n\n{render(result)}")  # fmt: skip


def trades(result: dict) -> str:
    """What the fix trades on each ZeRO path, in words, from the measured runs (inference_tp_size 1 against 2)."""
    by = {(r["zero_stage"], r["pin_parameters"], r["inference_tp_size"]): r for r in result["runs"]}

    def mib(run: dict, key: str = "held_during_generate_bytes") -> str:
        return f"{run[key] / 2**20:.1f} MiB"

    pinned, unpinned, zero2 = ((z, p) for z, p in PATHS)
    one, two = by[(*pinned, 1)], by[(*pinned, 2)]
    said = [
        f"Pinned ZeRO-3 (DeepSpeed-Chat's): at tp 2 each rank holds {mib(two)} of slices while it generates, "
        f"where tp 1 holds every layer gathered ({mib(one)})."
    ]
    one, two = by[(*unpinned, 1)], by[(*unpinned, 2)]
    said.append(
        f"Non-pinned ZeRO-3 trades memory for working generation: at tp 2 each rank holds its slice of every "
        f"layer for the whole generate ({mib(two)}), where tp 1 gathers one layer at a time ({mib(one)} at "
        "most). As released, tp 2 without an mpu crashes in the ZeRO-2 and pinned ZeRO-3 cells of the conformance "
        "suite (`tensor-parallel`); non-pinned it is not measured as released."
    )
    one, two = by[(*zero2, 1)], by[(*zero2, 2)]
    said.append(
        f"ZeRO-2: at tp 2 each rank copies its slices ({mib(two, 'copied_during_generate_bytes')}) beside the "
        f"whole training weights at every generate() and frees them after it (generate "
        f"{two['generate_median_s']:.3f} s against {one['generate_median_s']:.3f} s at tp 1)."
    )
    return " ".join(said)


def render(result: dict) -> str:
    lines = ["| ZeRO | inference_tp_size | layer weights held per rank while generating | of the layers' weights | "
             "of which copied beside the training weights | generate, median of 5 |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for run in result["runs"]:
        held, whole = run["held_during_generate_bytes"], run["layer_weight_bytes"]
        copied = run["copied_during_generate_bytes"]
        lines.append(f"| {path_of(run['zero_stage'], run['pin_parameters'])} | {run['inference_tp_size']} | "
                     f"{held / 2**20:.1f} MiB | {held / whole:.2f} | {copied / 2**20:.1f} MiB | "
                     f"{run['generate_median_s']:.3f} s |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return cost_run.main(argv, "repro.host.upstream.tp_cost", "tp-cost", measure, render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
