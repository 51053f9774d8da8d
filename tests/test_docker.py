"""What can be checked of the images without building them (the ROCm one cannot be built here)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
MARK = "# ---- everything below this line is identical"


def _shared(name):
    text = (DOCKER / name).read_text()
    return text[text.index(MARK) :]


def test_rocm_and_cpu_share_every_stage_but_the_base():
    assert _shared("rocm.Dockerfile") == _shared("cpu.Dockerfile")
    for name in ("rocm.Dockerfile", "cpu.Dockerfile"):
        stages = re.findall(r"^FROM \S+ AS (\w+)$", (DOCKER / name).read_text(), re.MULTILINE)
        assert stages == ["base", "deps", "before", "after"], name


def test_rocm_pins_match_the_mission():
    text = (DOCKER / "rocm.Dockerfile").read_text()
    assert "ARG BASE_IMAGE=rocm/dev-ubuntu-22.04:6.4.1-complete" in text
    assert "ARG TORCH_REQUIREMENT=torch==2.9.1+rocm6.4" in text
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm6.4" in text
    assert "ARG PYTORCH_ROCM_ARCH=gfx90a;gfx942" in text and "ARG ROCM_WAVEFRONT_SIZE=64" in text
    cpu = (DOCKER / "cpu.Dockerfile").read_text()
    assert "ARG TORCH_REQUIREMENT=torch==2.9.1+cpu" in cpu


def test_versions_live_only_in_constraints():
    pins = dict(
        line.strip().split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["deepspeed"] == "0.19.8" and pins["transformers"].startswith("4.57.")
    for name in ("rocm.Dockerfile", "cpu.Dockerfile", "install-deps.sh"):
        text = (DOCKER / name).read_text()
        # labels may restate a version, but no install line may carry its own pin
        for line in text.splitlines():
            if "pip install" in line:
                assert "==" not in line, (name, line)
        for pkg, version in pins.items():
            for found in re.findall(rf"io\.repro\.{pkg}=\"([^\"]+)\"", text):
                assert found == version, (name, pkg, found)
    code = [ln for ln in (DOCKER / "install-deps.sh").read_text().splitlines() if not ln.lstrip().startswith("#")]
    assert not any("--extra-index-url" in ln for ln in code)


def test_after_is_before_plus_one_patch_layer():
    after = _shared("cpu.Dockerfile").split("FROM before AS after", 1)[1]
    assert after.count("RUN ") == 1 and "COPY" not in after and "patch -p1" in after
    assert "fix-status" in after


def test_dockerignore_keeps_secrets_and_bulk_out():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "results"} <= set(ignored)
