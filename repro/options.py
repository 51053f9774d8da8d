"""What a run is asked to do, and the exit statuses every entry point shares (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .model_registry import RANDOM_PYTHIA

EXIT_OK, EXIT_EXPECTATION, EXIT_USAGE, EXIT_BROKEN, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# The one table of exit statuses: the CLI's help, the invoke tasks and the in-image proof all read it.
EXIT_MEANING = {
    EXIT_OK: "the expectation held (a pair: `before` reproduced #8391 and `after` is correct; one variant: it met "
    "its own expectation)",
    EXIT_EXPECTATION: "judged, and the expectation failed (the reason on one line)",
    EXIT_USAGE: "usage or environment error, found before anything expensive started (bad option, one rank, "
    "missing model or engine or GPU, a patch that does not apply, `before`/`after` that are not a pair)",
    EXIT_BROKEN: "a run that broke before it could be judged (a rank crashed or hung, an unexpected error, "
    "a test that timed out): nothing was judged",
    EXIT_INTERRUPTED: "interrupted by Ctrl-C or SIGTERM; every rank stopped",
}
VARIANTS = ("before", "after")
# How a variant's ranks start: torchrun on this host, or Slurm's srun (one task per rank, on one node).
LAUNCHERS = ("torchrun", "slurm")


# The options that make two variants' runs one pair (each variant's JSON records them as `request`),
# and the flag that sets each.
REQUEST_FIELDS = {
    "model": "--model",
    "seed": "--seed",
    "dtype": "--dtype",
    "ranks": "--ranks",
    "prompt": "--prompt",
    "new_tokens": "--new-tokens",
    "cycles": "--cycles",
    "soak": "--soak",
    "pin": "--no-pin",
    "backend": "--backend",
}


class UsageError(RuntimeError):
    """Bad arguments or environment, found before anything expensive starts (exit status 2)."""


@dataclass
class RunOptions:
    variant: str = "both"
    model: str = RANDOM_PYTHIA
    dtype: str | None = None
    ranks: int = 2
    backend: str = "auto"
    new_tokens: int = 8
    cycles: int = 20
    soak: bool = False
    pin: bool = True
    seed: int = 1234
    prompt: str | None = None
    out: Path | None = None
    timeout_s: float = 900.0
    allow_single_rank: bool = False
    with_checks: bool = False
    launcher: str = "torchrun"


def check_ranks(ranks: int, allow_single_rank: bool = False) -> None:
    """One rule for every entry point (checked before an image is built or a rank started)."""
    if ranks < 1:
        raise UsageError("--ranks must be at least 1 (and 2 to show the bug)")
    if ranks == 1 and not allow_single_rank:
        raise UsageError(
            "--ranks 1 hides the bug: the Hybrid Engine at world size 1 keeps the transformed QKV, so `before` "
            "looks correct; use --ranks 2 (or --allow-single-rank to run anyway)"
        )


def variants_of(variant: str) -> list[str]:
    if variant not in ("before", "after", "both"):
        raise UsageError(f"--variant must be before, after or both, not {variant!r}")
    return list(VARIANTS) if variant == "both" else [variant]


def out_clash(out: Path, variants: list[str]) -> list[str]:
    """The files in `out` that running `variants` would overwrite. One rule for every entry point:
    a directory may be reused only by a variant it holds no result of (the container path runs
    `before` and `after` into one directory, one image each); anything else a user ran is kept."""
    if not out.exists():
        return []
    if not out.is_dir():
        return [out.name]
    return [f"{v}{ext}" for v in variants for ext in (".json", ".log") if (out / f"{v}{ext}").exists()]


def check_new_out(out: Path, variants: list[str]) -> None:
    clash = out_clash(out, variants)
    if clash:
        raise UsageError(
            f"--out {out} already holds {', '.join(clash)}; choose a new directory (nothing is overwritten)"
        )


def ds_accelerator(backend: str) -> str:
    """DeepSpeed's accelerator name for a backend: "cuda" is its name for CUDA and ROCm builds alike."""
    return "cpu" if backend == "cpu" else "cuda"
