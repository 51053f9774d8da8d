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


def test_ranks_share_one_gpu_only_when_asked_and_the_evidence_says_so(monkeypatch):
    """REPRO_SHARED_GPU=1: two ranks on one GPU through gloo, named in the evidence line; without it, refused."""
    from repro.options import UsageError

    monkeypatch.setattr(devices.preflight, "detect_backend", lambda: "cuda")
    found = {"torch": "2.11.0+cu130", "hip": None, "cuda": "13.0", "accelerator": "cuda", "device_count": 1,
             "devices": ["NVIDIA H200"], "dtypes": {"fp32": True, "bf16": True, "fp16": True},
             "inference_op_error": None}  # fmt: skip
    cells = [{"world_size": 2, "dtype": "fp32"}]
    monkeypatch.delenv("REPRO_SHARED_GPU", raising=False)
    with pytest.raises(UsageError, match="2 ranks need 2 GPUs .* 1 are visible.*REPRO_SHARED_GPU=1"):
        devices.check("cuda", cells, facts=lambda backend: found)
    monkeypatch.setenv("REPRO_SHARED_GPU", "1")
    got = devices.check("cuda", cells, facts=lambda backend: found)
    assert got["evidence"] == "CUDA, 2 ranks sharing one GPU through gloo" and got["devices"] == ["NVIDIA H200"]
    with pytest.raises(UsageError, match="but 0 are visible"):  # sharing needs one GPU to share
        devices.check("cuda", cells, facts=lambda backend: {**found, "device_count": 0, "devices": []})
