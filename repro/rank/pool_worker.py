"""The warm parent of a pool (`python -m repro.rank.pool_worker`, started by repro.host.pool): it imports
torch, DeepSpeed, Transformers and the probes once, then forks one child per rank of each cell. Nothing runs
in the parent besides imports, so each child starts from DeepSpeed's and Transformers' import-time state: no
class-wide state (layer counters, the inference workspace, policy state) can leak from one cell into the next.

Protocol, one JSON object per line: the host writes a cell on stdin ({"module", "args", "store", "ranks":
[{"env", "log"}, ...]}); the worker answers {"started": [pid per rank]} at once and {"exit": [status per
rank]} when every child has ended (a negative status is the signal that ended it: the host kills the children
of a cell that outlives its timeout).
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import sys
import traceback

from .lifecycle import exit_status, leave

# What every cell would import first thing. Importing it before the fork gives each child the state a fresh
# process has after the same imports, minus their cost (the Transformers modeling modules alone: ~1.8 s).
WARM = (
    "torch",
    "deepspeed",
    "deepspeed.runtime.hybrid_engine",
    "deepspeed.module_inject",
    "deepspeed.ops.transformer.inference",
    "transformers",
    "transformers.models.gpt_neox.modeling_gpt_neox",
    "transformers.models.gpt_neo.modeling_gpt_neo",
    "transformers.models.llama.modeling_llama",
    "transformers.models.opt.modeling_opt",
    "transformers.models.gptj.modeling_gptj",
    "transformers.models.bloom.modeling_bloom",
    "repro.rank.cell_probe",
)


def _send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _child(request: dict) -> None:
    """Runs `python -m MODULE ARGS` in this forked process, its output in the request's log; never returns."""
    code = 1
    try:
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.environ.update(request["env"])
        _join(request["store"])
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exit_status(exc.code)
    except BaseException:  # the cell's failure, in its log; the worker lives on
        traceback.print_exc()
    finally:
        leave(code)


def _join(store_path: str) -> None:
    """The cell's gloo process group, on a file store the host named for this cell. DeepSpeed's
    init_distributed then finds it initialised and wraps it. (A TCP rendezvous on MASTER_PORT costs a
    rank that connects before rank 0 listens a retry back-off of ~2 s per cell; torchrun hides it with
    its agent's store.)"""
    import torch.distributed as dist

    world = int(os.environ["WORLD_SIZE"])
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]), world_size=world)


def main() -> int:
    import importlib

    for name in WARM:
        importlib.import_module(name)
    # The imports' objects live as long as the worker: out of every collection in its children. DeepSpeed's
    # HybridEngine.eval() and train() run gc.collect() at every call, which otherwise walks all of them, in each
    # child, and writes to their pages (copy-on-write copies of the parent's heap).
    gc.freeze()
    _send({"ready": os.getpid()})
    for line in sys.stdin:  # EOF: the host is gone or closed the pool
        cell = json.loads(line)
        pids = []
        for rank in cell["ranks"]:
            pid = os.fork()
            if pid == 0:
                _child({**cell, **rank})
            pids.append(pid)
        _send({"started": pids})
        _send({"exit": [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
