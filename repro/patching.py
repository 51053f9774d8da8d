"""The `after` variant: the installed DeepSpeed plus our patch, as a copy the ranks import first.

Also answers, from source, whether a DeepSpeed module carries the fix, so a report can only claim
a fix that the ranks really loaded.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

PATCH_DIR = Path(__file__).parent / "patches"
TARGET = "deepspeed/module_inject/containers/features/hybrid_megatron.py"
FIXED_FUNCTIONS = ("transform_for_inference", "transform_for_training")


class PatchError(RuntimeError):
    """The patch cannot be used with this DeepSpeed; the message says why and what to do."""


def patch_file() -> Path:
    patches = sorted(PATCH_DIR.glob("*.patch"))
    if len(patches) != 1:
        raise PatchError(f"expected exactly one patch in {PATCH_DIR}, found {len(patches)}")
    return patches[0]


def installed_deepspeed() -> tuple[Path, str]:
    """The installed package's directory and version, without importing it (no torch start-up)."""
    from importlib.metadata import PackageNotFoundError, version

    spec = importlib.util.find_spec("deepspeed")
    if spec is None or spec.origin is None:
        raise PatchError("DeepSpeed is not installed in this environment (pip install deepspeed)")
    try:
        ds_version = version("deepspeed")
    except PackageNotFoundError:
        ds_version = "unknown"
    return Path(spec.origin).parent, ds_version


def fix_status_of_source(source: str) -> dict[str, bool]:
    """For each transform: do all its `GatheredParameters(...)` contexts pass `modifier_rank=0`?"""
    status = {name: False for name in FIXED_FUNCTIONS}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name in FIXED_FUNCTIONS:
            calls = [item.context_expr for w in ast.walk(node) if isinstance(w, ast.With) for item in w.items]
            gathers = [c for c in calls if isinstance(c, ast.Call) and _call_name(c) == "GatheredParameters"]
            status[node.name] = bool(gathers) and all(_has_modifier_rank_zero(c) for c in gathers)
    return status


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _has_modifier_rank_zero(call: ast.Call) -> bool:
    return any(
        k.arg == "modifier_rank" and isinstance(k.value, ast.Constant) and k.value.value == 0 for k in call.keywords
    )


def fix_status_of_package(package_dir: Path) -> dict[str, bool]:
    return fix_status_of_source((package_dir.parent / TARGET).read_text())


def is_fixed(status: dict[str, bool]) -> bool:
    return all(status.values())


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


def cache_root() -> Path:
    """Where patched copies live between runs ($REPRO_CACHE_DIR, else $XDG_CACHE_HOME/repro)."""
    xdg = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    base = os.environ.get("REPRO_CACHE_DIR") or xdg / "repro"
    return Path(base)


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
