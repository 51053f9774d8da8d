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


# One patch per bug of the family; each stands alone and they apply together in any order.
FIX_8391 = "0001"  # modifier_rank=0 in HybridMegatronContainer's transforms (DeepSpeed #8391)
LORA_QKV_LAYOUT = "0002"  # QKV LoRA delta fused in the layout the weight has at that moment
LORA_NON_PINNED = "0003"  # non-pinned ZeRO-3 LoRA fusion persisted for the whole generate


KEY_FILES = (
    TARGET,
    "deepspeed/module_inject/containers/features/hybrid_engine.py",
    "deepspeed/runtime/hybrid_engine.py",
    "deepspeed/runtime/zero/partition_parameters.py",
    "deepspeed/module_inject/containers/gptneox.py",
    "deepspeed/module_inject/containers/llama.py",
    "deepspeed/module_inject/containers/internlm.py",
    "deepspeed/ops/transformer/inference/ds_attention.py",
)


def patch_file(number: str = FIX_8391) -> Path:
    found = sorted(PATCH_DIR.glob(f"{number}-*.patch"))
    if len(found) != 1:
        raise PatchError(f"expected exactly one {number}-*.patch in {PATCH_DIR}, found {len(found)}")
    return found[0]


def _patch(args: list[str], cwd: Path, number: str = FIX_8391) -> subprocess.CompletedProcess:
    if shutil.which("patch") is None:
        raise PatchError("the `patch` program is missing (apt-get install patch)")
    return subprocess.run(
        ["patch", "-p1", "--forward", "--silent", *args, "-i", str(patch_file(number))],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def check_applies(root: Path, ds_version: str, number: str = FIX_8391) -> None:
    """Raises PatchError unless the patch applies cleanly under `root` (a dir holding `deepspeed/`)."""
    if _patch(["--dry-run"], root, number).returncode == 0:
        return
    name = patch_file(number).name
    if _patch(["--dry-run", "--reverse"], root, number).returncode == 0:
        raise PatchError(f"DeepSpeed {ds_version} already contains the fix ({name} is applied)")
    raise PatchError(f"{name} does not apply to DeepSpeed {ds_version}: its files have changed; update the patch")


def apply_to(root: Path, ds_version: str, number: str = FIX_8391) -> None:
    check_applies(root, ds_version, number)
    result = _patch([], root, number)
    if result.returncode != 0:
        raise PatchError(f"patch failed on DeepSpeed {ds_version}: {result.stdout.strip()} {result.stderr.strip()}")


def is_applied(root: Path, number: str) -> bool:
    """True when `number`'s patch is already in the tree under `root` (it reverses cleanly)."""
    return _patch(["--dry-run", "--reverse"], root, number).returncode == 0


def prepare_patched_copy(root: Path | None = None, patches: tuple[str, ...] = (FIX_8391,)) -> Path:
    """A copy of the installed DeepSpeed with `patches` applied, for PYTHONPATH; returns the directory
    holding it. Kept at a stable path keyed by DeepSpeed version, installed source and patch set, so it
    is made once."""
    package_dir, ds_version = installed_deepspeed()
    digest = hashlib.sha256()
    for rel in KEY_FILES:  # what the patches touch, and the gather the matrix's harness fix changes
        path = package_dir.parent / rel
        digest.update(path.read_bytes() if path.exists() else b"-")
    for number in patches:
        digest.update(patch_file(number).read_bytes())
    label = "after" if patches == (FIX_8391,) else "+".join(patches)
    dest = (root or cache_root()) / f"deepspeed-{ds_version}-{label}-{digest.hexdigest()[:12]}"
    copy = dest / "deepspeed"
    if copy.exists() and all(is_applied(dest, n) for n in patches):
        return dest
    for number in patches:  # fail fast with the installed version's reason
        check_applies(package_dir.parent, ds_version, number)
    # Staged beside its destination, never in the system temp dir: os.replace cannot cross filesystems.
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=dest.parent))
    try:
        shutil.copytree(package_dir, staging / "deepspeed", ignore=shutil.ignore_patterns("__pycache__"))
        for number in patches:
            apply_to(staging, ds_version, number)
        if FIX_8391 in patches and not is_fixed(fix_status_of_package(staging / "deepspeed")):
            raise PatchError(f"patched copy of DeepSpeed {ds_version} still lacks modifier_rank=0 in {TARGET}")
        dest.mkdir(parents=True, exist_ok=True)
        if copy.exists():
            shutil.rmtree(copy)
        os.replace(staging / "deepspeed", copy)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def after_root() -> Path | None:
    """The `after` DeepSpeed for PYTHONPATH: the patched copy, or None when the installed one already has
    the fix (the `after` image), so it is its own `after`."""
    package_dir, _ = installed_deepspeed()
    return None if is_fixed(fix_status_of_package(package_dir)) else prepare_patched_copy()
