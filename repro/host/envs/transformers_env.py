"""The Transformers versions a conformance cell can run on: the installed one (constraints/pinned.txt), and each
other version pinned in a `constraints/transformers-<version>.txt` beside it, installed once as an overlay
directory (`pip install --no-deps --target`) that goes first on the ranks' PYTHONPATH. A cell's DeepSpeed
build and its Transformers overlay are joined in one directory of links, so the launcher and the pools keep
taking one path per cell."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ...findings import policies
from ...paths import REPO_ROOT, cache_root


class OverlayError(RuntimeError):
    """A Transformers version could not be installed: every cell on it records why."""


def pinned() -> str:
    """The Transformers the project's environment pins (constraints/pinned.txt): the one cells run on by default.
    Installed as a package, away from the source tree that holds constraints/pinned.txt, the environment is the pin
    (its installed Transformers), and without one the Transformers the package's own findings were read with (the
    policy snapshot records it)."""
    constraints = REPO_ROOT / "constraints/pinned.txt"
    if not constraints.is_file():
        try:
            return metadata.version("transformers")
        except metadata.PackageNotFoundError:
            return policies.snapshot()["transformers"]
    for line in constraints.read_text().splitlines():
        if line.startswith("transformers=="):
            return line.split("==", 1)[1].strip()
    raise OverlayError("constraints/pinned.txt pins no transformers version")


def constraints_file(version: str) -> Path:
    return REPO_ROOT / f"constraints/transformers-{version}.txt"


def others() -> tuple[str, ...]:
    """The versions pinned beside constraints/pinned.txt, oldest first."""
    found = [p.name.removeprefix("transformers-").removesuffix(".txt")
             for p in REPO_ROOT.glob("constraints/transformers-*.txt")]  # fmt: skip
    return tuple(sorted(found, key=version_order))


def newest() -> str:
    """The newest Transformers the suite runs (pinned, or in constraints/): where the committed cells end."""
    return max((pinned(), *others()), key=version_order)


def oldest() -> str:
    """The oldest Transformers the suite runs: where the committed cells begin."""
    return min((pinned(), *others()), key=version_order)


def version_order(version: str) -> tuple[int, ...]:
    """A dotted release number's sort key (Transformers' or DeepSpeed's): 4.9.0 before 4.43.4."""
    return tuple(int(x) for x in version.split(".") if x.isdigit())


def overlay(version: str, base: Path | None = None) -> Path | None:
    """The directory holding `version` for PYTHONPATH (None: the pinned one, installed in the environment);
    installed on first use, keyed by its constraints file, so an edited pin makes a new overlay. OverlayError
    names what failed."""
    if version == pinned():
        return None
    pins = constraints_file(version)
    if not pins.is_file():
        raise OverlayError(
            f"Transformers {version} has no {pins.relative_to(REPO_ROOT)}; pinned: {', '.join(others()) or 'none'}"
        )
    digest = hashlib.sha256(pins.read_bytes()).hexdigest()[:12]
    dest = (base or cache_root()) / "transformers" / f"transformers-{version}-{digest}"
    if (dest / ".complete").exists():
        return dest
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary", ":all:",
           "--target", str(dest), "--upgrade", "-r", str(pins)]  # fmt: skip
    done = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise OverlayError(f"pip could not install Transformers {version} from {pins.name}: {last}")
    (dest / ".complete").write_text(version)
    return dest


def joined(root: Path | None, overlay_dir: Path | None, base: Path | None = None) -> Path | None:
    """One directory for PYTHONPATH holding the DeepSpeed build (`root`, a patched copy; None: the installed
    one) and the Transformers overlay (None: the installed one), as links; the one that is set when only one
    is; made once per pair."""
    if overlay_dir is None or root is None:
        return overlay_dir or root
    key = hashlib.sha256(f"{root.resolve()}\n{overlay_dir.resolve()}".encode()).hexdigest()[:12]
    dest = (base or cache_root()) / "joined" / f"{root.name}+{overlay_dir.name}-{key}"
    dest.mkdir(parents=True, exist_ok=True)
    for source in (root, overlay_dir):
        for entry in source.iterdir():
            link = dest / entry.name
            if entry.name.startswith(".") or entry.name == "torch_extensions" or link.exists():
                continue
            link.symlink_to(entry.resolve())
    return dest
