"""What a run is asked to do, and the exit statuses every entry point shares (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXIT_OK, EXIT_EXPECTATION, EXIT_USAGE = 0, 1, 2


class UsageError(RuntimeError):
    """Bad arguments or environment, found before anything expensive starts (exit status 2)."""


@dataclass
class RunOptions:
    variant: str = "both"
    model: str = "pythia-410m"
    dtype: str | None = None
    ranks: int = 2
    backend: str = "auto"
    new_tokens: int = 8
    cycles: int = 20
    pin: bool = True
    seed: int = 1234
    prompt: str | None = None
    out: Path | None = None
    timeout_s: float = 900.0
    allow_single_rank: bool = False
    with_checks: bool = False


def variants_of(variant: str) -> list[str]:
    return ["before", "after"] if variant == "both" else [variant]
