"""How every rank script ends: rank 0 writes the JSON, then all ranks leave the process group."""

from __future__ import annotations

import json
from pathlib import Path


def finish(out: Path, result: dict) -> None:
    """Rank 0 writes the result; then every rank leaves the process group cleanly."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    shutdown()


def shutdown() -> None:
    """Barrier, then tear the process group down: a rank leaving with gloo threads alive aborts at exit."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
