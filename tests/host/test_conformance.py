"""The conformance suite's diagnosis, report and heatmap from measurements; one real #3453 cell."""

import json

import pytest

from repro.host import conformance, conformance_diagnosis, conformance_report


def _cell(configuration="default", tokens_equal=True, steps="LLLL", parallel=None, error=None) -> dict:
    c = {
        "configuration": configuration,
        "build": "whole series",
        "zero_stage": 3,
        "world_size": 2,
        "overrides": conformance.CONFIGS[configuration],
        "targets": "none",
        "qkv_layouts_after_eval": ["inference"],
        "weights_seen_by_inference_layers": [{"call": 0, "state": "correct_fused"}],
        "restore_after_first_generate": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": ["training"]},
        "restore_after_cycles": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": ["training"]},
        "tokens_equal_native": tokens_equal,
        "per_step_matches": [{"L": "lora", "x": "neither"}[s] for s in steps],
        "first_step_logits_max_abs": 2e-7 if tokens_equal else 1.13,
        "he_matches_parallel_residual_reference": parallel,
        "per_step_logits_vs_parallel_residual_twin": None if parallel is None else [6e-7] * len(steps),
        "deepspeed": {"version": "0.19.8"},
        "versions": {"torch": "2.13.0+cpu", "transformers": "4.57.6", "python": "3.11.7"},
    }
    if error:
        c = {k: c[k] for k in ("configuration", "build", "zero_stage", "world_size", "overrides")} | {"error": error}
    c["diagnosis"] = conformance_diagnosis.diagnose(c)
    return c


def test_a_sequential_model_computed_as_parallel_residual_is_3453_from_positive_evidence():
    assert _cell()["diagnosis"] == ["correct"]
    bug = _cell("sequential-residual", tokens_equal=False, steps="xxxx", parallel=True)
    assert bug["diagnosis"] == [conformance_diagnosis.BUG_3453]
    # Different tokens without the parallel-residual twin's logits are not #3453: unexplained.
    other = _cell("sequential-residual", tokens_equal=False, steps="xxxx", parallel=False)
    assert other["diagnosis"] == ["tokens differ (unexplained)"]
    assert _cell("full-rotary", tokens_equal=False, steps="xxxx", parallel=None)["diagnosis"] == [
        "tokens differ (unexplained)"
    ]


def test_an_ignored_rotary_base_is_named_from_the_base_10000_twin():
    cell = _cell("rotary-base-1e6", tokens_equal=False, steps="xxxx")
    cell["he_matches_default_rotary_base_reference"] = True
    assert conformance_diagnosis.diagnose(cell) == [conformance_diagnosis.BUG_ROPE]
    cell["he_matches_default_rotary_base_reference"] = False
    assert conformance_diagnosis.diagnose(cell) == ["tokens differ (unexplained)"]


def test_a_crash_is_a_finding_with_its_exception():
    assert _cell(error="LaunchError: AttributeError: 'tuple'")["diagnosis"] == [
        "crash: LaunchError: AttributeError: 'tuple'"
    ]


def test_the_report_and_the_heatmap_come_from_the_json(tmp_path):
    cells = [_cell(), _cell("sequential-residual", False, "xxxx", True), _cell("full-rotary", error="boom")]
    data = {"command": conformance.COMMAND, "arch": "gpt-neox", "configs": conformance.CONFIGS, "duration_s": 5.0,
            "cells": cells}  # fmt: skip
    conformance_report.write_reports(tmp_path, json.loads(json.dumps(data)))
    text = (tmp_path / "CONFORMANCE.md").read_text()
    assert (
        "| sequential-residual | whole series | 3 | 2 | 1.13 | no | sequential residual run as parallel (#3453) |"
        in text
    )
    assert "use_parallel_residual" in text and "Left out of part 1" in text and "CPU evidence" in text
    assert (tmp_path / "conformance.png").stat().st_size > 5_000
    issue = (tmp_path / conformance_report.ISSUE_3453).read_text()
    assert "**To Reproduce**" in issue and "**Expected behavior**" in issue and "**System info**" in issue
    assert "in 1 of 1 cells the Hybrid Engine" in issue and "| whole series | 3 | 2 | 1.13 | 6e-07 |" in issue
    first = (tmp_path / "conformance.png").read_bytes()
    conformance_report.write_reports(tmp_path, data)
    assert (tmp_path / "conformance.png").read_bytes() == first  # no timestamp: regenerates byte for byte


def test_quick_is_one_cell_per_configuration_and_full_covers_both_stages_and_world_sizes():
    quick = conformance.cells_of(conformance.QUICK)
    assert len(quick) == len(conformance.CONFIGS)
    full = conformance.cells_of(conformance.FULL)
    assert {c["zero_stage"] for c in full} == {2, 3} and {c["world_size"] for c in full} == {1, 2}


@pytest.mark.distributed
def test_a_real_sequential_residual_cell_shows_3453(tmp_path):
    """Released DeepSpeed, ZeRO-2, one rank: the HE's logits are the parallel-residual twin's."""
    axes = {"configuration": "sequential-residual", "build": "released", "zero_stage": 2, "world_size": 1}
    result = conformance.run_cell(tmp_path, None, axes, timeout_s=240)
    cell = {**axes, "overrides": conformance.CONFIGS["sequential-residual"], **result}
    assert result["config"]["overrides"] == {"use_parallel_residual": False}
    assert conformance_diagnosis.diagnose(cell) == [conformance_diagnosis.BUG_3453]
    assert max(result["per_step_logits_vs_parallel_residual_twin"]) < 1e-5


def test_an_architecture_cell_records_the_he_crash_or_compares_within_the_tolerance(tmp_path):
    crash = {"arch": "llama", "build": "released", "zero_stage": 3, "world_size": 2,
             "crash": {"type": "AttributeError", "message": "'tuple' object has no attribute 'size'",
                       "at": "deepspeed/model_implementations/transformers/ds_transformer.py:139"}}  # fmt: skip
    assert conformance_diagnosis.diagnose_arch(crash) == [
        "crash in the Hybrid Engine: AttributeError: 'tuple' object has no attribute 'size' "
        "(deepspeed/model_implementations/transformers/ds_transformer.py:139)"
    ]
    ok = {"arch": "gpt-neo", "build": "whole series", "zero_stage": 3, "world_size": 1, "tokens_equal_native": True,
          "per_step_logits_vs_native": [3e-7, 4e-7], "logits_finite": True}  # fmt: skip
    assert conformance_diagnosis.diagnose_arch(ok) == ["correct"]
    assert conformance_diagnosis.diagnose_arch({**ok, "logits_finite": False})[0].startswith("non-finite")
    assert conformance_diagnosis.diagnose_arch({**ok, "per_step_logits_vs_native": [0.9]})[0].startswith("differs")
    for c in (crash, ok):
        c["diagnosis"] = conformance_diagnosis.diagnose_arch(c)
    data = {"command": conformance.COMMAND, "arch": "gpt-neox", "configs": conformance.CONFIGS, "duration_s": 1.0,
            "cells": [_cell()], "arch_cells": [crash, ok]}  # fmt: skip
    conformance_report.write_reports(tmp_path, data)
    text = (tmp_path / "CONFORMANCE.md").read_text()
    assert (
        "## Other architectures" in text and "| llama | released | 3 | 2 | - | - | crash in the Hybrid Engine" in text
    )


@pytest.mark.distributed
def test_a_real_llama_cell_records_the_hybrid_engines_crash(tmp_path):
    """Transformers 4.57: the HE's Llama layers hand the next layer a tuple; the crash is the cell's finding."""
    axes = {"arch": "llama", "build": "released", "zero_stage": 3, "world_size": 1}
    result = conformance.run_arch_cell(tmp_path, None, axes, timeout_s=240)
    assert result["crash"]["type"] == "AttributeError" and result["crash"]["at"].startswith("deepspeed/")
    assert conformance_diagnosis.diagnose_arch({**axes, **result})[0].startswith("crash in the Hybrid Engine")


def test_main_records_a_build_that_cannot_be_prepared_on_each_of_its_cells(tmp_path, monkeypatch):
    from repro.fixstatus import PatchError

    def no_copy(patches):
        raise PatchError("0005 does not apply")

    def fake_cell(work, root, axes, timeout_s=600):
        return {k: v for k, v in _cell().items() if k not in (*conformance.AXES, "overrides", "diagnosis")}

    def fake_arch(work, root, axes, timeout_s=300):
        return {"tokens_equal_native": True, "per_step_logits_vs_native": [2e-7], "logits_finite": True}

    monkeypatch.setattr(conformance.patched_copy, "prepare_patched_copy", no_copy)
    monkeypatch.setattr(conformance, "run_cell", fake_cell)
    monkeypatch.setattr(conformance, "run_arch_cell", fake_arch)
    monkeypatch.setattr(conformance_report, "heatmap", lambda data, path: None)
    lines = []
    assert conformance.main(tmp_path, quick=True, log=lines.append) == 3  # a cell that could not run: broken
    data = json.loads((tmp_path / "conformance.json").read_text())
    assert all(
        c["diagnosis"] == ["crash: PatchError: 0005 does not apply"] for c in data["cells"] + data["arch_cells"]
    )
    assert lines[-1].startswith("[conformance] 6 cells in")
    monkeypatch.setattr(conformance, "BUILDS", {**conformance.BUILDS, "whole series": ()})  # no copy needed
    assert conformance.main(tmp_path / "ok", quick=True, log=lines.append) == 0
    ok = json.loads((tmp_path / "ok" / "conformance.json").read_text())
    assert {d for c in ok["cells"] + ok["arch_cells"] for d in c["diagnosis"]} == {"correct"}
