"""The `after` variant: the installed DeepSpeed plus our patch, as a copy the ranks import first."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ... import findings
from ...findings.prs import OUTSIDE_SERIES, OUTSIDE_SERIES_LABEL
from ...fixstatus import TARGET, PatchError, fix_status_of_package, installed_deepspeed, is_fixed
from ...paths import cache_root
from . import series
from .pr_files import commit_of, pr_patches

PATCH_DIR = Path(__file__).resolve().parents[2] / "patches"
deepspeed_part = series.deepspeed_part


# The upstream series: one commit per bug, each its fix and its test under tests/unit/, in the registry's order. It
# is not committed: series.py derives it from the pull requests (repro/patches/prs/) for the installed DeepSpeed, on
# first use, into the cache. A copy of an installed DeepSpeed gets each patch's deepspeed/ part only (site-packages
# has no tests/). Patches apply in series order; where one needs another, regression.PREREQUISITES says so.
FIX_8391 = findings.by_id("zero3-qkv-layout").patch  # modifier_rank=0 in HybridMegatronContainer's transforms


KEY_FILES = (
    TARGET,
    "deepspeed/module_inject/containers/features/hybrid_engine.py",
    "deepspeed/runtime/hybrid_engine.py",
    "deepspeed/runtime/zero/partition_parameters.py",
    "deepspeed/module_inject/containers/gptneox.py",
    "deepspeed/module_inject/containers/llama.py",
    "deepspeed/module_inject/containers/internlm.py",
    "deepspeed/ops/transformer/inference/ds_attention.py",
    # what the pull requests outside the series (the fallbacks) edit
    *(
        f"deepspeed/ops/transformer/inference/op_binding/{op}.py"
        for op in ("base", "gelu_gemm", "linear", "mlp_gemm", "softmax", "softmax_context")
    ),
)


def series_dir(ds_version: str | None = None) -> Path:
    """The series for the installed DeepSpeed, derived from the pull requests once per their content and the
    installed files they touch (a cache folder). `ds_version`, where given, must be the installed one: the series
    is derived on the tree it applies to."""
    package_dir, installed = installed_deepspeed()
    if ds_version not in (None, installed):
        raise PatchError(f"the series is derived for the installed DeepSpeed ({installed}), not {ds_version}")
    dest = cache_root() / "series" / f"{installed}-{series.key(package_dir, installed)}"
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=dest.parent))
    try:
        series.derive_for_package(package_dir, installed, staging)
        os.replace(staging, dest)
    except series.SeriesError as exc:
        raise PatchError(
            f"cannot derive the series for the installed DeepSpeed {installed} (the series is derived "
            f"on a DeepSpeed as released: reinstall it if it was patched in place): {exc}"
        ) from None
    except OSError:  # another process derived it first: the same bytes
        if not dest.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


COMMITTED = "committed"  # patch_file's version for a finding's commit as committed in its pull request


def patch_file(number: str = FIX_8391, ds_version: str | None = None) -> Path:
    """A finding's patch in the series for the installed DeepSpeed, or, for COMMITTED, its commit in its pull
    request (the form a maintainer reads, on 0.19.8)."""
    if ds_version == COMMITTED:
        return commit_of(number)
    folder = series_dir(ds_version)
    found = sorted(folder.glob(f"{number}-*.patch"))
    if len(found) != 1:
        raise PatchError(f"expected exactly one {number}-*.patch in {folder}, found {len(found)}")
    return found[0]


def run_patch(args: list[str], cwd: Path, patch_text: str) -> subprocess.CompletedProcess:
    """`patch -p1` of a `git format-patch` text's deepspeed/ part under `cwd` (a dir holding `deepspeed/`)."""
    if shutil.which("patch") is None:
        raise PatchError("the `patch` program is missing (apt-get install patch)")
    return subprocess.run(
        ["patch", "-p1", "--forward", "--silent", "--no-backup-if-mismatch", *args],
        input=deepspeed_part(patch_text),
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def _patch(
    args: list[str], cwd: Path, number: str = FIX_8391, release: str | None = None
) -> subprocess.CompletedProcess:
    return run_patch(args, cwd, patch_file(number, release).read_text())


def check_applies(root: Path, ds_version: str, number: str = FIX_8391, release: str | None = None) -> None:
    """Raises PatchError unless the patch applies cleanly under `root` (a dir holding `deepspeed/`). `release`:
    whose form of the series (default: the installed DeepSpeed's)."""
    if _patch(["--dry-run"], root, number, release).returncode == 0:
        return
    name = patch_file(number, release).name
    if _patch(["--dry-run", "--reverse"], root, number, release).returncode == 0:
        raise PatchError(f"DeepSpeed {ds_version} already contains the fix ({name} is applied)")
    raise PatchError(f"{name} does not apply to DeepSpeed {ds_version}: its files have changed; update the patch")


def apply_to(root: Path, ds_version: str, number: str = FIX_8391, release: str | None = None) -> None:
    check_applies(root, ds_version, number, release)
    result = _patch([], root, number, release)
    if result.returncode != 0:
        raise PatchError(f"patch failed on DeepSpeed {ds_version}: {result.stdout.strip()} {result.stderr.strip()}")


def is_applied(root: Path, number: str) -> bool:
    """True when `number`'s patch is already in the tree under `root` (it reverses cleanly)."""
    return _patch(["--dry-run", "--reverse"], root, number).returncode == 0


def environment_patches(ds_version: str) -> list[Path]:
    """What the upstream tests stand on where DeepSpeed has no kernel (CPU): the pull requests outside the series,
    DeepSpeed's PyTorch fallbacks completed, in `ds_version`'s form. A test that runs the injected layers needs
    them on CPU, as it needs the kernels on a GPU."""
    return [patch for pr in OUTSIDE_SERIES for patch in pr_patches(pr, ds_version)]


def apply_environment(tree: Path, ds_version: str) -> None:
    """Applies environment_patches(ds_version) under `tree` (a dir holding `deepspeed/`); raises PatchError by name
    where one does not apply."""
    for patch in environment_patches(ds_version):
        done = run_patch([], tree, patch.read_text())
        if done.returncode != 0:
            raise PatchError(f"{patch.parent.name}/{patch.name} does not apply to DeepSpeed {ds_version}: "
                             f"{(done.stdout + done.stderr).strip()[-300:]}")  # fmt: skip


def label_of(patches: tuple[str, ...]) -> str:
    """The patches as runs of consecutive numbers (first-last, joined by "+"): the whole series spelled one by one
    outgrew a file name (255 bytes) at 37 patches."""
    runs: list[list[str]] = []
    for number in patches:
        if runs and number.isdigit() and runs[-1][-1].isdigit() and int(number) == int(runs[-1][-1]) + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return "+".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def prepare_patched_copy(
    root: Path | None = None, patches: tuple[str, ...] = (FIX_8391,), environment: bool = False
) -> Path:
    """A copy of the installed DeepSpeed with `patches` applied, for PYTHONPATH; returns the directory
    holding it. Kept at a stable path keyed by DeepSpeed version, installed source and patch set, so it
    is made once. `environment`: first the pull requests outside the series (environment_patches), for the
    upstream tests that run the injected layers on CPU."""
    package_dir, ds_version = installed_deepspeed()
    around = environment_patches(ds_version) if environment else []
    digest = hashlib.sha256()
    for rel in KEY_FILES:  # what the patches touch, and the gather the matrix's harness fix changes
        path = package_dir.parent / rel
        digest.update(path.read_bytes() if path.exists() else b"-")
    for patch in around:
        digest.update(patch.read_bytes())
    for number in patches:
        digest.update(patch_file(number).read_bytes())
    label = "after" if patches == (FIX_8391,) else label_of(patches)
    label = f"{label or 'released'}+{OUTSIDE_SERIES_LABEL}" if environment else label
    dest = (root or cache_root()) / f"deepspeed-{ds_version}-{label}-{digest.hexdigest()[:12]}"
    copy = dest / "deepspeed"
    if copy.exists() and all(is_applied(dest, n) for n in patches):
        if all(run_patch(["--dry-run", "--reverse"], dest, p.read_text()).returncode == 0 for p in around):
            return dest
    # Each patch is checked on the copy as the patches before it left it (apply_to): a patch may need an earlier one's
    # lines as its context (`gptneox-activation` sits beside `rotary-base`'s), so none is checked on the pristine tree
    # alone. Staged beside its destination, never in the system temp dir: os.replace cannot cross filesystems.
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=dest.parent))
    try:
        shutil.copytree(package_dir, staging / "deepspeed", ignore=shutil.ignore_patterns("__pycache__"))
        if environment:
            apply_environment(staging, ds_version)
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
