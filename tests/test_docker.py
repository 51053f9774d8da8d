"""What can be checked of the images without building them (the ROCm one cannot be built here)."""

import re
import subprocess
import sys
from pathlib import Path

from repro.host.images import containers

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
DOCKERFILE = (DOCKER / "Dockerfile").read_text()


def _args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(.*)$", text, re.MULTILINE))


def test_one_dockerfile_whose_defaults_are_the_mission_rocm_image():
    stages = re.findall(r"^FROM \S+ AS (\w+)$", DOCKERFILE, re.MULTILINE)
    assert stages == ["base", "deps", "before", "after"]
    args = _args(DOCKERFILE)
    assert args["BASE_IMAGE"] == "rocm/dev-ubuntu-22.04:6.4.1-complete"
    assert args["TORCH_REQUIREMENT"] == "torch==2.9.1+rocm6.4"
    assert args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/rocm6.4"
    assert args["PYTORCH_ROCM_ARCH"] == "gfx90a;gfx942" and args["ROCM_WAVEFRONT_SIZE"] == "64"
    assert args["REPRO_BACKEND"] == "rocm" and args["DS_ACCELERATOR"] == "cuda"


def test_every_cpu_flavour_arg_exists_in_the_dockerfile_and_its_comment():
    args = _args(DOCKERFILE)
    for key, value in containers.FLAVOURS["cpu"].items():
        assert key in args, key
        assert f"--build-arg {key}={value}" in DOCKERFILE, key  # the plain-docker line in the header
    assert containers.FLAVOURS["cpu"]["TORCH_REQUIREMENT"] == "torch==2.9.1+cpu"


def test_the_image_declares_its_backend_intent_for_python_m_repro_run():
    assert re.search(r"^ENV .*REPRO_BACKEND=\$\{REPRO_BACKEND\}", DOCKERFILE, re.MULTILINE | re.DOTALL)
    assert "DS_ACCELERATOR=${DS_ACCELERATOR}" in DOCKERFILE


def test_versions_live_only_in_constraints():
    pins = dict(
        line.strip().split("==")
        for line in (ROOT / "constraints/pinned.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["deepspeed"] == "0.19.8" and pins["transformers"].startswith("4.57.")
    for name in ("Dockerfile", "install-deps.sh"):
        text = (DOCKER / name).read_text()
        for line in text.splitlines():
            if "pip install" in line:
                assert "==" not in line, (name, line)
        for pkg, version in pins.items():
            assert f'io.repro.{pkg}="{version}"' not in text, (name, pkg)  # no second copy of a version
    code = [ln for ln in (DOCKER / "install-deps.sh").read_text().splitlines() if not ln.lstrip().startswith("#")]
    assert not any("--extra-index-url" in ln for ln in code)


def test_after_is_before_plus_one_patch_layer():
    after = DOCKERFILE.split("FROM before AS after", 1)[1]
    assert after.count("RUN ") == 1 and "COPY" not in after and "patch -p1" in after
    assert "fix-status" in after


def test_the_after_layers_python_writes_a_deepspeed_diff_here(tmp_path):
    """The layer's own `python -c`, run here: a renamed helper or form fails this test, not the image build in CI
    (2026-12-07: patch_file(..., "master") after the form was renamed)."""
    after = DOCKERFILE.split("FROM before AS after", 1)[1]
    code = re.search(r"python -c '([^']*patch_file[^']*)' /tmp/0001\.diff", after)
    assert code, "the after layer no longer writes /tmp/0001.diff with python -c"
    out = tmp_path / "0001.diff"
    subprocess.run([sys.executable, "-c", code.group(1), str(out)], check=True, cwd=ROOT)
    text = out.read_text()
    assert text.startswith("diff --git a/deepspeed/") and "tests/" not in text.split("\n", 1)[0]
    assert "+++ b/deepspeed/module_inject/containers/features/hybrid_megatron.py" in text


def test_the_build_loads_the_compiled_op_and_nothing_compiles_at_run_time():
    verify = (DOCKER / "verify-image.sh").read_text()
    assert "importlib.import_module(InferenceBuilder().absolute_name())" in verify
    assert "ShareMemCommBuilder" not in (DOCKER / "install-deps.sh").read_text()


def test_dockerignore_keeps_secrets_and_bulk_out():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "results"} <= set(ignored)
