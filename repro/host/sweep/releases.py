"""Which Transformers releases the sweep measures: the last patch of every minor from DeepSpeed-Chat's oldest
(4.31, its requirements' floor) to the newest on the package index, read from PyPI's JSON, pre-releases and yanked
files left out. Each needs its overlay pins (`constraints/transformers-<version>.txt`), written from pip's own
resolution (repro.host.envs.pins) where missing, so a new release is added by running the sweep, not by typing."""

from __future__ import annotations

import json
import re
import urllib.request

from ...options import UsageError
from ..envs import pins
from ..envs.transformers_env import constraints_file, pinned, version_order

INDEX = "https://pypi.org/pypi/transformers/json"
OLDEST_MINOR = (4, 31)  # DeepSpeed-Chat's requirements.txt: transformers>=4.31.0


def last_patches(releases: dict[str, list[dict]], oldest: tuple[int, int] = OLDEST_MINOR) -> list[str]:
    """The newest final release of each minor from `oldest` on, oldest first: PyPI's `releases` mapping (version ->
    its files), a version counted only where it has a file that is not yanked."""
    best: dict[tuple[int, ...], tuple[int, ...]] = {}
    for version, files in releases.items():
        if not re.fullmatch(r"\d+\.\d+\.\d+", version) or not any(not f.get("yanked") for f in files):
            continue
        parts = version_order(version)
        if parts[:2] >= oldest and parts > best.get(parts[:2], ()):
            best[parts[:2]] = parts
    return [".".join(map(str, best[minor])) for minor in sorted(best)]


def from_index(timeout_s: float = 30) -> list[str]:
    """The sweep's releases as the package index lists them today (UsageError where it cannot be read: name them)."""
    try:
        with urllib.request.urlopen(INDEX, timeout=timeout_s) as response:
            data = json.load(response)
    except (OSError, ValueError) as exc:
        why = f"cannot read Transformers' releases from {INDEX} ({exc})"
        raise UsageError(f"{why}; name them with --releases 4.31.0,4.32.1,... (each pinned in "
                         "constraints/transformers-<version>.txt)") from exc  # fmt: skip
    return last_patches(data["releases"])


def pin_missing(versions: list[str], log=print) -> list[str]:
    """Writes the overlay pins of every release that lacks them (pip's resolution); returns those written."""
    written = []
    for version in versions:
        if version != pinned() and not constraints_file(version).exists():
            log(f"[sweep] pinning Transformers {version}: {pins.write(version)}")
            written.append(version)
    return written
