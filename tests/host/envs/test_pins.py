"""A release's overlay pins come from pip's own resolution, written once: the report's whole install list, the
release first; a resolution that does not install the release, the pinned release, or an existing file is refused."""

import json
import subprocess
from datetime import date

import pytest

from repro.host.envs import pins, transformers_env


def _pip(install: list[tuple[str, str]], returncode: int = 0):
    def fake(cmd, **kwargs):
        assert "--dry-run" in cmd and "--report" in cmd and cmd[-1].startswith("transformers==")
        report = {"install": [{"metadata": {"name": n, "version": v}} for n, v in install]}
        return subprocess.CompletedProcess(cmd, returncode, json.dumps(report), "ERROR: no matching distribution")

    return fake


def test_the_pins_are_pips_resolution_release_first(tmp_path, monkeypatch):
    monkeypatch.setattr(pins, "constraints_file", lambda v: tmp_path / f"transformers-{v}.txt")
    monkeypatch.setattr(pins.subprocess, "run", _pip([("tokenizers", "0.23.3"), ("transformers", "5.23.0")]))
    path = pins.write("5.23.0", day=date(2026, 12, 7))
    lines = path.read_text().splitlines()
    assert lines[0].startswith(
        "# Transformers 5.23.0: written by `python -m repro.host.envs.pins 5.23.0` on 2026-12-07"
    )
    assert [line for line in lines if not line.startswith("#")] == ["transformers==5.23.0", "tokenizers==0.23.3"]
    with pytest.raises(transformers_env.OverlayError, match="exists; pass --replace"):
        pins.write("5.23.0")
    assert pins.write("5.23.0", replace=True) == path


def test_a_resolution_without_the_release_a_failing_pip_and_the_pinned_release_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(pins, "constraints_file", lambda v: tmp_path / f"transformers-{v}.txt")
    monkeypatch.setattr(pins.subprocess, "run", _pip([("tokenizers", "0.23.3")]))
    with pytest.raises(transformers_env.OverlayError, match="does not install it"):
        pins.write("5.23.0")
    monkeypatch.setattr(pins.subprocess, "run", _pip([], returncode=1))
    with pytest.raises(transformers_env.OverlayError, match="no matching distribution"):
        pins.write("5.23.0")
    with pytest.raises(transformers_env.OverlayError, match="pinned one"):
        pins.write(transformers_env.pinned())
    assert not list(tmp_path.iterdir())


def test_bad_arguments_exit_2_with_one_line(capsys):
    assert pins.main([]) == 2 and pins.main(["five"]) == 2
    assert capsys.readouterr().err.count("usage:") == 2
