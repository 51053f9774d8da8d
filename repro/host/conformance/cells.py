"""One conformance cell: the cell probe (`repro.rank.cell_probe`, any architecture with an adapter) on its
build's DeepSpeed with the configuration's overrides and the scenario's settings; through `probe`, a warm
pool's `run_probe` or one torchrun per cell (`launch.run_probe`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ... import results
from .. import launch
from .plan import dtype_of

PROBE = "repro.rank.cell_probe"


def _slug(axes: dict) -> str:
    cell = f"{axes['arch']}-{axes['configuration']}-{axes['scenario']}-z{axes['zero_stage']}-ws{axes['world_size']}"
    dtype = dtype_of(axes)
    return f"{cell}-transformers{axes['transformers']}" + (f"-{dtype}" if dtype != "fp32" else "")


def run_cell(
    work: Path,
    root: Path | None,
    axes: dict,
    timeout_s: float = 300,
    probe: Callable[..., dict] = launch.run_probe,
    backend: str = "cpu",
) -> dict:
    """The cell's measurements on `backend` (raises on a failed or hung launch: the caller records it as the
    cell's error)."""
    out = work / axes["build"].replace(" ", "-") / f"{_slug(axes)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = out.with_suffix(".spec.json")  # repro.rank.cell_probe.spec_path
    settings = {"arch": axes["arch"], "targets": axes["lora"], "pin": axes["pin"], "order": axes["order"],
                "zero_stage": axes["zero_stage"], "config": axes["config"], "dtype": dtype_of(axes),
                "backend": backend, "own_fallbacks": bool(axes.get("own_fallbacks")),
                **axes.get("probe", {})}  # fmt: skip
    results.write(spec, settings, indent=None, sort_keys=False)
    peers = [out.with_suffix(f".rank{r}.crash.json") for r in range(1, axes["world_size"])]  # cell_probe's
    for f in peers:
        f.unlink(missing_ok=True)
    try:
        try:
            result = probe(PROBE, out, root, ranks=axes["world_size"], timeout_s=timeout_s, backend=backend)
        except launch.LaunchError:
            # A rank that crashed on its own left its crash; rank 0 may have measured everything and failed only
            # in the barrier after it: its result and the peer's crash are the cell's. Anything else is broken.
            if not out.exists() or not any(f.exists() for f in peers):
                raise
            result = results.load(out)
        crashed = [results.load(f) for f in peers if f.exists()]
        return {**result, "peer_crashes": crashed} if crashed else result
    finally:
        for f in (spec, out, *peers):
            f.unlink(missing_ok=True)
