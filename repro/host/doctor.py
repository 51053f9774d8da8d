"""`invoke doctor`: what this host has and lacks for each way of running, each with its fix."""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..model_registry import REAL_PYTHIA
from ..paths import hf_home
from .images import amd, containers


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
                "buildah": "apt-get install buildah (CI uses --storage-driver overlay, or vfs, --isolation chroot)",
                "apptainer": "HPC sites: `module load apptainer` (or your site's name for it); see README "
                "'On an HPC site'",
            }[name]
        )
        checks.append(Check(f"engine: {name}", works, detail, fix, "container runs"))
    return checks


def _amd() -> list[Check]:
    """Catches a doomed AMD host before a 40 GB build: driver, devices, groups, GPU architectures."""
    nodes = amd.device_nodes()
    renders = amd.render_nodes(nodes)
    kfd = any(n.path.endswith("kfd") for n in nodes)
    denied = [n for n in nodes if not n.accessible]
    archs = amd.gfx_archs()
    unsupported = sorted({a for a in archs if a not in amd.IMAGE_ARCHS})
    driver = amd.driver_version()
    return [
        Check(
            "AMD: /dev/kfd",
            kfd,
            "present" if kfd else "missing",
            "load the amdgpu kernel driver (ROCm install guide: amdgpu-install --usecase=dkms)",
            "ROCm runs",
        ),
        Check("AMD: GPU render nodes", bool(renders), f"{len(renders)} in /dev/dri", "same as /dev/kfd", "ROCm runs"),
        Check(
            "AMD: device access (groups)",
            kfd and bool(renders) and not denied,
            "this user can open /dev/kfd and every render node; containers get group ids "
            + ",".join(map(str, amd.group_ids(nodes)))
            if kfd and renders and not denied
            else ("no devices" if not nodes else "cannot open " + ", ".join(n.path for n in denied)),
            "usermod -aG render,video $USER, then log in again"
            + (f" (group ids {','.join(sorted({str(n.gid) for n in denied}))})" if denied else ""),
            "ROCm runs",
        ),
        Check(
            "AMD: GPU architectures",
            bool(archs) and not unsupported,
            ", ".join(archs) if archs else "no GPU agents in /sys/class/kfd",
            f"the ROCm image's op is built for {';'.join(amd.IMAGE_ARCHS)} (MI250, MI300X); for "
            f"{', '.join(unsupported) or 'your GPU'}: invoke build --build-arg PYTORCH_ROCM_ARCH=<arch>",
            "ROCm runs",
        ),
        Check(
            "AMD: amdgpu driver",
            driver is not None,
            f"amdgpu-dkms {driver}" if driver else "no /sys/module/amdgpu/version (in-box kernel driver, or none)",
            f"ROCm {amd.ROCM_RELEASE} user space supports kernel drivers within +/- 2 ROCm releases (AMD's user and "
            "kernel-space support matrix); install amdgpu-dkms from ROCm 6.2-6.4+ (amdgpu-install --usecase=dkms)",
            "ROCm runs",
        ),
    ]


def _resources() -> list[Check]:
    free = shutil.disk_usage(Path.cwd()).free / 2**30
    shm = shutil.disk_usage("/dev/shm").total / 2**30 if Path("/dev/shm").exists() else 0.0
    hf = hf_home()
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
            f"only needed for real hub models: huggingface-cli download {REAL_PYTHIA}",
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
                "scripts/bootstrap.sh (creates .venv with constraints/pinned.txt)",
                "local runs and tests",
            )
        )
    return checks


def checks() -> list[Check]:
    return [*_engines(), *_amd(), *_resources(), *_python()]


def exit_code(results: list[Check]) -> int:
    """0 when some way of running works (an engine, or this Python with its deps); 2 when none does."""
    ok = {c.name for c in results if c.ok}
    engine = any(name.startswith("engine:") for name in ok)
    local = all(f"python: {m}" in ok for m in ("torch", "deepspeed", "transformers"))
    return 0 if engine or local else 2


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
