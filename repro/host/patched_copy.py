"""The `after` variant: the installed DeepSpeed plus our patch, as a copy the ranks import first."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..fixstatus import TARGET, PatchError, fix_status_of_package, installed_deepspeed, is_fixed
from ..paths import cache_root

PATCH_DIR = Path(__file__).resolve().parent.parent / "patches"


def patch_file() -> Path:
    patches = sorted(PATCH_DIR.glob("*.patch"))
    if len(patches) != 1:
        raise PatchError(f"expected exactly one patch in {PATCH_DIR}, found {len(patches)}")
    return patches[0]


def _patch(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    if shutil.which("patch") is None:
        raise PatchError("the `patch` program is missing (apt-get install patch)")
    return subprocess.run(
        ["patch", "-p1", "--forward", "--silent", *args, "-i", str(patch_file())],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def check_applies(root: Path, ds_version: str) -> None:
    """Raises PatchError unless the patch applies cleanly under `root` (a dir holding `deepspeed/`)."""
    if _patch(["--dry-run"], root).returncode == 0:
        return
    if _patch(["--dry-run", "--reverse"], root).returncode == 0:
        raise PatchError(f"DeepSpeed {ds_version} already contains the fix ({patch_file().name} is applied)")
    raise PatchError(
        f"{patch_file().name} does not apply to DeepSpeed {ds_version}: {TARGET} has changed; "
        "update the patch for this release"
    )


def apply_to(root: Path, ds_version: str) -> None:
    check_applies(root, ds_version)
    result = _patch([], root)
    if result.returncode != 0:
        raise PatchError(f"patch failed on DeepSpeed {ds_version}: {result.stdout.strip()} {result.stderr.strip()}")


def prepare_patched_copy(root: Path | None = None) -> Path:
    """A patched copy of the installed DeepSpeed, for PYTHONPATH; returns the directory holding it.

    The copy is kept at a stable path keyed by DeepSpeed version, installed source and patch, so
    DeepSpeed's JIT-built CPU ops (torch extensions, keyed by include path) are compiled once,
    not on every run.
    """
    package_dir, ds_version = installed_deepspeed()
    key = hashlib.sha256(patch_file().read_bytes() + (package_dir.parent / TARGET).read_bytes()).hexdigest()[:12]
    dest = (root or cache_root()) / f"deepspeed-{ds_version}-after-{key}"
    copy = dest / "deepspeed"
    if copy.exists() and is_fixed(fix_status_of_package(copy)):
        return dest
    check_applies(package_dir.parent, ds_version)  # fail fast with the installed version's reason
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=dest.parent if dest.parent.exists() else None))
    shutil.copytree(package_dir, staging / "deepspeed", ignore=shutil.ignore_patterns("__pycache__"))
    apply_to(staging, ds_version)
    if not is_fixed(fix_status_of_package(staging / "deepspeed")):
        raise PatchError(f"patched copy of DeepSpeed {ds_version} still lacks modifier_rank=0 in {TARGET}")
    dest.mkdir(parents=True, exist_ok=True)
    if copy.exists():
        shutil.rmtree(copy)
    os.replace(staging / "deepspeed", copy)
    shutil.rmtree(staging, ignore_errors=True)
    return dest


def after_root() -> Path | None:
    """The `after` DeepSpeed for PYTHONPATH: the patched copy, or None when the installed one already has
    the fix (the `after` image), so it is its own `after`."""
    package_dir, _ = installed_deepspeed()
    return None if is_fixed(fix_status_of_package(package_dir)) else prepare_patched_copy()
