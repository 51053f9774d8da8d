"""Every Transformers the package admits runs the main job: pyproject's range is read, each end is the newest patch
release at that end with an overlay pinned in constraints/, and `python -m repro run --model tiny` reaches its verdict
there (HELD: the #8391 pair) with that Transformers in both variants. A range moved without its ends pinned fails."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from repro.host.envs import transformers_env

ROOT = Path(__file__).resolve().parents[2]


def admitted() -> tuple[str, str]:
    """pyproject's `transformers>=LOW,<HIGH` (read as text: tomllib is Python 3.11's, the package admits 3.10)."""
    spec = re.search(r'^\s*"(transformers[^"]*)",', (ROOT / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    found = re.fullmatch(r"transformers>=([\d.]+),<([\d.]+)", spec)
    assert found, f"pyproject's Transformers range is not >=LOW,<HIGH: {spec}"
    return found.group(1), found.group(2)


def ends() -> tuple[str, str]:
    """The newest pinned patch of LOW's minor, and the newest pinned release below HIGH."""
    low, high = admitted()
    order = transformers_env.version_order
    pinned = (transformers_env.pinned(), *transformers_env.others())
    lows = [v for v in pinned if order(v)[:2] == order(low)[:2]]
    highs = [v for v in pinned if order(v) < order(high)]
    assert lows, f"no constraints/transformers-{low}.x.txt: pin the range's lower end (python -m repro.host.envs.pins)"
    return max(lows, key=order), max(highs, key=order)


def test_the_ends_are_the_pinned_releases_at_the_range_s_edges():
    assert admitted() == ("4.40", "5.2")
    assert ends() == ("4.40.2", "5.1.0")


@pytest.mark.distributed
@pytest.mark.parametrize("end", [0, 1], ids=["lowest", "highest"])
def test_the_main_job_runs_to_its_verdict_at_each_end_of_the_admitted_range(end, tmp_path):
    version = ends()[end]
    overlay = transformers_env.overlay(version)
    env = dict(os.environ)
    if overlay is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(overlay), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "repro", "run", "--model", "tiny", "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "HELD" in done.stdout + done.stderr
    for variant in ("before", "after"):
        assert json.loads((out / f"{variant}.json").read_text())["versions"]["transformers"] == version
