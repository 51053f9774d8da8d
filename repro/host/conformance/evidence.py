"""What a conformance run is evidence of, in the words every report and issue text uses: CPU (DeepSpeed's
PyTorch fallbacks, gloo), CUDA or ROCm (DeepSpeed's compiled kernels, nccl/rccl, on the devices named), read
from conformance.json's `evidence` (`devices.check`); a file from before the backend option is CPU evidence."""

from __future__ import annotations

from collections import Counter

from ...options import ds_accelerator

CPU_EVIDENCE = {"backend": "cpu", "evidence": "CPU"}  # a run from before the backend option: CPU


def of(data: dict) -> dict:
    return data.get("evidence") or CPU_EVIDENCE


def is_cpu(data: dict) -> bool:
    return of(data)["backend"] == "cpu"


def label(data: dict) -> str:
    """ "CPU evidence", "CUDA evidence", "ROCm evidence": the report's title says it first."""
    return f"{of(data)['evidence']} evidence"


def scope(data: dict) -> str:
    """Which evidence this is and which it is not, with what ran the inference ops."""
    e = of(data)
    if e["backend"] == "cpu":
        return (
            "CPU evidence, not GPU or AMD evidence: gloo, DeepSpeed's PyTorch fallbacks (`repro/rank/fallbacks.py` "
            "completes GPT-NeoX's attention and parallel-residual MLP, the MLP's ReLU and the post-LayerNorm QKV "
            "linear for OPT, GPT-J's rotary and MLP, BLOOM's ALiBi, GPT-Neo's local attention)"
        )
    amd = "" if e["backend"] == "rocm" else ", not AMD evidence"
    return (
        f"{e['evidence']} evidence, not CPU evidence{amd}: {_devices(e)} ({len(e.get('devices', []))} ranks, one GPU "
        "each), "
        f"torch {e.get('torch')}, {e.get('gpu_runtime')}, nccl, DeepSpeed's compiled kernels (each cell records per "
        "op whether the compiled kernel or a fallback ran)"
    )


def _devices(e: dict) -> str:
    """The GPU names the ranks ran on, each once."""
    return ", ".join(dict.fromkeys(e.get("devices", [])))


def ds_report_command(data: dict) -> str:
    return f"DS_ACCELERATOR={ds_accelerator(of(data)['backend'])} ds_report"


def system_info(data: dict, python: str, torch: str, transformers: str, deepspeed: str) -> list[str]:
    """The issue template's System info lines, for the machine the cells ran on."""
    versions = f"Python {python}, torch {torch}, Transformers {transformers}, DeepSpeed {deepspeed}"
    if is_cpu(data):
        return [
            f"- Linux (Debian 12), CPU only, 2 cores, no GPU; {versions}.",
            "- Launcher: torchrun (gloo), `DS_ACCELERATOR=cpu`; the inference ops are DeepSpeed's PyTorch fallbacks.",
        ]
    e = of(data)
    return [
        f"- {_devices(e)}; {e.get('gpu_runtime')}; {versions}.",
        "- Launcher: torchrun (nccl), one GPU per rank, `DS_ACCELERATOR=cuda`; DeepSpeed's compiled inference op.",
    ]


def kernels(cells: list[dict]) -> str:
    """Per inference op, in how many cells the compiled kernel ran and in how many a fallback did, and the
    compiled kernels' own math where it differs from the model's (named per cell)."""
    counts = Counter(pair for c in cells for pair in (c.get("kernel_paths") or {}).items())
    if not any("kernel_paths" in c for c in cells):
        return "Kernels per op: not recorded by this run (its cells were measured before the probe recorded them)."
    if not counts:
        return "Kernels per op: none ran (no cell's generate went through the Hybrid Engine's layers)."
    ops = "; ".join(
        f"`{op}` " + ", ".join(f"{path} in {n}" for (o, path), n in sorted(counts.items()) if o == op)
        for op in dict.fromkeys(op for op, _ in sorted(counts))
    )
    approx = Counter(a for c in cells for a in c.get("approximations") or [])
    named = "".join(f" In {n} cells {a}." for a, n in sorted(approx.items()))
    return f"Kernels per op (cells): {ops}.{named}"
