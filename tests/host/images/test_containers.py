"""Engine choice and the exact commands: AMD's documented ROCm flags, no --privileged."""

from pathlib import Path

import pytest

from repro.host.images import containers, engines


def _run(engine, backend, image, inner, mounts, **flags):
    """The run command an engine object returns (what a dry run prints and a real run executes)."""
    return engines.get(engine).run_command(backend, image, inner, mounts, engines.RunFlags(**flags))


def test_rocm_run_command_uses_amds_documented_flags(monkeypatch, tmp_path):
    monkeypatch.setattr(engines, "device_group_ids", lambda: ["109", "44"])
    monkeypatch.delenv("HF_TOKEN", raising=False)
    mounts = containers.RunMounts(results=tmp_path, hf_cache=None)
    cmd = _run("docker", "rocm", "img", ["python", "-V"], mounts, gpus=["0", "1"], selinux_label=False)
    line = " ".join(cmd)
    for flag in (
        "--device /dev/kfd",
        "--device /dev/dri",
        "--group-add video",
        "--group-add 109",  # the host's numeric render gid, from stat: names resolve inside the image
        "--shm-size=16g",
        "-e HIP_VISIBLE_DEVICES=0,1",
    ):
        assert flag in line, flag
    assert line.count("--group-add") == 2  # 44 is video already
    assert "--privileged" not in line and "seccomp" not in line and "--ipc=host" not in line
    assert f"{engines.REPO_ROOT}:{containers.WORKDIR}:ro" in cmd
    assert f"{tmp_path.resolve()}:{containers.WORKDIR}/results:rw" in cmd
    assert cmd[-3:] == ["img", "python", "-V"]


def test_device_group_ids_come_from_stat_of_the_nodes(monkeypatch):
    nodes = [
        containers.amd.DeviceNode("/dev/kfd", 993, True),
        containers.amd.DeviceNode("/dev/dri/renderD128", 992, True),
    ]
    monkeypatch.setattr(containers.amd, "device_nodes", lambda: nodes)
    assert containers.device_group_ids() == ["992", "993"]


def test_rootless_podman_keeps_the_callers_groups(monkeypatch, tmp_path):
    monkeypatch.setattr(engines, "device_group_ids", lambda: ["109"])
    monkeypatch.setattr(engines.os, "geteuid", lambda: 1000)
    cmd = _run("podman", "rocm", "img", ["true"], containers.RunMounts(tmp_path, None))
    assert "keep-groups" in cmd and "109" not in cmd and "--userns=keep-id" in cmd


def test_seccomp_only_on_request(monkeypatch, tmp_path):
    monkeypatch.setattr(engines, "device_group_ids", lambda: [])
    mounts = containers.RunMounts(results=tmp_path, hf_cache=None)
    assert "seccomp=unconfined" in _run("docker", "rocm", "img", ["t"], mounts, seccomp_unconfined=True)
    assert "seccomp=unconfined" not in _run("docker", "rocm", "img", ["t"], mounts)


@pytest.mark.parametrize(("enforcing", "suffix"), [(True, ":ro,z"), (False, ":ro")])
def test_selinux_hosts_get_relabelled_mounts(monkeypatch, tmp_path, enforcing, suffix):
    monkeypatch.setattr(engines, "selinux_enforcing", lambda: enforcing)
    cmd = _run("docker", "cpu", "img", ["true"], containers.RunMounts(tmp_path, None))
    assert f"{engines.REPO_ROOT}:{containers.WORKDIR}{suffix}" in cmd


def test_hf_token_passes_by_name_only(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    cmd = _run("docker", "cpu", "img", ["true"], containers.RunMounts(tmp_path, tmp_path))
    assert "HF_TOKEN" in cmd and not any("hf_secret_value" in c for c in cmd)
    assert f"{tmp_path}:{engines.CONTAINER_HF_HOME}:rw" in cmd


def test_cpu_run_has_no_device_flags(tmp_path):
    cmd = _run("docker", "cpu", "img", ["true"], containers.RunMounts(tmp_path, None))
    assert "/dev/kfd" not in " ".join(cmd)


def test_auto_without_engine_runs_locally(monkeypatch):
    monkeypatch.setattr(containers, "engine_works", lambda name: False)
    monkeypatch.setattr(containers, "amd_gpu_present", lambda: False)
    choice = containers.choose("auto", "auto")
    assert (choice.backend, choice.engine) == ("cpu", "local") and "no working container engine" in choice.reason


def test_auto_with_docker_and_kfd_picks_rocm(monkeypatch):
    monkeypatch.setattr(containers, "engine_works", lambda name: name == "docker")
    monkeypatch.setattr(containers, "amd_gpu_present", lambda: True)
    assert containers.choose("auto", "auto").backend == "rocm"


@pytest.mark.parametrize(
    ("backend", "engine", "message"),
    [
        ("rocm", "auto", "/dev/kfd is missing"),
        ("gpu", "auto", "--backend must be"),
        ("cpu", "lxc", "--engine must be"),
    ],
)
def test_impossible_choices_are_refused(monkeypatch, backend, engine, message):
    monkeypatch.setattr(containers, "amd_gpu_present", lambda: False)
    with pytest.raises(containers.EngineError, match=message):
        containers.choose(backend, engine)


def test_docker_client_without_engine_is_not_an_engine(monkeypatch):
    monkeypatch.setattr(engines.shutil, "which", lambda name: "/usr/bin/docker")
    monkeypatch.setattr(engines.subprocess, "run", lambda *a, **k: type("P", (), {"returncode": 1})())
    with pytest.raises(containers.EngineError, match="not installed or its engine is not running"):
        containers.choose("cpu", "docker")


def test_absent_gpus_are_refused(monkeypatch):
    monkeypatch.setattr(containers.Path, "exists", lambda self: False)
    with pytest.raises(containers.EngineError, match="absent"):
        containers.gpu_ids("0,1")
    with pytest.raises(containers.EngineError, match="comma-separated"):
        containers.gpu_ids("all")


def test_build_command_targets_the_variant():
    cmd = engines.get("docker").build_command("rocm", "after", {"PYTORCH_ROCM_ARCH": "gfx942"})
    assert cmd[:4] == ["docker", "build", "-f", "docker/Dockerfile"]
    assert "--target" in cmd and cmd[cmd.index("--target") + 1] == "after"
    assert "PYTORCH_ROCM_ARCH=gfx942" in cmd and cmd[-1] == "."
    assert Path(engines.REPO_ROOT / cmd[3]).exists()


def test_cpu_flavour_is_the_same_dockerfile_with_its_args_and_user_args_win():
    cmd = engines.get("docker").build_command("cpu", "before", {"BASE_IMAGE": "local/bookworm"})
    assert cmd[3] == "docker/Dockerfile"
    assert "REPRO_BACKEND=cpu" in cmd and "DS_ACCELERATOR=cpu" in cmd and "DS_BUILD_TRANSFORMER_INFERENCE=0" in cmd
    assert "BASE_IMAGE=local/bookworm" in cmd and "BASE_IMAGE=debian:bookworm-slim" not in cmd


def test_image_digest_reaches_the_container_environment(tmp_path):
    cmd = _run("docker", "cpu", "img", ["true"], containers.RunMounts(tmp_path, None), digest="sha256:abc")
    assert "REPRO_IMAGE_DIGEST=sha256:abc" in cmd


def test_buildah_storage_driver_is_buildahs_own_unless_chosen(monkeypatch):
    monkeypatch.delenv("REPRO_BUILDAH_STORAGE", raising=False)
    assert engines.get("buildah").base() == ["buildah"]  # never creates a store of a forced driver
    monkeypatch.setenv("REPRO_BUILDAH_STORAGE", "overlay")
    assert engines.get("buildah").base() == ["buildah", "--storage-driver", "overlay"]
