"""`invoke doctor`: what this host has and lacks for each way of running, each with its fix."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import containers


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    needed_for: str = "all"


def _engines() -> list[Check]:
    checks = []
    for name in containers.ENGINES:
        client = shutil.which(name)
        works = containers.engine_works(name)
        detail = "works" if works else ("client found, engine not reachable" if client else "not installed")
        fix = (
            ""
            if works
            else {
                "docker": "install Docker Engine and start it (systemctl start docker), or --engine podman/buildah",
                "podman": "apt-get install podman (rootless needs subuid/subgid ranges)",
                "buildah": "apt-get install buildah (CI uses --storage-driver vfs --isolation chroot)",
            }[name]
        )
        checks.append(Check(f"engine: {name}", works, detail, fix, "container runs"))
    return checks


def _amd() -> list[Check]:
    kfd, dri = Path("/dev/kfd"), Path("/dev/dri")
    renders = sorted(dri.glob("renderD*")) if dri.exists() else []
    groups = {g: os.access(str(renders[0]), os.R_OK | os.W_OK) if renders else False for g in ("render",)}
    rocm = Path("/opt/rocm/.info/version")
    return [
        Check(
            "AMD: /dev/kfd",
            kfd.exists(),
            "present" if kfd.exists() else "missing",
            "load the amdgpu kernel driver (ROCm install guide: amdgpu-install --usecase=dkms)",
            "ROCm runs",
        ),
        Check("AMD: GPU render nodes", bool(renders), f"{len(renders)} in /dev/dri", "same as /dev/kfd", "ROCm runs"),
        Check(
            "AMD: render/video group access",
            all(groups.values()) and bool(renders),
            "this user can open the render node" if all(groups.values()) and renders else "no access",
            "usermod -aG render,video $USER, then log in again",
            "ROCm runs",
        ),
        Check(
            "AMD: ROCm userspace",
            rocm.exists(),
            rocm.read_text().strip() if rocm.exists() else "not found",
            "only needed for --engine local on ROCm; the ROCm image carries its own",
            "local ROCm runs",
        ),
    ]


def _resources() -> list[Check]:
    free = shutil.disk_usage(Path.cwd()).free / 2**30
    shm = shutil.disk_usage("/dev/shm").total / 2**30 if Path("/dev/shm").exists() else 0.0
    hf = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return [
        Check(
            "disk: free space",
            free >= 40,
            f"{free:.0f} GiB free here",
            "the ROCm image needs ~40 GiB to build; the CPU image ~5 GiB",
            "image builds",
        ),
        Check(
            "/dev/shm", shm >= 1, f"{shm:.1f} GiB", "mount a larger tmpfs on /dev/shm (gloo/NCCL use it)", "local runs"
        ),
        Check(
            "HF cache",
            hf.is_dir(),
            str(hf) if hf.is_dir() else f"{hf} missing",
            "only needed for real hub models: huggingface-cli download EleutherAI/pythia-410m-deduped",
            "--model <hub id>",
        ),
    ]


def _python() -> list[Check]:
    checks = []
    for module in ("torch", "deepspeed", "transformers", "invoke", "matplotlib", "pytest"):
        found = importlib.util.find_spec(module) is not None
        checks.append(
            Check(
                f"python: {module}",
                found,
                "importable" if found else "missing",
                "scripts/bootstrap.sh (creates .venv with constraints.txt)",
                "local runs and tests",
            )
        )
    return checks


def checks() -> list[Check]:
    return [*_engines(), *_amd(), *_resources(), *_python()]


def render(results: list[Check]) -> str:
    lines = []
    for c in results:
        mark = "ok " if c.ok else "-- "
        lines.append(f"{mark} {c.name:34} {c.detail}" + ("" if c.ok else f"\n      fix ({c.needed_for}): {c.fix}"))
    choice = "unavailable"
    try:
        picked = containers.choose("auto", "auto")
        choice = f"{picked.backend} via {picked.engine}: {picked.reason}"
    except containers.EngineError as exc:
        choice = str(exc)
    lines.append(f"\n`invoke repro` would run: {choice}")
    return "\n".join(lines)
