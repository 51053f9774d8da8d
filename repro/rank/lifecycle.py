"""How every rank script ends: rank 0 writes the JSON, all ranks leave the process group, and the process ends
without the interpreter's teardown."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from .. import results
from ..progress import line as progress_line

SHM_COMM_OP = "deepspeed_shm_comm"


def progress(text: str) -> None:
    """One timestamped line per phase, plain text: readable in the variant's log file and relayed by
    the host to the terminal or a batch job's output (repro.host.launch)."""
    print(progress_line(text), flush=True)


def init_distributed(dist_backend: str) -> None:
    """`deepspeed.init_distributed`, without DeepSpeed's CPU shared-memory comm op.

    DeepSpeed JIT-compiles that op the first time a process group starts (~30 s on 2 cores, again for
    every DeepSpeed copy, and inside every fresh container). It only speeds up tensor-parallel
    inference all-reduce on CPU; with inference_tp_size 1 nothing calls it, and ZeRO-3's gathers go
    through torch.distributed. Marking it incompatible (the flag `build_shm_op` reads) skips the build.
    """
    import os

    import deepspeed

    from .. import gpu_sharing

    if gpu_sharing.shares_gpu():  # DeepSpeed binds the process group to the device of LOCAL_RANK: GPU 0 for all
        os.environ["LOCAL_RANK"] = "0"
    skip_shm_comm_op()
    deepspeed.init_distributed(dist_backend=dist_backend)


def skip_shm_comm_op() -> None:
    """Marks DeepSpeed's CPU shm comm op incompatible, the flag `build_shm_op` reads: no JIT build."""
    import deepspeed.ops

    compatible = dict(getattr(deepspeed.ops, "__compatible_ops__", {}))
    compatible[SHM_COMM_OP] = False
    deepspeed.ops.__compatible_ops__ = compatible


def shm_comm_op_state() -> dict:
    """What happened to the op, read from DeepSpeed and the loaded modules (not assumed)."""
    import sys

    import deepspeed.ops

    return {
        "marked_incompatible": getattr(deepspeed.ops, "__compatible_ops__", {}).get(SHM_COMM_OP) is False,
        "loaded": any(name.split(".")[-1].startswith(SHM_COMM_OP) for name in sys.modules),
    }


def pytest_configure(config) -> None:  # noqa: ARG001 - pytest hook signature
    """As a pytest plugin (`-p repro.rank.lifecycle`), the upstream tests run without the JIT build
    too; inside DeepSpeed's own tree they run as written."""
    skip_shm_comm_op()


def finish(out: Path, result: dict) -> None:
    """Rank 0 writes the result; then every rank leaves the process group cleanly."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        results.write(out, result)
    shutdown()


def shutdown() -> None:
    """Barrier, then tear the process group down: a rank leaving with gloo threads alive aborts at exit."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def run_and_leave(main: Callable[..., int | str | None], *args: object) -> NoReturn:
    """Run a rank's main, then end the process without the interpreter's teardown. Ranks that left the process
    group together (shutdown) still abort at exit now and then ("terminate called without an active exception",
    SIGABRT, after their work was written: repro.rank.sanity in a CI run on 2026-12-05), and torchrun then reports
    the run as failed. By the time main returns or exits, everything the rank owes is written. An exception other
    than SystemExit propagates as before: the rank fails and torchrun stops the others."""
    try:
        code = main(*args)
    except SystemExit as exc:
        code = exc.code
    if isinstance(code, str):
        print(code, file=sys.stderr)
    leave(exit_status(code))


def exit_status(code: int | str | None) -> int:
    """The status a SystemExit code gives the process, as the interpreter maps it."""
    return code if isinstance(code, int) else (0 if code is None else 1)


def leave(status: int) -> NoReturn:
    """End the process now, its output flushed, without the interpreter's teardown (see run_and_leave)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
