"""Writes a Transformers release's overlay pins (`constraints/transformers-<version>.txt`) from pip's own resolution,
so that a release is added by a command, not typed: what `pip install --dry-run --report - --only-binary :all:
transformers==<version>` would install into the project's environment (the release and whatever it needs beyond
constraints/pinned.txt), each at the version pip chose. repro.host.envs.transformers_env installs the file as an
overlay with --no-deps, so the pins must be complete: pip's report lists the whole closure it would change.

`python -m repro.host.envs.pins 5.23.0 [5.22.0 ...]` (an existing file is kept unless --replace)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

from ...options import EXIT_OK, EXIT_USAGE
from .transformers_env import OverlayError, constraints_file, pinned, version_order

HEADER = """# Transformers {version}: written by `python -m repro.host.envs.pins {version}` on {day}. Installed with
# --no-deps as an overlay over the project's .venv (repro/host/envs/transformers_env.py): what {version} needs beyond
# constraints/pinned.txt, as `pip install --dry-run --report - --only-binary :all: transformers=={version}` resolved it
# in the .venv.
"""


def resolve(version: str) -> list[str]:
    """`name==version` for every distribution pip would install for this Transformers release, transformers first."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", "--only-binary", ":all:",
           f"transformers=={version}"]  # fmt: skip
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise OverlayError(f"pip could not resolve Transformers {version}: {last}")
    report = json.loads(done.stdout)
    found = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in report.get("install", [])]
    if not any(line.lower() == f"transformers=={version}" for line in found):
        raise OverlayError(f"pip's resolution of Transformers {version} does not install it: {', '.join(found)}")
    return sorted(found, key=lambda line: (not line.lower().startswith("transformers=="), line.lower()))


def write(version: str, replace: bool = False, day: date | None = None) -> Path:
    """The pins file of `version`, written from pip's resolution; an existing one only with `replace`."""
    path = constraints_file(version)
    if version == pinned():
        raise OverlayError(f"Transformers {version} is the pinned one (constraints/pinned.txt): no overlay needed")
    if path.exists() and not replace:
        raise OverlayError(f"{path.name} exists; pass --replace to write it again from pip's resolution")
    lines = resolve(version)
    path.write_text(HEADER.format(version=version, day=(day or date.today()).isoformat()) + "\n".join(lines) + "\n")
    return path


def main(argv: list[str]) -> int:
    replace = "--replace" in argv
    versions = sorted((a for a in argv if a != "--replace"), key=version_order)
    if not versions or any(not all(part.isdigit() for part in v.split(".")) for v in versions):
        print("usage: python -m repro.host.envs.pins VERSION [VERSION ...] [--replace] (e.g. 5.23.0)", file=sys.stderr)
        return EXIT_USAGE
    for version in versions:
        try:
            print(write(version, replace))
        except OverlayError as exc:
            print(f"pins: {exc}", file=sys.stderr)
            return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
