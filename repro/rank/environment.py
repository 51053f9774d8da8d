"""What a run ran on: versions for the JSON, and the DeepSpeed-issue-template fields for reports."""

from __future__ import annotations

import os
import platform
import resource
import shutil
import sys
from importlib.metadata import PackageNotFoundError, version


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_hip": torch.version.hip,
        "torch_cuda": torch.version.cuda,
        "deepspeed": _version("deepspeed"),
        "transformers": _version("transformers"),
    }


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _os_release() -> str:
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def _rocm_version() -> str | None:
    for path in ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev"):
        if os.path.exists(path):
            return open(path).read().strip()
    return None


def _gpus() -> list[str]:
    try:
        import torch

        if torch.cuda.is_available():
            return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # a broken driver must not break the report
        pass
    return []


def _deepspeed_ops() -> dict[str, bool | str]:
    """ds_report's op compatibility table, as {op: compatible}."""
    try:
        from deepspeed.ops.op_builder.all_ops import ALL_OPS

        return {name: bool(builder.is_compatible(verbose=False)) for name, builder in sorted(ALL_OPS.items())}
    except Exception as exc:  # ds_report itself fails on some accelerators; say so instead of crashing
        return {"error": f"{type(exc).__name__}: {exc}"}


def describe(launcher: str, world_size: int) -> dict:
    """The environment fields DeepSpeed's issue template asks for."""
    shm = shutil.disk_usage("/dev/shm").total if os.path.exists("/dev/shm") else None
    gpus = _gpus()
    return {
        **versions(),
        "os": _os_release(),
        "kernel": platform.release(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "gpu_count": len(gpus),
        "rocm": _rocm_version(),
        "accelerator": os.environ.get("DS_ACCELERATOR", "auto"),
        "dev_shm_bytes": shm,
        "launcher": launcher,
        "world_size": world_size,
        "container_image": os.environ.get("REPRO_IMAGE"),
        "container_image_digest": os.environ.get("REPRO_IMAGE_DIGEST"),
        "deepspeed_ops": _deepspeed_ops(),
        "python_executable": sys.executable,
    }
