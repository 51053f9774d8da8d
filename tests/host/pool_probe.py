"""A stand-in probe for the pool's tests (`python -m tests.host.pool_probe OUT.json`): what it does comes
from OUT's name: `ok`, `crash` (rank 1 raises), `abort`, `hang`, or `kill-worker` (kills the pool's worker
mid-cell). `ok` writes the ranks' all-reduced sum, so the cell's process group is real."""

import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def main(out: str) -> None:
    what, rank = Path(out).stem.split("-", 1)[0], dist.get_rank()
    if what == "crash" and rank == 1:
        raise RuntimeError("injected failure on rank 1")
    if what == "abort":
        os.abort()
    if what == "hang":
        time.sleep(600)
    if what == "kill":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(600)
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    if rank == 0:
        Path(out).write_text(json.dumps({"sum": total.item(), "pid": os.getpid(), "parent": os.getppid()}))
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
