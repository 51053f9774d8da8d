"""Ctrl-C and SIGTERM stop every rank within 10 s, leave no process behind, keep a partial summary
marked interrupted, and end with one line and exit status 130."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed


def _default_sigint() -> None:
    """A suite started in the background (`cmd &` in a script) inherits SIGINT ignored, and Python keeps
    an ignored SIGINT ignored (as a background job should): give the run under test what a terminal's
    foreground job has."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_every_rank_and_keeps_a_partial_summary(tmp_path, sig, processes_mentioning):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "repro", "run", "--model", "tiny", "--out", str(out), "--cycles", "50"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DS_ACCELERATOR": "cpu", "REPRO_FAULT": "hang:1"},  # rank 1 stays busy
        preexec_fn=_default_sigint,
    )
    deadline = time.time() + 120
    while len(processes_mentioning(f"{out}/.before.spec.json")) < 3 and time.time() < deadline:
        time.sleep(0.5)  # torchrun and both ranks are up
    assert proc.poll() is None, proc.stderr.read()
    sent = time.time()
    proc.send_signal(sig)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # say where it stuck
        left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in processes_mentioning(str(out))}
        proc.kill()
        pytest.fail(f"no exit 30 s after {sig.name}; processes left: {left}; stderr: {proc.stderr.read()[-2000:]}")
    elapsed = time.time() - sent
    err = proc.stderr.read()
    assert code == 130, err
    assert elapsed < 10, elapsed
    assert processes_mentioning(str(out)) == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["expectation_held"] is False
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted (SIG") and "every rank was stopped" in last
    assert "Traceback" not in err
