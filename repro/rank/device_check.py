"""What this machine's torch and DeepSpeed offer a GPU conformance run, asked in a process of its own (the host
imports neither): devices, DeepSpeed's accelerator, whether the compiled `transformer_inference` op loads, and
which dtypes the device runs. Prints one JSON object; `repro.host.conformance.devices` turns each missing piece
into a refusal.

Usage: `python -m repro.rank.device_check` (with the rank environment: DS_ACCELERATOR, PYTHONPATH).
"""

from __future__ import annotations

import json
import sys


def facts() -> dict:
    import torch
    from deepspeed.accelerator import get_accelerator

    from .fallbacks import compiled_op_error

    accelerator = get_accelerator()
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {
        "torch": torch.__version__,
        "hip": torch.version.hip,
        "cuda": torch.version.cuda,
        "accelerator": accelerator.device_name(),
        "device_count": count,
        "devices": [torch.cuda.get_device_name(i) for i in range(count)],
        "dtypes": {
            "fp32": True,
            "bf16": bool(count and accelerator.is_bf16_supported()),
            "fp16": bool(count and accelerator.is_fp16_supported()),
        },
        # Loading builds it first where DeepSpeed can JIT-compile it (minutes); our ROCm image ships it built.
        "inference_op_error": compiled_op_error() if count else "no GPU visible",
    }


def main() -> int:
    print(json.dumps(facts()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
