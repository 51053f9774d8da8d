"""A rank that fails or hangs ends the run, bounded, with its error shown (2 ranks, tiny model)."""

import time

import pytest

from repro.host import launch


def _spec(timeout_s: float) -> launch.LaunchSpec:
    return launch.LaunchSpec(
        variant="before",
        model="tiny",
        dtype="fp32",
        ranks=2,
        backend="cpu",
        new_tokens=1,
        cycles=1,
        pin=True,
        seed=1,
        prompt=None,
        timeout_s=timeout_s,
    )


def test_free_port_is_bindable():
    assert 1024 < launch.free_port() < 65536


@pytest.mark.distributed
def test_hung_rank_is_stopped_within_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_FAULT", "hang:1")
    started = time.time()
    with pytest.raises(launch.LaunchError, match=r"did not finish within 20 s"):
        launch.run_variant(_spec(20), tmp_path, None)
    assert time.time() - started < 20 + 25  # timeout plus the bounded SIGTERM/SIGKILL grace


@pytest.mark.distributed
def test_failing_rank_error_is_surfaced_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_FAULT", "fail:1")
    with pytest.raises(launch.LaunchError) as exc:
        launch.run_variant(_spec(120), tmp_path, None)
    message = str(exc.value)
    assert "injected failure on rank 1" in message and "\n" not in message
    assert (tmp_path / "before.log").exists()


def test_progress_lines_are_relayed_once_and_only_when_complete(tmp_path):
    log = tmp_path / "before.log"
    log.write_text("noise\n[progress] 12:00:00 imports done in 3.0 s\n[progress] 12:00:01 half")
    seen = []
    relay = launch._ProgressRelay(log, "[before]", seen.append)
    relay()
    with open(log, "a") as f:
        f.write(" a line\nother\n")
    relay()
    relay()
    assert seen == ["[before] 12:00:00 imports done in 3.0 s", "[before] 12:00:01 half a line"]
