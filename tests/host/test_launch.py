"""A rank that fails or hangs ends the run, bounded, with its error shown (2 ranks, tiny model)."""

import time
from pathlib import Path

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


def test_slurm_command_is_one_srun_task_per_rank_on_one_node(tmp_path):
    spec = _spec(10)
    spec.launcher = "slurm"
    cmd = launch.command(spec, tmp_path / "s.json", 29500)
    assert cmd[:5] == ["srun", "--nodes=1", "--ntasks=2", "--kill-on-bad-exit=1", "--job-name=repro-before"]
    assert cmd[-3:] == ["-m", "repro.rank", str(tmp_path / "s.json")] and "torch.distributed.run" not in cmd
    assert launch.launcher_env(spec, 29500) == {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    spec.launcher = "torchrun"
    assert launch.launcher_env(spec, 29500) == {}  # torchrun sets its own rendezvous


def test_srun_failure_line_is_the_one_shown():
    log = "Traceback (most recent call last):\n  ...\nsrun: error: vm: task 1: Exited with exit code 1\n"
    assert launch.first_error(log) == "srun: error: vm: task 1: Exited with exit code 1"


def test_ranks_ask_for_huge_pages_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    assert launch.rank_env("cpu", None)["THP_MEM_ALLOC_ENABLE"] == "1"
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    assert launch.rank_env("cpu", None)["THP_MEM_ALLOC_ENABLE"] == "0"


def test_ranks_get_deepspeeds_accelerator_by_name_whatever_the_callers_environment(monkeypatch):
    """A DS_ACCELERATOR=cpu left in the shell must not turn a GPU run into a CPU one (nor the reverse)."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    assert launch.rank_env("cuda", None)["DS_ACCELERATOR"] == launch.rank_env("rocm", None)["DS_ACCELERATOR"] == "cuda"
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    assert launch.rank_env("cpu", None)["DS_ACCELERATOR"] == "cpu"


def test_the_failing_rank_is_named_not_the_peer_that_lost_it():
    log = "\n".join(
        [
            "[rank1]: Traceback (most recent call last):",
            "[rank1]: OSError: no such file",
            "[rank1]: RuntimeError: injected failure on rank 1",
            "[rank0]: Traceback (most recent call last):",
            "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer",
        ]
    )
    assert launch.first_error(log) == "[rank1]: RuntimeError: injected failure on rank 1"
    only_collateral = "[rank0]: RuntimeError: gloo: Connection reset by peer"
    assert launch.first_error(only_collateral) == only_collateral


def test_sigkill_reaches_ranks_in_sessions_of_their_own(tmp_path):
    """torch >= 2.x starts each rank with start_new_session=True: a launcher that ignores SIGTERM must not
    leave its ranks behind when the group is killed."""
    import os
    import subprocess
    import sys

    pid_file = tmp_path / "rank.pid"
    rank = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    launcher = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"p = subprocess.Popen([sys.executable, '-c', {rank!r}], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", launcher], start_new_session=True)
    deadline = time.time() + 20
    while not pid_file.exists() or not pid_file.read_text():
        assert time.time() < deadline, "the fake launcher did not start its rank"
        time.sleep(0.05)
    rank_pid = int(pid_file.read_text())
    started = time.time()
    launch.kill_group(proc, grace_s=1.0)
    assert proc.poll() is not None and time.time() - started < 5
    for _ in range(50):  # the rank is killed, then reaped by init: gone from /proc or a zombie
        stat = Path(f"/proc/{rank_pid}/stat")
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        os.kill(rank_pid, 9)
        raise AssertionError("the rank outlived the launcher's SIGKILL")


def test_ranks_never_start_beside_an_installed_deepspeed(tmp_path, monkeypatch):
    """`python -m` puts the working directory ahead of PYTHONPATH: in site-packages (a non-editable install's
    REPO_ROOT) a rank would import the installed DeepSpeed, not the patched copy (measured: `after` unfixed)."""
    from repro.host import launch

    assert launch.rank_cwd() == launch.REPO_ROOT  # a checkout holds no deepspeed package
    site = tmp_path / "site-packages"
    (site / "deepspeed").mkdir(parents=True)
    monkeypatch.setattr(launch, "REPO_ROOT", site)
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    cwd = launch.rank_cwd()
    assert cwd != site and cwd.is_dir() and not (cwd / "deepspeed").exists()
