"""How ranks talk, decided once for the host and the ranks (host-safe: no torch): gloo on the CPU; nccl (RCCL on
ROCm) with one GPU per rank; or, where the machine has fewer GPUs than the cell has ranks and the user asks for it
(REPRO_SHARED_GPU=1), every rank on GPU 0 talking through gloo, which moves CUDA tensors through host memory.

Sharing keeps what the bug needs (two ranks, each holding half of every ZeRO-3 partition) and DeepSpeed's compiled
kernels; it changes only the transport (gloo for nccl), so its cells say so in their evidence."""

from __future__ import annotations

import os

SHARED_GPU_ENV = "REPRO_SHARED_GPU"


def shares_gpu() -> bool:
    return os.environ.get(SHARED_GPU_ENV) == "1"


def dist_backend(backend: str) -> str:
    return "gloo" if backend == "cpu" or shares_gpu() else "nccl"


def too_few_gpus(backend: str, ranks: int, visible: int) -> str | None:
    """Why `ranks` ranks cannot run on `visible` GPUs (None: they can), naming the way out."""
    if backend == "cpu" or visible >= ranks or (shares_gpu() and visible >= 1):
        return None
    share = f"; or {SHARED_GPU_ENV}=1 runs every rank on GPU 0 through gloo" if visible >= 1 else ""
    return (f"{ranks} ranks need {ranks} GPUs (one per rank) but {visible} are visible (HIP_VISIBLE_DEVICES / "
            f"CUDA_VISIBLE_DEVICES){share}")  # fmt: skip
