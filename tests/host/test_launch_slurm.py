"""`--launcher slurm` for real: a single-node Slurm cluster (slurmctld + slurmd from Debian's slurm-wlm,
auth/none, state in tmp) started and stopped here, then the tiny pair under `srun` with 2 tasks, and
SIGTERM during a run stopping every rank. Skipped where Slurm is not installed, unless
REPRO_REQUIRE_SLURM=1 (CI sets it, so there it must run)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

DAEMONS = ("slurmctld", "slurmd", "srun", "sinfo", "scontrol")


def _missing() -> list[str]:
    return [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(root: Path, node: str) -> str:
    return f"""ClusterName=repro-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName={node} NodeAddr=127.0.0.1 CPUs={max(2, os.cpu_count() or 1)} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """Yields the environment (SLURM_CONF) of a one-node cluster on this machine; stops it afterwards."""
    missing = _missing()
    if missing:
        if os.environ.get("REPRO_REQUIRE_SLURM") == "1":
            pytest.fail(f"REPRO_REQUIRE_SLURM=1 but {', '.join(missing)} not installed (apt-get install slurm-wlm)")
        pytest.skip(f"Slurm not installed ({', '.join(missing)}): apt-get install slurm-wlm")
    if os.geteuid() != 0:
        pytest.skip("the test cluster runs slurmd as root (SlurmdUser=root)")
    root = tmp_path_factory.mktemp("slurm")
    (root / "state").mkdir()
    (root / "spool").mkdir()
    node = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(_config(root, node))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = [
        subprocess.Popen([d, "-D", "-f", str(conf), *extra], env=env, stdout=log, stderr=subprocess.STDOUT)
        for d, extra, log in (
            ("slurmctld", ["-i"], open(root / "slurmctld.out", "w")),
            ("slurmd", ["-N", node], open(root / "slurmd.out", "w")),
        )
    ]
    try:
        deadline = time.time() + 60
        state = ""
        while time.time() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
            if state.strip() in ("idle", "mixed"):
                break
            time.sleep(1)
        else:
            logs = "\n".join((root / f).read_text()[-2000:] for f in ("slurmctld.out", "slurmd.out"))
            pytest.fail(f"the test cluster did not come up (sinfo: {state.strip()!r}):\n{logs}")
        yield {"env": env, "root": root}
    finally:
        for d in daemons:
            d.terminate()
        for d in daemons:
            try:
                d.wait(timeout=15)
            except subprocess.TimeoutExpired:
                d.kill()


def _slurm_jobs(cluster) -> list[str]:
    """The controller's record of recent jobs (completed ones stay for MinJobAge, 300 s), one line each."""
    done = subprocess.run(["scontrol", "-o", "show", "job"], env=cluster["env"], capture_output=True, text=True)
    return done.stdout.splitlines()


def test_tiny_pair_runs_under_srun_with_two_tasks(slurm_cluster, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "repro", "run", "--model", "tiny", "--launcher", "slurm", "--cycles", "2",
         "--out", str(out)],
        env={**slurm_cluster["env"], "DS_ACCELERATOR": "cpu"},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["bug_reproduced_before"] and summary["fixed_after"], summary["reason"]
    assert summary["options"]["launcher"] == "slurm"
    for variant in ("before", "after"):
        first = (out / f"{variant}.log").read_text().splitlines()[0]
        assert first.startswith("$ srun --nodes=1 --ntasks=2 "), first
        result = json.loads((out / f"{variant}.json").read_text())
        assert result["world_size"] == 2 and result["environment"]["launcher"] == "srun"
        # Slurm itself ran it: the controller knows the job by the name our launcher gave it, with 2 tasks.
        job = [j for j in _slurm_jobs(slurm_cluster) if f"JobName=repro-{variant} " in j]
        assert len(job) == 1 and "NumTasks=2 " in job[0] and "JobState=COMPLETED" in job[0], job
    assert "[before] " in done.stderr and "cycles 2/2" in done.stderr  # progress relayed from the tasks


def test_sigterm_stops_every_srun_task(slurm_cluster, tmp_path, processes_mentioning):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "repro", "run", "--model", "tiny", "--launcher", "slurm", "--cycles", "50",
         "--variant", "before", "--out", str(out)],
        env={**slurm_cluster["env"], "DS_ACCELERATOR": "cpu", "REPRO_FAULT": "hang:1"},
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    spec = f"{out}/.before.spec.json"
    deadline = time.time() + 120
    while len(processes_mentioning(spec)) < 3 and time.time() < deadline:
        time.sleep(0.5)  # srun and both of its tasks are up
    assert proc.poll() is None, proc.stderr.read()
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=30)
    elapsed = time.time() - sent
    err = proc.stderr.read()
    assert code == 130, err
    assert elapsed < 10, elapsed
    time.sleep(1)
    assert processes_mentioning(spec) == []
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True
    assert err.strip().splitlines()[-1].startswith("interrupted (SIGTERM)")


def test_a_job_array_runs_conformance_shards_that_merge_into_one_run(slurm_cluster, tmp_path):
    """scripts/slurm/conformance-shards.sbatch as an array of 2 (GPT-Neo's quick cells), then --merge."""
    from repro.host.conformance import plan
    from repro.paths import REPO_ROOT

    quick = plan.plan_of(True, ("gpt-neo",))
    sizes = [len(plan.shard_of(quick, (k, 2))) for k in (1, 2)]
    assert len(quick) >= 4 and min(sizes) >= 2  # both tasks run cells

    out = tmp_path / "conformance"
    done = subprocess.run(
        ["sbatch", "--wait", "--array=1-2", f"--output={tmp_path}/task-%a.out",
         str(REPO_ROOT / "scripts" / "slurm" / "conformance-shards.sbatch"), str(out), "--quick", "--arch", "gpt-neo"],
        env=slurm_cluster["env"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    logs = "\n".join(f.read_text()[-1500:] for f in sorted(tmp_path.glob("task-*.out")))
    assert done.returncode == 0, done.stderr + logs
    shards = sorted(out.glob("shard-*-of-2"))
    assert [s.name for s in shards] == ["shard-1-of-2", "shard-2-of-2"], logs
    assert all(f"[conformance] {n}/{n}" in logs for n in sizes)  # each shard ran its every-other cell
    merged = subprocess.run(
        [sys.executable, "-m", "repro", "conformance", "--merge", *map(str, shards), "--out", str(out / "merged")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert merged.returncode == 0, merged.stdout + merged.stderr
    cells = json.loads((out / "merged" / "conformance.json").read_text())["cells"]
    assert [plan.key(c) for c in cells] == [plan.key(c) for c in quick]
    pinned = [c for c in cells if c["transformers"] == plan.PINNED]
    assert len(pinned) == len(quick) - 1 and all(c["diagnosis"] == ["correct"] for c in pinned), [
        c["diagnosis"] for c in cells
    ]
