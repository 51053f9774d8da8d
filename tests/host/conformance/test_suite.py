"""`python -m repro conformance`'s bookkeeping: a build that cannot be prepared, the journal, Ctrl-C and
resume, the OUT rule, shards and their merge (cells measured by fakes)."""

import json

import pytest

from repro.host.conformance import plan, report, suite


def test_main_records_a_build_that_cannot_be_prepared_on_each_of_its_cells(tmp_path, monkeypatch):
    from repro.fixstatus import PatchError

    def no_copy(patches):
        raise PatchError("0005 does not apply")

    def fake_cell(work, root, axes, timeout_s=600, probe=None, backend="cpu"):
        return {
            "targets": axes["lora"], "qkv_layouts_after_eval": ["inference"],
            "weights_seen_by_inference_layers": [{"call": 0, "state": "correct_fused"}],
            "restore_after_first_generate": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": []},
            "restore_after_cycles": {"base": {"bitwise_equal": True, "max_abs": 0.0}, "qkv_layouts": []},
            "tokens_equal_native": True, "per_step_matches": ["lora"],
            "per_step_logits_vs_native": [2e-7], "logits_finite": True, "injected_layer_calls": 16,
            "deepspeed": {"version": "0.19.8"}, "versions": {"torch": "2", "transformers": axes["transformers"]},
        }  # fmt: skip

    monkeypatch.setattr(suite.patched_copy, "prepare_patched_copy", no_copy)
    monkeypatch.setattr(suite.transformers_env, "overlay", lambda version: None)
    monkeypatch.setattr(suite, "run_cell", fake_cell)
    monkeypatch.setattr(report, "heatmap", lambda data, path: None)
    lines = []
    assert suite.main(tmp_path, quick=True, log=lines.append) == 3  # a cell that could not run: broken
    data = json.loads((tmp_path / "conformance.json").read_text())
    series = [c for c in data["cells"] if c["build"] == "whole series"]
    assert series and all(c["diagnosis"] == ["crash: PatchError: 0005 does not apply"] for c in series)
    assert lines[-1].startswith(f"[conformance] {len(plan.plan(quick=True))} cells in")
    monkeypatch.setattr(suite, "BUILDS", {**plan.BUILDS, "whole series": ()})  # no copy needed
    assert suite.main(tmp_path / "ok", quick=True, log=lines.append) == 0
    ok = json.loads((tmp_path / "ok" / "conformance.json").read_text())
    assert {d for c in ok["cells"] for d in c["diagnosis"]} == {"correct"}


def test_a_cell_whose_ranks_ran_another_transformers_is_broken_and_an_uninstallable_one_is_recorded(
    tmp_path, monkeypatch
):
    from repro.host.envs.transformers_env import OverlayError

    def overlay(version):
        if version != plan.PINNED:
            raise OverlayError(f"pip could not install Transformers {version}: offline")

    def fake_cell(work, root, axes, timeout_s=600, probe=None, backend="cpu"):
        return {"versions": {"transformers": "4.40.0"}, "deepspeed": {"version": "0.19.8"}}

    monkeypatch.setattr(suite.transformers_env, "overlay", overlay)
    monkeypatch.setattr(suite.patched_copy, "prepare_patched_copy", lambda patches: None)
    monkeypatch.setattr(suite, "run_cell", fake_cell)
    monkeypatch.setattr(report, "heatmap", lambda data, path: None)
    assert suite.main(tmp_path, quick=True, log=lambda line: None) == 3
    cells = json.loads((tmp_path / "conformance.json").read_text())["cells"]
    older = [c for c in cells if c["transformers"] != plan.PINNED]
    assert older and all("pip could not install Transformers" in c["diagnosis"][0] for c in older)
    pinned = [c for c in cells if c["transformers"] == plan.PINNED]
    assert all(c["diagnosis"] == [f"crash: RuntimeError: the ranks imported Transformers 4.40.0, not {plan.PINNED}"]
               for c in pinned)  # fmt: skip


def _fake_suite(monkeypatch, interrupt_at: int | None = None) -> list[tuple]:
    """Cells measured by a fake that answers at once (and raises KeyboardInterrupt at the cell numbered
    `interrupt_at`); returns the keys it measured, in order."""
    measured = []

    def fake_measure(out, roots, axes, timeout_s, probe, progress, backend="cpu"):
        if interrupt_at is not None and len(measured) + 1 == interrupt_at:
            raise KeyboardInterrupt
        measured.append(plan.key(axes))
        progress.begin("x")
        progress.end("x: correct (0 s)")
        return {**axes, "diagnosis": ["correct"], "duration_s": 0.0, "seed_of": str(plan.key(axes))}

    monkeypatch.setattr(suite, "measure", fake_measure)
    monkeypatch.setattr(suite, "ds_report_text", lambda accelerator: "ds_report")
    monkeypatch.setattr(suite, "write_reports", lambda out, data: (out / "CONFORMANCE.md").write_text("r"))
    monkeypatch.setattr(suite.patched_copy, "prepare_patched_copy", lambda patches: None)
    return measured


def _cells(out):
    return json.loads((out / "conformance.json").read_text())["cells"]


def test_an_interrupted_run_keeps_its_finished_cells_and_resume_runs_only_the_rest(tmp_path, monkeypatch):
    planned = [plan.key(c) for c in plan.plan(quick=True)]
    lines = []
    measured = _fake_suite(monkeypatch, interrupt_at=4)
    assert suite.main(tmp_path / "cut", quick=True, log=lines.append) == 130
    assert measured == planned[:3] and "--resume" in lines[-1] and f"3 of {len(planned)} cells finished" in lines[-1]
    assert not (tmp_path / "cut" / "conformance.json").exists()
    measured = _fake_suite(monkeypatch)
    assert suite.main(tmp_path / "cut", resume=True, log=lines.append) == 0  # the plan comes from run.json
    assert measured == planned[3:]
    assert suite.main(tmp_path / "whole", quick=True, log=lines.append) == 0
    assert _cells(tmp_path / "cut") == _cells(tmp_path / "whole")


def test_an_out_with_results_is_refused_unless_resumed_or_regenerated(tmp_path, monkeypatch):
    from repro.options import UsageError

    _fake_suite(monkeypatch)
    assert suite.main(tmp_path, quick=True, log=print) == 0
    with pytest.raises(UsageError, match="--resume .*--regenerate"):
        suite.main(tmp_path, quick=True)
    measured = _fake_suite(monkeypatch)
    assert suite.main(tmp_path, quick=True, regenerate=True, log=print) == 0
    assert len(measured) == len(plan.plan(quick=True))  # every cell again
    measured = _fake_suite(monkeypatch)
    assert suite.main(tmp_path, resume=True, log=print) == 0 and measured == []  # nothing missing


def test_again_measures_a_build_again_and_the_run_says_so(tmp_path, monkeypatch):
    from repro import results
    from repro.options import UsageError

    with pytest.raises(UsageError, match="give --resume OUT"):
        suite.main(tmp_path, quick=True, again=("released",))
    _fake_suite(monkeypatch)
    assert suite.main(tmp_path, quick=True, log=print) == 0
    with pytest.raises(UsageError, match="no cell of that build"):
        suite.main(tmp_path, resume=True, again=("series without 9999",), log=print)
    measured = _fake_suite(monkeypatch)
    assert suite.main(tmp_path, resume=True, again=("released",), log=print) == 0
    released = [c for c in plan.plan(quick=True) if c["build"] == "released"]
    assert released and len(measured) == len(released)  # only that build's cells ran again
    (rerun,) = results.load(tmp_path / "conformance.json")["reruns"]
    assert rerun["cells"] == len(released) and "--again 'released'" in rerun["command"]


def test_two_shards_merged_give_the_cells_of_one_run(tmp_path, monkeypatch):
    _fake_suite(monkeypatch)
    assert suite.main(tmp_path / "one", quick=True, log=print) == 0
    for k in (1, 2):
        assert suite.main(tmp_path / f"shard{k}", quick=True, shard=(k, 2), log=print) == 0
    assert len(_cells(tmp_path / "shard1")) == (len(plan.plan(quick=True)) + 1) // 2
    assert suite.merge(tmp_path / "merged", [tmp_path / "shard1", tmp_path / "shard2"], log=print) == 0
    assert _cells(tmp_path / "merged") == _cells(tmp_path / "one")


def test_a_merge_missing_a_shard_or_holding_one_twice_is_refused(tmp_path, monkeypatch):
    from repro.options import UsageError

    _fake_suite(monkeypatch)
    for k in (1, 2):
        suite.main(tmp_path / f"shard{k}", quick=True, shard=(k, 2), log=print)
    with pytest.raises(UsageError, match="in no shard"):
        suite.merge(tmp_path / "m1", [tmp_path / "shard1"])
    with pytest.raises(UsageError, match="more than one shard"):
        suite.merge(tmp_path / "m2", [tmp_path / "shard1", tmp_path / "shard1", tmp_path / "shard2"])
    with pytest.raises(UsageError, match="one plan"):
        suite.merge(tmp_path / "m3", [tmp_path / "no-such-shard"])
    assert not any((tmp_path / m).exists() for m in ("m1", "m2", "m3"))  # a refusal writes nothing


def _gpu_machine(monkeypatch, found: dict | None = None):
    """A machine that has (or, with `found`, lacks) what a CUDA run needs: torch's view and the device check's."""
    facts = {"torch": "2.9.1+cu128", "hip": None, "cuda": "12.8", "accelerator": "cuda", "device_count": 4,
             "devices": ["NVIDIA H200"] * 4, "dtypes": {"fp32": True, "bf16": True, "fp16": True},
             "inference_op_error": None, **(found or {})}  # fmt: skip
    monkeypatch.setattr(suite.devices.preflight, "detect_backend", lambda: "cuda")
    monkeypatch.setattr(suite.devices, "device_facts", lambda backend: facts)


def test_a_gpu_run_measures_every_cell_in_a_torchrun_of_its_own_on_that_backend(tmp_path, monkeypatch):
    """No warm pool (it forks after its imports, which CUDA does not survive); each cell's probe and launcher are
    told the backend; the JSON and the report's first line say CUDA evidence, with the devices."""
    seen = []

    def fake_cell(work, root, axes, timeout_s=600, probe=None, backend="cpu"):
        seen.append((probe, backend))
        return {"versions": {"transformers": axes["transformers"]}, "deepspeed": {"version": "0.19.8"}}

    _gpu_machine(monkeypatch)
    monkeypatch.setattr(suite, "run_cell", fake_cell)
    monkeypatch.setattr(suite, "ds_report_text", lambda accelerator: f"ds_report {accelerator}")
    monkeypatch.setattr(suite.patched_copy, "prepare_patched_copy", lambda patches: None)
    monkeypatch.setattr(suite.transformers_env, "overlay", lambda version: None)
    monkeypatch.setattr(report, "heatmap", lambda data, path: None)
    lines = []
    suite.main(tmp_path, quick=True, backend="cuda", log=lines.append)
    assert seen and all(p is suite.launch.run_probe and b == "cuda" for p, b in seen)
    assert "one torchrun per cell" in lines[0]
    data = json.loads((tmp_path / "conformance.json").read_text())
    assert data["backend"] == "cuda" and data["ds_report"] == "ds_report cuda"
    assert data["evidence"]["devices"] == ["NVIDIA H200"] * 4 and data["command"].endswith("--backend cuda")
    first = (tmp_path / "CONFORMANCE.md").read_text().splitlines()[0]
    assert first.startswith("# Hybrid Engine conformance (CUDA evidence)")
    assert json.loads((tmp_path / "run.json").read_text())["backend"] == "cuda"  # what a resume runs on


@pytest.mark.parametrize(
    "found, refusal",
    [
        ({"device_count": 1, "devices": ["NVIDIA H200"]}, "need 4 GPUs .* but 1 are visible.*REPRO_SHARED_GPU=1"),
        ({"device_count": 2, "devices": ["NVIDIA H200"] * 2}, "need 4 GPUs .* but 2 are visible.*--ranks 1"),
        ({"device_count": 0, "devices": []}, "but 0 are visible \\(HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES\\) \\("),
        ({"inference_op_error": "ImportError: no transformer_inference_op"}, "transformer_inference op does not load"),
        ({"dtypes": {"fp32": True, "bf16": False, "fp16": True}}, "run bf16, which NVIDIA H200 does not support"),
        ({"dtypes": {"fp32": True, "bf16": True, "fp16": False}}, "run fp16, which NVIDIA H200 does not support"),
        ({"accelerator": "cpu"}, "accelerator is the CPU"),
    ],
)
def test_a_gpu_run_the_machine_cannot_serve_is_refused_before_out_is_touched(tmp_path, monkeypatch, found, refusal):
    """Each missing piece named (exit 2 from the CLI); an OUT with results asked to --regenerate keeps them."""
    from repro.options import UsageError

    (tmp_path / "conformance.json").write_text("{}")
    (tmp_path / "cells.jsonl").write_text("{}\n")
    _gpu_machine(monkeypatch, found)
    monkeypatch.setattr(suite, "run_cell", lambda *a, **k: pytest.fail("ran a cell"))
    with pytest.raises(UsageError, match=refusal):
        suite.main(tmp_path, quick=True, regenerate=True, backend="cuda")
    assert (tmp_path / "conformance.json").read_text() == "{}" and (tmp_path / "cells.jsonl").exists()


def test_a_gpu_run_without_the_gpu_is_refused_not_run_on_the_cpu(tmp_path, monkeypatch):
    from repro.options import UsageError

    monkeypatch.setattr(suite.devices.preflight, "detect_backend", lambda: "cpu")
    monkeypatch.setattr(suite.devices, "device_facts", lambda backend: pytest.fail("asked DeepSpeed"))
    for backend, missing in (("cuda", "no CUDA GPU"), ("rocm", "no ROCM GPU")):
        with pytest.raises(UsageError, match=f"asks for {backend} but torch sees {missing}"):
            suite.main(tmp_path / backend, quick=True, backend=backend)
        assert not (tmp_path / backend).exists()


def test_ranks_keeps_only_the_cells_of_that_world_size_through_a_resume(tmp_path, monkeypatch):
    """A machine with one GPU runs the one-rank cells; the resumed run keeps the filter."""
    from repro.options import UsageError

    measured = _fake_suite(monkeypatch, interrupt_at=3)
    assert suite.main(tmp_path, ranks=1, log=print) == 130
    rest = _fake_suite(monkeypatch)
    assert suite.main(tmp_path, resume=True, log=print) == 0
    ones = [plan.key(c) for c in plan.plan() if c["world_size"] == 1]
    assert ones and measured + rest == ones and {c["world_size"] for c in _cells(tmp_path)} == {1}
    with pytest.raises(UsageError, match="no cell of this plan runs on 3 ranks"):
        suite.main(tmp_path / "none", quick=True, ranks=3)


def test_rediagnose_recomputes_every_diagnosis_from_the_measurements(tmp_path):
    import json as _json

    from repro import results
    from repro.host.conformance import suite as conformance_run

    reference = results.load(results.CONFORMANCE)
    bias = next(c for c in reference["cells"] if c["diagnosis"][0].startswith("ZeRO-3 adds the unwritten QKV bias"))
    fine = next(c for c in reference["cells"] if c["diagnosis"] == ["correct"])
    stale = {**bias, "diagnosis": ["correct"], "findings": []}
    (tmp_path / "conformance.json").write_text(_json.dumps({**reference, "cells": [stale, fine]}))
    said = []
    assert conformance_run.rediagnose(tmp_path, log=said.append) == 0
    cells = _json.loads((tmp_path / "conformance.json").read_text())["cells"]
    assert cells[0]["diagnosis"] == bias["diagnosis"] and cells[1]["diagnosis"] == ["correct"]
    assert cells[0]["verdicts"][0] == {"id": "zero3-qkv-bias", "as": "shows", "sentence": 0, "detail": ""}
    assert [v["id"] for v in cells[0]["verdicts"][1:]] in ([], ["frozen-lm-head"])  # released cells froze lm_head
    assert cells[1]["verdicts"] == [{"text": "correct"}] and "findings" not in cells[0]
    assert "1 changed" in said[0] and (tmp_path / "CONFORMANCE.md").is_file()


def test_rediagnose_refuses_a_directory_without_results(tmp_path):
    from repro.host.conformance import suite as conformance_run
    from repro.options import UsageError

    with pytest.raises(UsageError, match="does not exist"):
        conformance_run.rediagnose(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
