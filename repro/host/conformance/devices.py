"""Before a GPU conformance run starts: what it needs from the machine, each missing piece one refusal (exit 2)
that names it, never a quiet fall back to the CPU. The reproduction's own rule decides whether torch sees the
GPU asked for (`preflight.resolve_backend`); the DeepSpeed side (device count, the compiled inference op,
dtypes) is asked in a process of its own (`repro.rank.device_check`), so the host imports no torch for it.

The answer is the run's evidence line: CPU, CUDA or ROCm, and the devices it ran on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from ... import gpu_sharing
from ...options import UsageError
from .. import preflight
from ..launch import rank_cwd, rank_env
from .evidence import CPU_EVIDENCE
from .plan import dtype_of

CHECK = "repro.rank.device_check"
CHECK_TIMEOUT_S = 900.0  # loading the inference op builds it first where DeepSpeed JIT-compiles it
EVIDENCE = {"cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm"}


def device_facts(backend: str) -> dict:
    """`repro.rank.device_check`'s JSON, run with the ranks' environment (DS_ACCELERATOR for this backend)."""
    try:
        proc = subprocess.run([sys.executable, "-m", CHECK], env=rank_env(backend, None), cwd=rank_cwd(),
                              capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise UsageError(f"--backend {backend}: the device check did not finish within {CHECK_TIMEOUT_S:.0f} s "
                         "(DeepSpeed building its inference op?); build it ahead (DS_BUILD_TRANSFORMER_INFERENCE=1)"
                         ) from None  # fmt: skip
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"--backend {backend}: the device check failed: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check(backend: str, cells: list[dict], facts: Callable[[str], dict] | None = None) -> dict:
    """The run's evidence ({"backend", "evidence", ...}) or UsageError naming what the machine lacks for these
    cells: the GPU itself, enough devices for the widest cell, DeepSpeed's compiled inference op (a GPU run
    measures the kernels, never the fallbacks in their place), and each dtype the cells run."""
    if backend not in EVIDENCE:
        raise UsageError(f"--backend must be cpu, rocm or cuda, not {backend!r}")
    if backend == "cpu":
        return dict(CPU_EVIDENCE)
    preflight.resolve_backend(backend)  # torch sees no GPU of this kind: refused, naming what is missing
    found = (facts or device_facts)(backend)
    need = max((c["world_size"] for c in cells), default=1)
    too_few = gpu_sharing.too_few_gpus(backend, need, found["device_count"])
    if too_few:
        raise UsageError(
            f"--backend {backend}: the widest cell has {too_few} (fewer GPUs: --ranks 1 runs only the cells of one "
            "rank, which cannot show what needs more ranks)"
        )
    if found["accelerator"] == "cpu":
        raise UsageError(f"--backend {backend}: DeepSpeed's accelerator is the CPU; unset DS_ACCELERATOR")
    if found["inference_op_error"]:
        raise UsageError(
            f"--backend {backend}: DeepSpeed's compiled transformer_inference op does not load "
            f"({found['inference_op_error']}); install DeepSpeed with DS_BUILD_TRANSFORMER_INFERENCE=1 (our images "
            "do), or run the CPU evidence with --backend cpu"
        )
    dtypes = sorted({dtype_of(c) for c in cells})
    unsupported = [d for d in dtypes if not found["dtypes"].get(d)]
    if unsupported:
        raise UsageError(
            f"--backend {backend}: the cells run {', '.join(unsupported)}, which {found['devices'][0]} does not "
            "support according to DeepSpeed's accelerator; no cell is run in another dtype in its place"
        )
    shared = need > found["device_count"]  # allowed only when asked for (too_few_gpus)
    return {
        "backend": backend,
        "evidence": EVIDENCE[backend] + (f", {need} ranks sharing one GPU through gloo" if shared else ""),
        "devices": found["devices"][: 1 if shared else need],
        "torch": found["torch"],
        "gpu_runtime": f"HIP {found['hip']}" if backend == "rocm" else f"CUDA {found['cuda']}",
    }
