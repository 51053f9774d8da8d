"""Warm pools for the conformance suite and the issue scripts' runs: one per DeepSpeed build, a
`repro.rank.pool_worker` that has imported once and forks a clean child per rank of each cell, at the cell's
world size. (One pool per build rather than per build and world size: the imports are the cost, and a world
size changes nothing in them.)

`Pool.run_probe` has `launch.run_probe`'s signature and contract (the probe's JSON, or LaunchError with the
first error and the log), so a suite picks pooled or isolated (`--isolated`: one torchrun per cell) without
knowing which; `run_module` has `launch.run_module`'s (an issue script's exit status and output). A cell that
crashes or aborts ends only its child; one that outlives its timeout has its ranks killed; a worker that died
is replaced before the next cell. Ctrl-C / SIGTERM (Interrupted) kill every child and worker.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from .launch import Interrupted, LaunchError, free_port, probe_json, rank_cwd, rank_env

WORKER = "repro.rank.pool_worker"
START_TIMEOUT_S = 300.0  # imports on a cold, busy 2-core machine


class _Worker:
    def __init__(self, root: Path | None, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log, "ab"),  # noqa: SIM115 - the worker owns it for its lifetime
            env=rank_env("cpu", root),
            cwd=rank_cwd(),
            start_new_session=True,
        )
        self.children: list[int] = []

    def read(self, deadline: float) -> dict:
        """The worker's next message; TimeoutError past `deadline`, EOFError if the worker is gone."""
        stdout = self.proc.stdout
        assert stdout is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([stdout], [], [], min(left, 0.5))
            if ready:
                line = stdout.readline()
                if not line:
                    raise EOFError(f"pool worker {self.proc.pid} exited with status {self.proc.wait()}")
                return json.loads(line)

    def send(self, request: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()

    def kill_children(self) -> None:
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """The worker and every child it forked (they share its session's process group)."""
        self.kill_children()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


class Pool:
    """A warm parent importing DeepSpeed from `root` (a patched copy) or the installed one; any world size."""

    def __init__(self, root: Path | None, work: Path) -> None:
        self.root, self.work = root, work
        work.mkdir(parents=True, exist_ok=True)
        self.worker: _Worker | None = None
        self.cells = 0

    def _ready(self) -> _Worker:
        """The worker, started (or restarted after it died) and past its imports."""
        worker = self.worker
        if worker is not None and worker.proc.poll() is None:
            return worker
        worker = self.worker = _Worker(self.root, self.work / "worker.log")
        try:
            worker.read(time.monotonic() + START_TIMEOUT_S)
        except (TimeoutError, EOFError) as exc:
            worker.stop()
            why = exc or "timeout"
            raise LaunchError(f"pool worker did not start: {why} (log: {worker.log})") from None
        return worker

    def run_probe(
        self, module: str, out_json: Path, deepspeed_root: Path | None, ranks: int = 2, timeout_s: float = 300
    ) -> dict:
        self._check_root(deepspeed_root)
        logs = [out_json.with_suffix(f".rank{r}.log") for r in range(ranks)]
        result = probe_json(module, out_json, *self._run(module, [str(out_json)], logs, timeout_s))
        for f in logs if not os.environ.get("REPRO_DEBUG") else ():  # with it, each rank's log stays beside the cell
            f.unlink(missing_ok=True)
        return result

    def run_module(
        self, module: str, args: list[str], deepspeed_root: Path | None, ranks: int, timeout_s: float
    ) -> tuple[int, str]:
        """`launch.run_module`'s contract without its torchrun: the first non-zero exit status of the ranks (0
        when all succeeded) and their output, rank by rank; a timeout kills every rank and raises LaunchError."""
        self._check_root(deepspeed_root)
        logs = [self.work / f"run-{self.cells}.rank{r}.log" for r in range(ranks)]
        try:
            return self._run(module, args, logs, timeout_s)
        finally:
            for f in logs:
                f.unlink(missing_ok=True)

    def _check_root(self, deepspeed_root: Path | None) -> None:
        if deepspeed_root != self.root:
            raise ValueError(f"this pool imports DeepSpeed from {self.root}, not {deepspeed_root}")

    def _run(self, module: str, args: list[str], logs: list[Path], timeout_s: float) -> tuple[int, str]:
        """`python -m MODULE ARGS` in one forked child per rank (one log each): the first non-zero status and
        the logs joined."""
        ranks = len(logs)
        port = str(free_port())
        store = self.work / f"store-{self.cells}"
        store.unlink(missing_ok=True)
        envs = [{"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(ranks), "LOCAL_WORLD_SIZE": str(ranks),
                 "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
                for r in range(ranks)]  # fmt: skip
        try:
            worker = self._ready()
            worker.send({"module": module, "args": args, "store": str(store),
                         "ranks": [{"env": e, "log": str(f)} for e, f in zip(envs, logs, strict=True)]})  # fmt: skip
            worker.children = worker.read(time.monotonic() + 60)["started"]
            statuses = self._wait(worker, time.monotonic() + timeout_s, module, timeout_s)
        except (KeyboardInterrupt, Interrupted):
            self.close()
            raise
        finally:
            self.cells += 1
            store.unlink(missing_ok=True)
        log = "\n".join(f.read_text(errors="replace") for f in logs if f.exists())
        return next((s for s in statuses if s != 0), 0), log

    def _wait(self, worker: _Worker, deadline: float, module: str, timeout_s: float) -> list[int]:
        try:
            return worker.read(deadline)["exit"]
        except TimeoutError:
            worker.kill_children()  # every rank: a peer waits in a collective for the hung one
            try:
                worker.read(time.monotonic() + 30)
            except (TimeoutError, EOFError):
                worker.stop()
            raise LaunchError(f"{module}: ranks did not finish within {timeout_s:.0f} s") from None
        except EOFError as exc:  # the worker itself died mid-cell: replaced before the next cell
            worker.stop()
            raise LaunchError(f"{module}: {exc}") from None
        finally:
            worker.children = []

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        self.worker = None


class Pools:
    """One pool per DeepSpeed build (its root), made on first use; `run_probe` picks the right one. `most`: how
    many stay warm at once (a warm parent holds ~350 MB): past it, the least recently used one is stopped, and
    started again if its build comes back."""

    def __init__(self, work: Path, most: int | None = None) -> None:
        self.work, self.pools, self.most, self.made = work, {}, most, 0

    def run_probe(
        self,
        module: str,
        out_json: Path,
        deepspeed_root: Path | None,
        ranks: int = 2,
        timeout_s: float = 300,
        backend: str = "cpu",
    ) -> dict:
        if backend != "cpu":  # a child forked after the worker's imports must not touch CUDA/ROCm
            raise ValueError(f"the warm pools run CPU cells only, not {backend}: one torchrun per GPU cell")
        return self._pool(deepspeed_root).run_probe(module, out_json, deepspeed_root, ranks, timeout_s)

    def run_module(
        self, module: str, args: list[str], deepspeed_root: Path | None, ranks: int, timeout_s: float
    ) -> tuple[int, str]:
        return self._pool(deepspeed_root).run_module(module, args, deepspeed_root, ranks, timeout_s)

    def _pool(self, deepspeed_root: Path | None) -> Pool:
        pool = self.pools.pop(deepspeed_root, None)
        if pool is None:
            pool = Pool(deepspeed_root, self.work / f"pool{self.made}")
            self.made += 1
        self.pools[deepspeed_root] = pool  # the most recently used last
        if self.most is not None:
            for stale in list(self.pools)[: -self.most]:
                self.pools.pop(stale).close()
        return pool

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()

    def __enter__(self) -> Pools:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
