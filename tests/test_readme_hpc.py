"""The README's HPC section runs as written: every `invoke` command in it, and the one in the sbatch script,
is run here with --dry-run (Apptainer and Slurm absent from PATH) and must print Apptainer or srun command
lines, never a Docker one."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## On an HPC site (Apptainer + Slurm)"


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    return text[start : text.index("\n## ", start + len(SECTION))]


def _readme_invoke_lines() -> list[str]:
    blocks = re.findall(r"```\n(.*?)```", _section(), flags=re.S)
    lines = [ln.split("#")[0].strip() for block in blocks for ln in block.splitlines()]
    return [ln for ln in lines if ln.startswith(".venv/bin/invoke ")]


SBATCH_GPU = ("repro.sbatch", "conformance-gpu.sbatch")


def _sbatch_invoke_lines(name: str) -> list[str]:
    script = (ROOT / "scripts" / "slurm" / name).read_text()
    lines = [ln.strip() for ln in script.splitlines() if ln.strip().startswith("exec srun ")]
    invokes = [ln[ln.index(".venv/bin/invoke ") :] for ln in lines]
    swap = {'"$gpus"': "0,1", "${REPRO_ARGS:-}": "", '"$out"': "results/runs/sbatch-dry-run"}
    for old, new in swap.items():
        invokes = [ln.replace(old, new) for ln in invokes]
    return [ln.strip() for ln in invokes]


def _dry_run(line: str) -> subprocess.CompletedProcess:
    argv = shlex.split(line)[1:]
    if "--dry-run" not in argv:
        argv.append("--dry-run")
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no docker, apptainer, srun
    return subprocess.run(
        [sys.executable, "-m", "invoke", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_section_has_the_commands_a_site_needs():
    lines = _readme_invoke_lines()
    assert any("build --engine apptainer" in ln for ln in lines)
    assert any("repro --engine apptainer" in ln for ln in lines)
    assert any("--launcher slurm" in ln for ln in lines)
    assert "sbatch scripts/slurm/repro.sbatch" in _section()
    assert "docker-archive://" in _section() and "oci-archive" in _section()


@pytest.mark.parametrize("line", [*_readme_invoke_lines(), *(x for n in SBATCH_GPU for x in _sbatch_invoke_lines(n))])
def test_each_command_dry_runs_without_docker(line):
    done = _dry_run(line)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    commands = [ln[2:] for ln in out.splitlines() if ln.startswith("$ ")]
    assert commands, out
    assert not any(c.startswith(("docker ", "podman ")) for c in commands), commands
    if "--engine apptainer" in line:
        assert all(c.startswith("apptainer ") for c in commands), commands
        if line.split()[1] in ("repro", "conformance"):
            assert any(c.startswith("apptainer exec --rocm ") for c in commands), commands
    if "--launcher slurm" in line:
        assert any("--launcher slurm" in c for c in commands), commands


@pytest.mark.parametrize("name", SBATCH_GPU)
def test_sbatch_script_is_valid_bash_for_one_node(name):
    script = ROOT / "scripts" / "slurm" / name
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "#SBATCH --nodes=1" in text and "#SBATCH --ntasks=1" in text


def test_the_amd_sections_conformance_command_prints_the_rocm_image_run():
    """The README's AMD section gives the conformance command beside the reproduction's; dry-run here, it prints
    the ROCm image's run with the GPUs and the rocm backend (the run itself refuses without them)."""
    text = (ROOT / "README.md").read_text()
    start = text.index("## On an AMD host")
    section = text[start : text.index("\n## ", start + 5)]
    lines = [ln.split("#")[0].strip() for ln in section.splitlines()]
    (line,) = [ln for ln in lines if ln.startswith(".venv/bin/invoke conformance")]
    done = _dry_run(line)
    runs = [ln for ln in done.stdout.splitlines() if ln.startswith("$ docker run")]
    assert done.returncode == 0 and len(runs) == 1, done.stdout + done.stderr
    assert "HIP_VISIBLE_DEVICES=0,1" in runs[0] and "conformance --out /workspace/results/conformance-rocm" in runs[0]
    assert runs[0].endswith("--backend rocm --quick") and "--device /dev/kfd" in runs[0]
