"""The conformance suite's plan, its cell runners on real DeepSpeed (few, small) and main's bookkeeping."""

import json

import pytest

from repro.host import conformance, conformance_diagnosis, conformance_report


def test_full_covers_every_axis_the_done_criteria_name():
    full = conformance.plan()
    assert {c["arch"] for c in full} == {"gpt-neox", "gpt-neo", "llama"}
    assert {c["zero_stage"] for c in full} == {2, 3} and {c["world_size"] for c in full} == {1, 2}
    assert {c["order"] for c in full} == {"eval-generate-train", "train-first", "eval-twice"}
    assert {c["lora"] for c in full} == {"none", "all"} and {c["pin"] for c in full} == {True, False}
    for arch, configs in conformance.ARCH_CONFIGS.items():
        assert {c["configuration"] for c in full if c["arch"] == arch} == set(configs)
    for arch in ("gpt-neox", "gpt-neo", "llama"):  # every architecture in every scenario, both builds
        mine = [c for c in full if c["arch"] == arch]
        assert {c["scenario"] for c in mine} == set(conformance.SCENARIOS)
        assert {"released", "whole series"} <= {c["build"] for c in mine}
    assert not [c for c in full if not c["pin"] and c["zero_stage"] != 3]  # pin_parameters: a ZeRO-3 setting
    keys = [tuple(sorted((k, json.dumps(v)) for k, v in c.items())) for c in full]
    assert len(keys) == len(set(keys))


def test_quick_has_one_cell_per_axis_value_and_stays_small():
    quick = conformance.plan(quick=True)
    assert {c["arch"] for c in quick} == set(conformance.ARCHS)
    assert {c["scenario"] for c in quick} == set(conformance.SCENARIOS)
    assert {c["zero_stage"] for c in quick} == {2, 3} and {c["world_size"] for c in quick} == {1, 2}
    for arch, configs in conformance.ARCH_CONFIGS.items():
        assert {c["configuration"] for c in quick if c["arch"] == arch} == set(configs)
    assert {c["build"] for c in quick} == {"released", "whole series"}
    assert len(quick) <= 20


@pytest.mark.distributed
def test_a_real_sequential_residual_cell_shows_3453(tmp_path):
    """Released DeepSpeed, ZeRO-2, one rank: the HE's logits are the parallel-residual twin's."""
    axes = conformance._cell("gpt-neox", "sequential-residual", "released", 2, 1, "reference")
    result = conformance.run_cell(tmp_path, None, axes, timeout_s=240)
    assert result["config"]["overrides"] == {"use_parallel_residual": False}
    assert conformance_diagnosis.diagnose({**axes, **result}) == [conformance_diagnosis.BUG_3453]
    assert max(result["per_step_logits_vs_parallel_residual_twin"]) < 1e-5


@pytest.mark.distributed
def test_a_real_llama_cell_records_the_hybrid_engines_crash(tmp_path):
    """Transformers 4.57: the HE's Llama layers hand the next layer a tuple; the crash is the cell's finding."""
    axes = conformance._cell("llama", "default", "released", 3, 1, "reference")
    result = conformance.run_arch_cell(tmp_path, None, axes, timeout_s=240)
    assert result["crash"]["type"] == "AttributeError" and result["crash"]["at"].startswith("deepspeed/")
    assert conformance_diagnosis.diagnose_arch({**axes, **result}) == [conformance_diagnosis.BUG_LAYER_TUPLE]


@pytest.mark.distributed
def test_a_real_llama_cell_without_0007_is_handed_the_unwritten_qkv_bias(tmp_path):
    """ZeRO-3 merges q/k/v on every forward and hands the QKV GEMM its never-written bias buffer."""
    from repro.host import patched_copy

    axes = conformance._cell("llama", "default", "series without 0007", 3, 1, "reference")
    root = patched_copy.prepare_patched_copy(patches=conformance.BUILDS[axes["build"]])
    result = conformance.run_arch_cell(tmp_path, root, axes, timeout_s=240)
    assert result["deepspeed"]["path"].startswith(str(root))
    assert result["qkv_bias_on_bias_free_model"]["calls"] > 0
    assert conformance_diagnosis.BUG_QKV_BIAS in conformance_diagnosis.diagnose_arch({**axes, **result})


def test_main_records_a_build_that_cannot_be_prepared_on_each_of_its_cells(tmp_path, monkeypatch):
    from repro.fixstatus import PatchError

    def no_copy(patches):
        raise PatchError("0005 does not apply")

    def fake_cell(work, root, axes, timeout_s=600):
        return {
            "targets": axes["lora"], "qkv_layouts_after_eval": ["inference"],
            "weights_seen_by_inference_layers": [{"call": 0, "state": "correct_fused"}],
            "restore_after_first_generate": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": []},
            "restore_after_cycles": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": []},
            "tokens_equal_native": True, "per_step_matches": ["lora"],
            "per_step_logits_vs_lora_teacher_forced": [2e-7],
            "deepspeed": {"version": "0.19.8"}, "versions": {"torch": "2", "transformers": "4.57.6"},
        }  # fmt: skip

    def fake_arch(work, root, axes, timeout_s=300):
        return {"tokens_equal_native": True, "per_step_logits_vs_native": [2e-7], "logits_finite": True,
                "deepspeed": {"version": "0.19.8"}, "versions": {"torch": "2", "transformers": "4.57.6"}}  # fmt: skip

    monkeypatch.setattr(conformance.patched_copy, "prepare_patched_copy", no_copy)
    monkeypatch.setattr(conformance, "run_cell", fake_cell)
    monkeypatch.setattr(conformance, "run_arch_cell", fake_arch)
    monkeypatch.setattr(conformance_report, "heatmap", lambda data, path: None)
    lines = []
    assert conformance.main(tmp_path, quick=True, log=lines.append) == 3  # a cell that could not run: broken
    data = json.loads((tmp_path / "conformance.json").read_text())
    series = [c for c in data["cells"] if c["build"] == "whole series"]
    assert series and all(c["diagnosis"] == ["crash: PatchError: 0005 does not apply"] for c in series)
    assert lines[-1].startswith(f"[conformance] {len(conformance.plan(quick=True))} cells in")
    monkeypatch.setattr(conformance, "BUILDS", {**conformance.BUILDS, "whole series": ()})  # no copy needed
    assert conformance.main(tmp_path / "ok", quick=True, log=lines.append) == 0
    ok = json.loads((tmp_path / "ok" / "conformance.json").read_text())
    assert {d for c in ok["cells"] for d in c["diagnosis"]} == {"correct"}
