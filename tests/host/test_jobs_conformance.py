"""`invoke conformance`: the command each engine runs (what --dry-run prints), and every refusal."""

import json

import pytest

from repro.host import jobs
from repro.host.images import engines


def _dry(monkeypatch, tmp_path, **request) -> list[str]:
    monkeypatch.setattr(jobs, "RESULTS_DIR", tmp_path / "results")
    lines = []
    code = jobs.conformance(jobs.ConformanceRequest(dry_run=True, **request), log=lines.append)
    assert code == 0
    return lines


@pytest.mark.parametrize("engine", ["docker", "podman", "buildah", "apptainer"])
def test_rocm_runs_the_suite_in_the_rocm_image_with_its_gpus(monkeypatch, tmp_path, engine):
    out = tmp_path / "results" / "conformance-rocm"
    lines = _dry(monkeypatch, tmp_path, out=str(out), backend="rocm", engine=engine, gpus="0,1", suite=["--quick"])
    run = [line for line in lines if " conformance " in line][-1]
    assert "/workspace/results/conformance-rocm --backend rocm --quick" in run and "HIP_VISIBLE_DEVICES=0,1" in run
    assert "rocm-before" in run and ("--device /dev/kfd" in run or engine in ("buildah", "apptainer"))
    assert any("would be built if missing" in line for line in lines)  # the image is built first when missing


def test_cpu_and_cuda_run_in_this_hosts_python_and_cuda_gets_its_gpus(monkeypatch, tmp_path):
    cpu = _dry(monkeypatch, tmp_path, out="/tmp/c", suite=["--arch", "opt"])[-1]
    assert cpu.endswith("-m repro conformance --out /tmp/c --arch opt") and "--backend" not in cpu
    cuda = _dry(monkeypatch, tmp_path, out="/tmp/c", backend="cuda", gpus="2,3")[-1]
    assert cuda.startswith("$ env CUDA_VISIBLE_DEVICES=2,3 ") and cuda.endswith("--out /tmp/c --backend cuda")


@pytest.mark.parametrize(
    "request_, refusal",
    [
        ({"out": "a", "resume": "b"}, "not both or neither"),
        ({}, "not both or neither"),
        ({"out": "a", "backend": "tpu"}, "--backend must be cpu, rocm or cuda"),
        ({"out": "a", "gpus": "0"}, "--gpus chooses the GPUs of --backend rocm or cuda"),
        ({"out": "a", "backend": "cuda", "engine": "docker"}, "we ship no CUDA image"),
        ({"out": "a", "backend": "cuda", "gpus": "zero"}, "comma-separated device indices"),
        ({"out": "/elsewhere", "backend": "rocm", "engine": "docker"}, "must be under"),
    ],
)
def test_bad_requests_are_refused_with_the_fix(monkeypatch, tmp_path, request_, refusal):
    monkeypatch.setattr(jobs, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(engines.Local, "execute", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(jobs.JobError, match=refusal):
        jobs.conformance(jobs.ConformanceRequest(dry_run=True, **request_), log=lambda line: None)


def test_a_resume_runs_on_the_backend_it_started_on(monkeypatch, tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"backend": "rocm"}))
    monkeypatch.setattr(jobs, "RESULTS_DIR", tmp_path)
    with pytest.raises(jobs.JobError, match="measures on rocm, not cpu; pass --backend rocm"):
        jobs.conformance(jobs.ConformanceRequest(resume=str(tmp_path), dry_run=True), log=lambda line: None)
    lines = _dry(monkeypatch, tmp_path, resume=str(tmp_path / "results"), backend="cpu")
    assert lines[-1].endswith(f"--resume {tmp_path / 'results'}")
