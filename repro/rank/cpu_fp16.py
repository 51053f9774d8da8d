"""fp16 on the CPU backend. DeepSpeed's CPU accelerator offers no fp16 (`is_fp16_supported()` asks oneDNN for
AVX512-FP16 or AMX-FP16, which few CPUs have), so `deepspeed.initialize` refuses an fp16 config, although
PyTorch computes every op a cell needs in fp16 on any CPU. Lifting the check in the rank runs DeepSpeed's own
fp16 path (its ZeRO fp16 optimizer, the Hybrid Engine's fp16 inference containers and their dtype casts) on
PyTorch's CPU half kernels: CPU evidence of that path, never evidence about a GPU's fp16 kernels."""

from __future__ import annotations

import torch

NOTE = (
    "fp16 on CPU: DeepSpeed's CPU accelerator reports no fp16, its check is lifted in the ranks and PyTorch's CPU "
    "half kernels compute (DeepSpeed's fp16 code path, not a GPU's fp16 kernels)"
)


def allow(backend: str, dtype: str) -> list[str]:
    """On the CPU backend in fp16, make the CPU accelerator report fp16; returns the note the cell carries
    (none where nothing was lifted: another backend answers for itself, and other dtypes need nothing)."""
    if backend != "cpu" or dtype != "fp16":
        return []
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    listed = CPU_Accelerator.supported_dtypes

    def supported_dtypes(self) -> list[torch.dtype]:
        dtypes = listed(self)
        return dtypes if torch.float16 in dtypes else [*dtypes, torch.float16]

    CPU_Accelerator.supported_dtypes = supported_dtypes
    CPU_Accelerator.is_fp16_supported = lambda self: True
    return [NOTE]
