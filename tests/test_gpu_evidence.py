"""The committed GPU evidence says what its files hold: the H200 cell agrees with the committed CPU cell."""

import json

from repro import findings, results
from repro.paths import REPO_ROOT

GPU = REPO_ROOT / "results/reference/gpu/h200-2026-12-04"


def _cpu_cell(gpu_cell: dict) -> dict:
    cells = results.load(results.CONFORMANCE)["cells"]
    keys = ("arch", "configuration", "build", "world_size", "transformers", "zero_stage", "scenario", "dtype")
    return next(c for c in cells if all(c[k] == gpu_cell[k] for k in keys))


def test_the_h200_cell_ran_on_compiled_kernels_and_agrees_with_the_cpu_cell():
    journal = [json.loads(line) for line in (GPU / "conformance-gpt-neox-cells.jsonl").read_text().splitlines()]
    measured = [c for c in journal if not c.get("error")]
    assert len(measured) == 1
    cell = measured[0]
    assert cell["device"] == "cuda:0: NVIDIA H200" and set(cell["kernel_paths"].values()) == {"compiled"}
    cpu = _cpu_cell(cell)
    # The CPU cell was measured again after the H200's, with what deepspeed.initialize froze recorded too (0038: the
    # H200 cell's probe did not record it); what generation showed is the same.
    frozen = findings.shows("frozen-lm-head")
    assert cell["diagnosis"] == [d for d in cpu["diagnosis"] if not d.startswith(frozen)]
    assert cell["diagnosis"] == ["sequential residual run as parallel (#3453)"] and "frozen_by_initialize" not in cell
    assert cell["he_tokens"] == cpu["he_tokens"] and cell["native_tokens"] == cpu["native_tokens"]
    readme = (GPU / "README.md").read_text()
    assert f"{cell['first_step_logits_max_abs']:.5f}" in readme and f"{cpu['first_step_logits_max_abs']:.5f}" in readme


def test_the_device_facts_are_those_of_the_readme():
    device = json.loads((GPU / "device.json").read_text())
    readme = (GPU / "README.md").read_text()
    assert device["devices"] == ["NVIDIA H200"] and device["inference_op_error"] is None
    assert f"torch {device['torch']}" in readme and f"CUDA {device['cuda']}" in readme
    for line in ("setup: exit 0 in 159 s", "setup: exit 0 in 127 s"):
        assert line in (GPU / "summary-first-call.txt").read_text() + (GPU / "summary-second-call.txt").read_text()
