"""Apptainer definitions are generated from docker/Dockerfile and cannot drift from it; the exec line
keeps the Docker path's mounts and GPU rules. (Apptainer is not installable here: commands are checked as
text and by dry run.)"""

import re
import shlex
from pathlib import Path

import pytest

from repro.host import jobs
from repro.host.images import apptainer, containers, engines
from repro.paths import REPO_ROOT

DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"
BEFORE_SIF = Path("/sifs/rocm-before.sif")


def _defs(flavour: str = "rocm", **args) -> tuple[str, str]:
    merged = {**containers.FLAVOURS[flavour], **args}
    return apptainer.definition(merged, "before"), apptainer.definition(merged, "after", before_sif=BEFORE_SIF)


def _section(text: str, name: str) -> str:
    match = re.search(rf"^%{name}\n(.*?)(?=^%|\Z)", text, flags=re.S | re.M)
    return match.group(1) if match else ""


def test_every_run_step_of_the_dockerfile_is_in_exactly_one_definition():
    _, stages = apptainer.parse(DOCKERFILE)
    runs = [rest for stage in stages for keyword, rest in stage.instructions if keyword == "RUN"]
    before, after = _defs()
    assert len(runs) == 4  # base, deps, before, after
    for run in runs:
        assert (run in _section(before, "post")) != (run in _section(after, "post")), run


def test_before_bootstraps_from_the_pinned_base_and_cpu_flavour_from_its_own():
    before, _ = _defs()
    assert before.splitlines()[0:2] == ["Bootstrap: docker", "From: rocm/dev-ubuntu-22.04:6.4.1-complete"]
    cpu_before, _ = _defs("cpu")
    assert "From: debian:bookworm-slim" in cpu_before
    pinned, _ = _defs(BASE_IMAGE="rocm/dev-ubuntu-22.04:6.4.1-complete@sha256:abc")
    assert "From: rocm/dev-ubuntu-22.04:6.4.1-complete@sha256:abc" in pinned


def test_the_image_intent_and_constraints_hold_at_run_time():
    before, _ = _defs()
    env = _section(before, "environment")
    for line in ('REPRO_BACKEND="rocm"', 'DS_ACCELERATOR="cuda"', 'PIP_CONSTRAINT="/opt/repro/constraints.txt',
                 'PATH="/opt/venv/bin:$PATH"'):  # fmt: skip
        assert line in env, line
    assert 'REPRO_BACKEND="cpu"' in _section(_defs("cpu")[0], "environment")


def test_build_args_are_exported_before_the_steps_that_read_them():
    post = _section(_defs()[0], "post")
    assert post.index("export TORCH_REQUIREMENT=torch==2.9.1+rocm6.4") < post.index("/opt/repro/install-deps.sh")
    assert "export PYTORCH_ROCM_ARCH='gfx90a;gfx942'" in post
    assert "io.repro.torch torch==2.9.1+rocm6.4" in _section(_defs()[0], "labels")  # ENV value substituted


def test_after_is_the_before_sif_plus_the_patch_step_with_the_image_environment():
    _, after = _defs()
    assert after.splitlines()[0:2] == ["Bootstrap: localimage", f"From: {BEFORE_SIF}"]
    post = _section(after, "post")
    assert post.index('export PATH="/opt/venv/bin:$PATH"') < post.index("patch -p1 --forward")
    assert "install-deps.sh" not in post and "%files" not in after
    assert "Generated from docker/Dockerfile" in _section(after, "help")
    with pytest.raises(ValueError, match="before_sif"):
        apptainer.definition(containers.FLAVOURS["rocm"], "after")


def test_the_source_is_copied_as_docker_sees_it(tmp_path):
    files = _section(_defs()[0], "files").split("\n")
    assert f"    {apptainer.CONTEXT_DIR} /opt/repro/src" in files
    context = apptainer.stage_context(tmp_path / "context")
    names = {p.name for p in context.iterdir()}
    assert {"repro", "docker", "constraints", "pyproject.toml"} <= names
    assert (context / "constraints/pinned.txt").is_file()
    assert not names & {".git", ".venv", "results", "build", ".ci"}
    assert not list(context.rglob("__pycache__"))


def test_an_instruction_without_a_rule_is_refused(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM x AS before\nHEALTHCHECK CMD true\n")
    with pytest.raises(ValueError, match="no rule for HEALTHCHECK"):
        apptainer.definition({}, "before", dockerfile=dockerfile)


def _exec(backend: str, monkeypatch, **env) -> list[str]:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    mounts = containers.RunMounts(results=REPO_ROOT / "results", hf_cache=None)
    image = engines.get("apptainer").image(backend, "before")
    flags = engines.RunFlags(gpus=["0", "1"], selinux_label=True)
    return engines.get("apptainer").run_command(backend, image, ["python", "-m", "repro", "run"], mounts, flags)


def test_exec_binds_like_docker_with_rocm_only_on_the_rocm_backend(monkeypatch):
    cmd = _exec("rocm", monkeypatch, ROCR_VISIBLE_DEVICES="2,3")
    line = shlex.join(cmd)
    assert cmd[:3] == ["apptainer", "exec", "--rocm"] and "--cleanenv" in cmd
    assert f"--bind {REPO_ROOT}:/workspace:ro " in line and ",z" not in line
    assert "--env HIP_VISIBLE_DEVICES=0,1" in line and "--env ROCR_VISIBLE_DEVICES=2,3" in line
    assert "HOME=" not in line
    assert cmd[cmd.index("python") - 1] == str(apptainer.sif_path("rocm", "before"))
    assert "--rocm" not in _exec("cpu", monkeypatch)


def test_slurm_launcher_is_refused_for_images():
    req = jobs.ReproRequest(engine="apptainer", backend="rocm", dry_run=True, launcher="slurm")
    with pytest.raises(jobs.JobError, match="scripts/slurm/repro.sbatch"):
        jobs.repro(req, log=lambda _: None)


def test_clean_removes_the_sif_files(tmp_path, monkeypatch):
    monkeypatch.setattr(apptainer, "SIF_DIR", tmp_path)
    monkeypatch.setattr(jobs, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(jobs, "cache_root", lambda: tmp_path / "cache")
    monkeypatch.setattr(containers, "engine_works", lambda name: name == "apptainer")
    sif = tmp_path / "cpu-before.sif"
    sif.write_text("x")
    lines = []
    jobs.clean(True, "apptainer", dry_run=False, log=lines.append)
    assert not sif.exists() and f"remove {sif}" in lines
