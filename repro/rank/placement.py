"""Where a rank's tensors live and how ranks talk: the CPU with gloo, or the rank's own GPU with nccl (RCCL on
ROCm, which torch also calls nccl). One rule for the reproduction and the conformance probes, so both put a
model, its inputs and its native references on the device the Hybrid Engine runs on."""

from __future__ import annotations

import os

import torch

from .. import gpu_sharing

BACKENDS = ("cpu", "rocm", "cuda")


def dist_backend(backend: str) -> str:
    return gpu_sharing.dist_backend(backend)


def rank_device(backend: str) -> torch.device:
    """This rank's device: the CPU, or its own GPU (LOCAL_RANK), chosen through DeepSpeed's accelerator so
    DeepSpeed and the native references agree on it."""
    from deepspeed.accelerator import get_accelerator

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    accelerator = get_accelerator()
    if backend != "cpu":
        if accelerator.device_name() == "cpu":  # DS_ACCELERATOR=cpu on a GPU run: never measure the CPU instead
            raise RuntimeError(f"backend {backend} but DeepSpeed's accelerator is the CPU (DS_ACCELERATOR?)")
        # Ranks sharing one GPU: lifecycle.init_distributed, which every caller runs first, set LOCAL_RANK to 0.
        accelerator.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device(accelerator.current_device_name())
