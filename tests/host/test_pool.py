"""Warm pools: a cell runs in fresh children of a pre-imported parent; a crash, an abort, a hang or a killed
worker is that cell's LaunchError and the pool goes on; Ctrl-C leaves no process; and a cell measures the
same, bit for bit, alone or after another cell in the same pool."""

import json
import signal
import subprocess
import sys
import time

import pytest

from repro.host import pool
from repro.host.conformance import cells, plan
from repro.host.launch import LaunchError
from repro.paths import REPO_ROOT

pytestmark = pytest.mark.distributed
PROBE = "tests.host.pool_probe"


def _alive(pid: int) -> bool:
    """Running, not a zombie (a killed process whose parent died waits for init to reap it)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_faults_are_the_cells_own_and_the_pool_goes_on(tmp_path):
    p = pool.Pool(None, tmp_path / "pool")
    try:
        first = p.run_probe(PROBE, tmp_path / "ok-1.json", None, ranks=2)
        assert first["sum"] == 3.0
        parent = p.worker.proc.pid
        with pytest.raises(LaunchError, match="RuntimeError: injected failure on rank 1"):
            p.run_probe(PROBE, tmp_path / "crash-1.json", None, ranks=2)
        with pytest.raises(LaunchError, match="status -6"):  # SIGABRT
            p.run_probe(PROBE, tmp_path / "abort-1.json", None, ranks=1)
        t0 = time.monotonic()
        with pytest.raises(LaunchError, match="did not finish within 3 s"):
            p.run_probe(PROBE, tmp_path / "hang-1.json", None, ranks=2, timeout_s=3)
        assert time.monotonic() - t0 < 30
        assert p.worker.proc.pid == parent  # the same warm parent all along
        second = p.run_probe(PROBE, tmp_path / "ok-2.json", None, ranks=2)
        assert second["sum"] == 3.0 and second["pid"] != first["pid"]  # a fresh child per cell
    finally:
        p.close()


def test_a_worker_killed_mid_cell_is_replaced(tmp_path):
    p = pool.Pool(None, tmp_path / "pool")
    try:
        p.run_probe(PROBE, tmp_path / "ok-1.json", None, ranks=1)
        killed = p.worker.proc.pid
        with pytest.raises(LaunchError, match="exited"):
            p.run_probe(PROBE, tmp_path / "kill-1.json", None, ranks=2)
        after = p.run_probe(PROBE, tmp_path / "ok-2.json", None, ranks=2)
        assert after["sum"] == 3.0 and p.worker.proc.pid != killed and not _alive(killed)
    finally:
        p.close()


def test_ctrl_c_mid_cell_exits_130_and_leaves_no_process(tmp_path):
    script = (  # SIGINT's default handler, as a terminal gives it (a background job may inherit it ignored)
        "import signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from pathlib import Path\n"
        "from repro.host import pool\n"
        f"p = pool.Pool(None, Path({str(tmp_path / 'pool')!r}))\n"
        "try:\n"
        f"    p.run_probe({PROBE!r}, Path({str(tmp_path / 'hang-1.json')!r}), None, ranks=2, timeout_s=600)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted (SIGINT)'); sys.exit(130)\n"
    )
    host = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    logs = [tmp_path / "hang-1.rank0.log", tmp_path / "hang-1.rank1.log"]
    deadline = time.monotonic() + 120
    while not all(f.exists() for f in logs) and time.monotonic() < deadline:
        assert host.poll() is None, host.communicate()  # the host must still be running the cell
        time.sleep(0.2)
    worker_pids = [int(x) for x in subprocess.run(["pgrep", "-P", str(host.pid)], capture_output=True,
                                                  text=True).stdout.split()]  # fmt: skip
    children = [int(x) for w in worker_pids for x in subprocess.run(["pgrep", "-P", str(w)], capture_output=True,
                                                                    text=True).stdout.split()]  # fmt: skip
    assert worker_pids and len(children) == 2
    host.send_signal(signal.SIGINT)
    try:
        out, _ = host.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        host.kill()
        pytest.fail("the host did not stop within 60 s of SIGINT")
    assert host.returncode == 130 and out.strip() == "interrupted (SIGINT)"
    time.sleep(0.5)
    assert not [pid for pid in worker_pids + children if _alive(pid)]


def _measured(cell: dict) -> dict:
    return {k: v for k, v in cell.items() if k not in ("duration_s", "timings_s")}


def test_a_cell_measures_the_same_alone_and_after_another_cell_in_the_same_pool(tmp_path):
    b = plan.cell_axes("gpt-neo", "default", "released", 2, 1, "reference")
    a = plan.cell_axes("llama", "default", "released", 2, 1, "reference")  # crashes mid-generate (0008)
    with pool.Pools(tmp_path / "alone") as alone:
        only_b = cells.run_cell(tmp_path / "c1", None, b, probe=alone.run_probe)
    with pool.Pools(tmp_path / "shared") as shared:
        cells.run_cell(tmp_path / "c2", None, a, probe=shared.run_probe)
        after_a = cells.run_cell(tmp_path / "c3", None, b, probe=shared.run_probe)
    isolated = cells.run_cell(tmp_path / "c4", None, b)  # one torchrun: the yardstick
    assert "crash" not in only_b and only_b["per_step_logits_vs_native"]
    assert json.dumps(_measured(only_b), sort_keys=True) == json.dumps(_measured(after_a), sort_keys=True)
    assert json.dumps(_measured(only_b), sort_keys=True) == json.dumps(_measured(isolated), sort_keys=True)


def test_the_pools_refuse_a_gpu_cell(tmp_path):
    """A pool's children are forked after its imports, which CUDA and ROCm do not survive: GPU cells run isolated."""
    with pool.Pools(tmp_path) as pools:
        with pytest.raises(ValueError, match="CPU cells only, not cuda"):
            pools.run_probe(cells.PROBE, tmp_path / "x.json", None, ranks=2, backend="cuda")


def test_past_most_the_least_recently_used_pool_is_stopped_and_started_again_when_its_build_returns(
    tmp_path, monkeypatch
):
    closed = []

    class Stub:
        def __init__(self, root, work):
            self.root = root

        def run_module(self, module, args, root, ranks, timeout_s):
            return 0, str(root)

        def close(self):
            closed.append(self.root)

    monkeypatch.setattr(pool, "Pool", Stub)
    pools = pool.Pools(tmp_path, most=2)
    for root in ("series", "a", "series", "b", "series", "a"):
        assert pools.run_module("m", [], root, 2, 1) == (0, root)
    assert closed == ["a", "b"]  # "series", used every other run, stays warm
