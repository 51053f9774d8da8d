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

    def fake_cell(work, root, axes, timeout_s=600, probe=None):
        return {
            "targets": axes["lora"], "qkv_layouts_after_eval": ["inference"],
            "weights_seen_by_inference_layers": [{"call": 0, "state": "correct_fused"}],
            "restore_after_first_generate": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": []},
            "restore_after_cycles": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": []},
            "tokens_equal_native": True, "per_step_matches": ["lora"],
            "per_step_logits_vs_lora_teacher_forced": [2e-7],
            "deepspeed": {"version": "0.19.8"}, "versions": {"torch": "2", "transformers": "4.57.6"},
        }  # fmt: skip

    def fake_arch(work, root, axes, timeout_s=300, probe=None):
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


def _fake_suite(monkeypatch, interrupt_at: int | None = None) -> list[tuple]:
    """Cells measured by a fake that answers at once (and raises KeyboardInterrupt at the cell numbered
    `interrupt_at`); returns the keys it measured, in order."""
    measured = []

    def fake_measure(out, roots, axes, timeout_s, probe, progress):
        if interrupt_at is not None and len(measured) + 1 == interrupt_at:
            raise KeyboardInterrupt
        measured.append(conformance.key(axes))
        progress.begin("x")
        progress.end("x: correct (0 s)")
        return {**axes, "diagnosis": ["correct"], "duration_s": 0.0, "seed_of": str(conformance.key(axes))}

    monkeypatch.setattr(conformance, "_measure", fake_measure)
    monkeypatch.setattr(conformance, "ds_report_text", lambda accelerator: "ds_report")
    monkeypatch.setattr(conformance, "write_reports", lambda out, data: (out / "CONFORMANCE.md").write_text("r"))
    monkeypatch.setattr(conformance.patched_copy, "prepare_patched_copy", lambda patches: None)
    return measured


def _cells(out):
    return json.loads((out / "conformance.json").read_text())["cells"]


def test_an_interrupted_run_keeps_its_finished_cells_and_resume_runs_only_the_rest(tmp_path, monkeypatch):
    planned = [conformance.key(c) for c in conformance.plan(quick=True)]
    lines = []
    measured = _fake_suite(monkeypatch, interrupt_at=4)
    assert conformance.main(tmp_path / "cut", quick=True, log=lines.append) == 130
    assert measured == planned[:3] and "--resume" in lines[-1] and "3 of 20 cells finished" in lines[-1]
    assert not (tmp_path / "cut" / "conformance.json").exists()
    measured = _fake_suite(monkeypatch)
    assert conformance.main(tmp_path / "cut", resume=True, log=lines.append) == 0  # the plan comes from run.json
    assert measured == planned[3:]
    assert conformance.main(tmp_path / "whole", quick=True, log=lines.append) == 0
    assert _cells(tmp_path / "cut") == _cells(tmp_path / "whole")


def test_an_out_with_results_is_refused_unless_resumed_or_regenerated(tmp_path, monkeypatch):
    from repro.options import UsageError

    _fake_suite(monkeypatch)
    assert conformance.main(tmp_path, quick=True, log=print) == 0
    with pytest.raises(UsageError, match="--resume .*--regenerate"):
        conformance.main(tmp_path, quick=True)
    measured = _fake_suite(monkeypatch)
    assert conformance.main(tmp_path, quick=True, regenerate=True, log=print) == 0
    assert len(measured) == 20  # every cell again
    measured = _fake_suite(monkeypatch)
    assert conformance.main(tmp_path, resume=True, log=print) == 0 and measured == []  # nothing missing


def test_two_shards_merged_give_the_cells_of_one_run(tmp_path, monkeypatch):
    _fake_suite(monkeypatch)
    assert conformance.main(tmp_path / "one", quick=True, log=print) == 0
    for k in (1, 2):
        assert conformance.main(tmp_path / f"shard{k}", quick=True, shard=(k, 2), log=print) == 0
    assert len(_cells(tmp_path / "shard1")) == 10
    assert conformance.merge(tmp_path / "merged", [tmp_path / "shard1", tmp_path / "shard2"], log=print) == 0
    assert _cells(tmp_path / "merged") == _cells(tmp_path / "one")


def test_a_merge_missing_a_shard_or_holding_one_twice_is_refused(tmp_path, monkeypatch):
    from repro.options import UsageError

    _fake_suite(monkeypatch)
    for k in (1, 2):
        conformance.main(tmp_path / f"shard{k}", quick=True, shard=(k, 2), log=print)
    with pytest.raises(UsageError, match="in no shard"):
        conformance.merge(tmp_path / "m1", [tmp_path / "shard1"])
    with pytest.raises(UsageError, match="more than one shard"):
        conformance.merge(tmp_path / "m2", [tmp_path / "shard1", tmp_path / "shard1", tmp_path / "shard2"])
