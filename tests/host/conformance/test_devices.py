"""The device check a GPU run asks before it starts, here on a machine without a GPU."""

import pytest

from repro.host.conformance import devices


def test_the_device_check_runs_in_its_own_process_and_reports_no_gpu_here():
    found = devices.device_facts("cpu")
    assert found["device_count"] == 0 and found["devices"] == [] and found["accelerator"] == "cpu"
    assert found["inference_op_error"] == "no GPU visible" and found["dtypes"]["fp32"] is True


def test_a_cpu_run_asks_nothing_and_is_cpu_evidence():
    assert devices.check("cpu", [], facts=lambda backend: pytest.fail("asked")) == devices.CPU_EVIDENCE


def test_a_rocm_machine_that_has_everything_is_named_in_the_evidence(monkeypatch):
    monkeypatch.setattr(devices.preflight, "detect_backend", lambda: "rocm")
    found = {"torch": "2.9.1+rocm6.4", "hip": "6.4.1", "cuda": None, "accelerator": "cuda", "device_count": 8,
             "devices": ["AMD Instinct MI300X"] * 8, "dtypes": {"fp32": True, "bf16": True, "fp16": True},
             "inference_op_error": None}  # fmt: skip
    got = devices.check("rocm", [{"world_size": 2, "dtype": "bf16"}], facts=lambda backend: found)
    assert got == {"backend": "rocm", "evidence": "ROCm", "devices": ["AMD Instinct MI300X"] * 2,
                   "torch": "2.9.1+rocm6.4", "gpu_runtime": "HIP 6.4.1"}  # fmt: skip
