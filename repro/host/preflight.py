"""Everything `python -m repro run` checks before a rank starts: options, backend, model, launcher, the
results directory, and that a variant run beside another one makes a pair with it (exit 2 otherwise)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .. import fixstatus, gpu_sharing, results
from ..model_registry import ARCHITECTURES, DTYPE_NAMES, ModelUnavailable, check_available
from ..options import (
    LAUNCHERS,
    REQUEST_FIELDS,
    VARIANTS,
    RunOptions,
    UsageError,
    check_new_out,
    check_ranks,
    variants_of,
)


def detect_backend() -> str:
    """What torch sees: a GPU (ROCm builds report HIP) or only the CPU; "rocm-no-gpu" for a ROCm build
    of torch that sees none (a GPU image without its devices: never a reason to run on the CPU)."""
    import torch

    if torch.cuda.is_available():
        return "rocm" if torch.version.hip else "cuda"
    return "rocm-no-gpu" if torch.version.hip else "cpu"


def resolve_backend(requested: str) -> str:
    """`--backend`, else the image's intent (REPRO_BACKEND), else what torch sees. A GPU intent that
    torch cannot honour is refused with what is missing, never downgraded to a CPU run."""
    if requested not in ("auto", "cpu", "rocm", "cuda"):
        raise UsageError(f"--backend must be auto, cpu, rocm or cuda, not {requested!r}")
    intent = requested if requested != "auto" else os.environ.get("REPRO_BACKEND", "auto")
    if intent == "cpu":
        return "cpu"
    seen = detect_backend()
    if intent == "auto" and seen != "rocm-no-gpu":
        return seen
    wanted = "rocm" if intent == "auto" else intent
    if seen != wanted:
        from .images import amd

        source = "--backend" if requested != "auto" else ("REPRO_BACKEND" if intent != "auto" else "a ROCm torch")
        why = amd.why_no_gpu() if wanted == "rocm" else "no CUDA device visible"
        raise UsageError(
            f"{source} asks for {wanted} but torch sees no {wanted.upper()} GPU: {why}; "
            "to run on the CPU on purpose, pass --backend cpu"
        )
    return wanted


def check_gpus(backend: str, ranks: int) -> None:
    """One GPU per rank, or REPRO_SHARED_GPU=1 asked for: refused before a rank starts on a GPU that is not there."""
    if backend == "cpu":
        return
    import torch

    too_few = gpu_sharing.too_few_gpus(backend, ranks, torch.cuda.device_count())
    if too_few:
        raise UsageError(f"--backend {backend}: {too_few}")


def validate(opts: RunOptions) -> RunOptions:
    variants = variants_of(opts.variant)
    check_ranks(opts.ranks, opts.allow_single_rank)
    dtype = opts.dtype
    if dtype is not None and dtype not in DTYPE_NAMES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPE_NAMES)}, not {dtype!r}")
    if opts.new_tokens < 1 or opts.cycles < 1:
        raise UsageError("--new-tokens and --cycles must be at least 1")
    if opts.model not in ARCHITECTURES and not opts.model.strip():
        raise UsageError("--model must be pythia-410m, tiny, a hub id or a local directory")
    try:
        check_available(opts.model)
    except ModelUnavailable as exc:
        raise UsageError(str(exc)) from exc
    if opts.launcher not in LAUNCHERS:
        raise UsageError(f"--launcher must be one of {', '.join(LAUNCHERS)}, not {opts.launcher!r}")
    if opts.launcher == "slurm" and shutil.which("srun") is None:
        raise UsageError(
            "--launcher slurm needs Slurm's `srun` on PATH (on a cluster: inside `salloc` or an sbatch script); "
            "without Slurm use --launcher torchrun"
        )
    if opts.out is not None:
        check_new_out(opts.out, variants)
        _check_writable(opts.out)
    backend = resolve_backend(opts.backend)
    check_gpus(backend, opts.ranks)
    opts.backend, opts.dtype = backend, dtype or ("fp32" if backend == "cpu" else "bf16")
    try:
        check_pair(opts, variants)
    except fixstatus.PatchError as exc:
        raise UsageError(str(exc)) from None
    return opts


def _check_writable(out: Path) -> None:
    """The nearest existing ancestor of `out` must be writable, or the run would die after its ranks."""
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: {probe} is not writable by this user; choose another directory")


def check_pair(opts: RunOptions, variants: list[str]) -> None:
    """A variant run into a directory that holds the other one makes a pair with it only if both were asked
    the same question of the same DeepSpeed: refused before anything runs, naming the field."""
    if opts.out is None:
        return
    _, ds_version = fixstatus.installed_deepspeed()
    wanted = {**{k: getattr(opts, k) for k in REQUEST_FIELDS}, "deepspeed": ds_version}
    for other in VARIANTS:
        path = opts.out / f"{other}.json"
        if other in variants or not path.exists():
            continue
        try:
            recorded = results.load(path)
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"--out {opts.out}: {path.name} cannot be read ({exc}); choose a new directory") from None
        had = {**(recorded.get("request") or {}), "deepspeed": (recorded.get("versions") or {}).get("deepspeed")}
        names = {**REQUEST_FIELDS, "deepspeed": "the installed DeepSpeed version"}
        differ = [f"{names[k]} ({had.get(k)!r} there, {v!r} now)" for k, v in wanted.items() if had.get(k) != v]
        if differ:
            raise UsageError(
                f"--out {opts.out} holds a `{other}` that would not be a pair with this run: it differs in "
                + "; ".join(differ)
                + "; use the same options, or a new --out"
            )
