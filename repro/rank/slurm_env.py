"""Slurm's task variables as the ones torch.distributed reads (`--launcher slurm`: srun starts one task
per rank, so there is no torchrun to set RANK, WORLD_SIZE and LOCAL_RANK)."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# torch.distributed's name <- Slurm's name, for one job step on one node.
SLURM_TO_TORCH = {
    "RANK": "SLURM_PROCID",
    "WORLD_SIZE": "SLURM_NTASKS",
    "LOCAL_RANK": "SLURM_LOCALID",
    "LOCAL_WORLD_SIZE": "SLURM_NTASKS",
}


def apply(env: MutableMapping[str, str] = os.environ) -> bool:
    """Fills RANK, WORLD_SIZE, LOCAL_RANK from an srun task's variables; a torchrun rank (RANK already
    set) is left alone. MASTER_PORT comes from the host side (repro.host.launch); the one node is the
    rendezvous, so MASTER_ADDR defaults to loopback. Returns whether it mapped anything."""
    if "RANK" in env or "SLURM_PROCID" not in env:
        return False
    missing = [name for name in SLURM_TO_TORCH.values() if name not in env]
    if missing:
        raise RuntimeError(f"srun task without {', '.join(missing)}: not started by `srun --ntasks N`")
    if "MASTER_PORT" not in env:
        raise RuntimeError("srun task without MASTER_PORT: start it with `python -m repro run --launcher slurm`")
    for torch_name, slurm_name in SLURM_TO_TORCH.items():
        env[torch_name] = env[slurm_name]
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    return True
