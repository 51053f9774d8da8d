"""Starts the ranks of one variant (torchrun, or srun under Slurm) and bounds them: a rank that fails or hangs
ends the whole run within `timeout_s`, and its error is surfaced, not buried in the log."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import gpu_sharing, progress, results
from ..options import ds_accelerator
from ..paths import REPO_ROOT, cache_root


class LaunchError(RuntimeError):
    """A rank failed or hung; the message is the one line to show, the log holds the rest."""


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM reached the host process; every rank has been stopped when it propagates.
    A BaseException, like KeyboardInterrupt, so no `except Exception` on the way swallows it."""


def interrupt_on_sigterm() -> None:
    """Ranks run in a session of their own (a hung rank can be killed as a group), so a terminal's
    Ctrl-C or a scheduler's SIGTERM reaches only this process: turn SIGTERM into `Interrupted`."""

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)


def wait(proc: subprocess.Popen, timeout_s: float, communicate: bool = False, relay=None):
    """Waits for the rank group; on Ctrl-C / SIGTERM stops every rank, then re-raises as Interrupted.
    `relay` is called every half second while waiting (progress lines from the log)."""
    try:
        if communicate:
            return proc.communicate(timeout=timeout_s)[0]
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return proc.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if relay is not None:
                    relay()
                if time.monotonic() >= deadline:
                    raise
    except KeyboardInterrupt:
        kill_group(proc)
        raise Interrupted("SIGINT") from None
    except Interrupted:
        kill_group(proc)
        raise


@dataclass
class LaunchSpec:
    variant: str
    model: str
    dtype: str
    ranks: int
    backend: str  # "cpu", "rocm" or "cuda"
    new_tokens: int
    cycles: int
    pin: bool
    seed: int
    prompt: str | None
    timeout_s: float
    soak: bool = False
    launcher: str = "torchrun"

    @property
    def dist_backend(self) -> str:
        return gpu_sharing.dist_backend(self.backend)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_cwd() -> Path:
    """Where ranks start. `python -m` puts its working directory on sys.path ahead of PYTHONPATH, so ranks started in
    site-packages (REPO_ROOT of a non-editable install) import the installed DeepSpeed, not the patched copy PYTHONPATH
    names first: there they start in a directory of their own."""
    if not (REPO_ROOT / "deepspeed").exists():
        return REPO_ROOT
    neutral = cache_root() / "rank-cwd"
    neutral.mkdir(parents=True, exist_ok=True)
    return neutral


def rank_env(backend: str, extra_pythonpath: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(extra_pythonpath)] if extra_pythonpath else []
    paths += [str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("OMP_NUM_THREADS", "1")
    # torch's CPU allocator asks for transparent huge pages for blocks >= 2 MB. Measured on the 410M pair
    # (2 cores, THP "madvise"): HE generate 10 s instead of 14-15 s, peak RSS 3.3 GB instead of 4.0 GB per
    # rank (fewer page faults on ZeRO-3's gather buffers). No effect where THP is "never".
    env.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    env["PYTHONUNBUFFERED"] = "1"
    # DeepSpeed's accelerator by name, never auto-detected: a DS_ACCELERATOR=cpu left in the caller's
    # environment must not turn a GPU run into a CPU one.
    env["DS_ACCELERATOR"] = ds_accelerator(backend)
    if extra_pythonpath is not None:
        # JIT-built ops are keyed by include path: keep the patched copy's builds beside it.
        env["TORCH_EXTENSIONS_DIR"] = str(extra_pythonpath / "torch_extensions")
    elif "TORCH_EXTENSIONS_DIR" not in env:
        env["TORCH_EXTENSIONS_DIR"] = str(_extensions_dir())
    return env


def _extensions_dir() -> Path:
    """torch's default JIT cache is keyed by op name only, so one DeepSpeed release would load another's
    stale `deepspeed_shm_comm` (seen: `no attribute 'vector_kernel_level'`); key it by the installation."""
    import hashlib

    from ..fixstatus import installed_deepspeed

    package_dir, version = installed_deepspeed()
    key = hashlib.sha256(str(package_dir.resolve()).encode()).hexdigest()[:10]
    return cache_root() / "torch_extensions" / f"deepspeed-{version}-{key}"


def torchrun(module: str, ranks: int, port: int, *args: str, python: str = sys.executable) -> list[str]:
    """`python -m torch.distributed.run` on this host for `python -m MODULE ARGS` on each rank (`python`: another
    environment's interpreter, such as a DeepSpeed release's virtualenv)."""
    return [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(ranks),
            "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", module, *args]  # fmt: skip


def srun(module: str, ranks: int, job_name: str, *args: str) -> list[str]:
    """Slurm's `srun`, one task per rank on one node (repro.rank.slurm_env maps its variables). Slurm then
    owns every rank: its time limit and `scancel` reach each one, and one rank's failure ends the step."""
    return ["srun", "--nodes=1", f"--ntasks={ranks}", "--kill-on-bad-exit=1", f"--job-name={job_name}",
            sys.executable, "-m", module, *args]  # fmt: skip


def command(spec: LaunchSpec, spec_file: Path, port: int) -> list[str]:
    if spec.launcher == "slurm":
        return srun("repro.rank", spec.ranks, f"repro-{spec.variant}", str(spec_file))
    return torchrun("repro.rank", spec.ranks, port, str(spec_file))


def launcher_env(spec: LaunchSpec, port: int) -> dict[str, str]:
    """torchrun sets the rendezvous itself; srun's tasks get it from here (the one node is the host)."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)} if spec.launcher == "slurm" else {}


# What a rank reports when a peer died first: a consequence, not the cause.
_COLLATERAL = re.compile(r"gloo|nccl|connection (closed|reset)|broken pipe", re.IGNORECASE)


def _rank_error(lines: list[str]) -> str | None:
    """Each rank's final exception (the last of a chained traceback); of those, the first rank's that is
    not a peer's communication error: the rank that failed, not the one that lost its partner."""
    final: dict[str, str] = {}
    for line in lines:
        found = re.match(r"^\[rank(\d+)\]: \w+(Error|Exception)\b.*", line.strip())
        if found:
            final[found.group(1)] = found.group(0)
    causes = [err for err in final.values() if not _COLLATERAL.search(err)]
    return (causes or list(final.values()) or [None])[0]


def first_error(log: str) -> str:
    """The most telling line of a failed run's log: a rank's exception, else the launcher's summary."""
    lines = log.splitlines()
    error = _rank_error(lines)
    if error is not None:
        return error
    patterns = (
        r"^\w+(Error|Exception): .*",
        r".*exitcode\s*:.*",  # torchrun's summary
        r"^srun: error: .*",  # srun's
    )
    for pattern in patterns:
        found = [ln for ln in lines if re.match(pattern, ln.strip())]
        if found:
            return found[-1].strip()
    return lines[-1].strip() if lines else "no output"


class _ProgressRelay:
    """Forwards the ranks' `[progress]` lines from the variant's log as they appear."""

    def __init__(self, log_file: Path, prefix: str, sink) -> None:
        self.log_file, self.prefix, self.sink, self.offset = log_file, prefix, sink, 0

    def __call__(self) -> None:
        if self.sink is None:
            return
        with open(self.log_file, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk.rfind(b"\n") + 1
        self.offset += complete
        for line in chunk[:complete].decode(errors="replace").splitlines():
            message = progress.parse(line)
            if message is not None:
                self.sink(f"{self.prefix} {message}")


def run_variant(spec: LaunchSpec, out_dir: Path, patched_root: Path | None, progress=None) -> dict:
    """Runs one variant; returns its result JSON (rank 0's), or raises LaunchError. `progress` receives
    one line per phase of the ranks while they run."""
    out_json = out_dir / f"{spec.variant}.json"
    spec_file = out_dir / f".{spec.variant}.spec.json"
    log_file = out_dir / f"{spec.variant}.log"
    results.write(
        spec_file,
        {**spec.__dict__, "dist_backend": spec.dist_backend, "out": str(out_json)},
        indent=None,
        sort_keys=False,
    )
    port = free_port()
    cmd = command(spec, spec_file, port)
    with open(log_file, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**rank_env(spec.backend, patched_root), **launcher_env(spec, port)},
            cwd=rank_cwd(),
            start_new_session=True,
        )
        relay = _ProgressRelay(log_file, f"[{spec.variant}]", progress)
        try:
            code = wait(proc, spec.timeout_s, relay=relay)
            relay()
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise LaunchError(
                f"{spec.variant}: a rank did not finish within {spec.timeout_s:.0f} s (hung?); "
                f"all ranks were stopped; see {log_file}"
            ) from None
    spec_file.unlink(missing_ok=True)
    if code != 0 or not out_json.exists():
        raise LaunchError(
            f"{spec.variant}: ranks exited with status {code}: {first_error(log_file.read_text())} "
            f"(full log: {log_file})"
        )
    result = results.load(out_json)
    result["peak_rss_mb_per_rank"] = _collect_rss(out_json, spec.ranks)
    results.write(out_json, result)
    return result


def run_module(
    module: str,
    args: list[str],
    deepspeed_root: Path | None,
    ranks: int,
    timeout_s: float,
    backend: str = "cpu",
    python: str = sys.executable,
    env: dict[str, str] | None = None,
) -> tuple[int, str]:
    """`python -m MODULE ARGS` on `ranks` ranks under torchrun (on the CPU, or one GPU each); returns the exit
    status and the output. A timeout stops every rank and raises LaunchError. `env` adds to the ranks' variables."""
    cmd = torchrun(module, ranks, free_port(), *args, python=python)
    try:
        return run_bounded(cmd, {**rank_env(backend, deepspeed_root), **(env or {})}, rank_cwd(), timeout_s)
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{module}: ranks did not finish within {timeout_s:.0f} s") from None


def run_bounded(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[int, str]:
    """`argv`'s exit status and output (stderr in it). It runs in a session of its own, so a timeout
    (TimeoutExpired, carrying the output so far) or Ctrl-C / SIGTERM (Interrupted) stops it and every process it
    started, not it alone."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                            start_new_session=True)  # fmt: skip
    try:
        output = wait(proc, timeout_s, communicate=True)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise subprocess.TimeoutExpired(argv, timeout_s, output=proc.communicate()[0] or "") from None
    return proc.returncode, output


def run_probe(
    module: str,
    out_json: Path,
    deepspeed_root: Path | None,
    ranks: int = 2,
    timeout_s: float = 300,
    backend: str = "cpu",
) -> dict:
    """Runs a small rank script (`python -m MODULE OUT.json`) under torchrun; returns its JSON."""
    returncode, output = run_module(module, [str(out_json)], deepspeed_root, ranks, timeout_s, backend)
    result = probe_json(module, out_json, returncode, output)
    if os.environ.get("REPRO_DEBUG"):  # the ranks' output stays beside the result, as a pool's does
        out_json.with_suffix(".log").write_text(output)
    return result


def probe_json(module: str, out_json: Path, returncode: int, output: str) -> dict:
    """A probe's JSON once its ranks ended (under torchrun or a pool); when one failed or none wrote it,
    LaunchError with the first error, the ranks' output kept beside it as OUT.log."""
    if returncode != 0 or not out_json.exists():
        log = out_json.with_suffix(".log")
        log.write_text(output)
        raise LaunchError(f"{module}: ranks exited with status {returncode}: {first_error(output)} (full log: {log})")
    return results.load(out_json)


def _collect_rss(out_json: Path, ranks: int) -> list[float]:
    values = []
    for rank in range(ranks):
        f = out_json.with_suffix(f".rank{rank}.rss")
        if f.exists():
            values.append(float(f.read_text()))
            f.unlink()
    return values


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, read from /proc. torchrun starts each rank in a session of its own
    (torch >= 2.x: `start_new_session=True`), so a signal to the launcher's group misses them."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_group(proc: subprocess.Popen, grace_s: float = 4.0) -> None:
    """SIGTERM to the launcher's group and every rank, SIGKILL after `grace_s` to every process of the tree
    (ranks included, found before the launcher dies and they are re-parented): done within ~2x grace."""
    tree = set(_descendants(proc.pid))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        tree |= set(_descendants(proc.pid))
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        _signal_all(sorted(tree), sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            continue
        _signal_all(sorted(tree), signal.SIGKILL)  # launcher gone: make sure no rank outlived it
        return
