"""Which engine and backend a task uses, decided once (`choose`), and what a run needs from the host: GPU
ids, device groups, mounts. The engines themselves, and the exact commands each runs, are repro.host.images.engines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...paths import hf_home
from . import amd, engines
from .engines import (  # noqa: F401 - the names tasks and jobs use
    DEFAULT_SHM,
    FLAVOURS,
    WORKDIR,
    EngineError,
    RunFlags,
    RunMounts,
    device_group_ids,
)

ENGINES = engines.CONTAINER_ENGINES
AUTO_ENGINES = ("docker", "podman")


@dataclass
class Choice:
    backend: str  # "rocm", "cpu"
    engine: str  # "docker", "podman", "buildah", "apptainer" or "local"
    reason: str

    @property
    def runner(self) -> engines.Engine:
        """The engine object: everything after the choice goes through it."""
        return engines.get(self.engine)


def engine_works(name: str) -> bool:
    return engines.get(name).works()


def amd_gpu_present() -> bool:
    return amd.KFD.exists()


def resolve_engine(engine: str, *, allow_local: bool, dry_run: bool = False) -> str:
    """The one rule for `--engine auto`: the first working of docker, podman (buildah and apptainer are
    opt-in: named explicitly); else `local` where allowed. Explicit engines are checked."""
    if engine not in ("auto", "local", *ENGINES):
        raise EngineError(f"--engine must be auto, {', '.join(ENGINES)} or local, not {engine!r}")
    if engine == "local":
        if not allow_local:
            raise EngineError(
                "this task needs a container engine (docker, podman, buildah or apptainer); see `invoke doctor`"
            )
        return "local"
    if engine == "auto":
        found = next((e for e in AUTO_ENGINES if engine_works(e)), None)
        if found:
            return found
        if allow_local:
            return "local"
        if dry_run:
            return "docker"
        raise EngineError(
            "no working container engine (docker or podman; buildah with --engine buildah); see `invoke doctor`"
        )
    if not dry_run and not engine_works(engine):
        raise EngineError(
            f"--engine {engine}: `{engine}` is not installed or its engine is not running (see `invoke doctor`)"
        )
    return engine


def choose(backend: str, engine: str, dry_run: bool = False) -> Choice:
    """Resolves `auto`s; refuses impossible combinations before anything expensive starts.

    With `dry_run` nothing will run, so missing devices and engines do not stop the commands from
    being printed (the choice's reason says what is missing).
    """
    if backend not in ("auto", "rocm", "cpu"):
        raise EngineError(f"--backend must be auto, rocm or cpu, not {backend!r}")
    missing = []
    if backend == "rocm" and not amd_gpu_present():
        missing.append("--backend rocm needs an AMD GPU: " + amd.why_no_gpu())
    try:
        resolved = resolve_engine(engine, allow_local=True, dry_run=dry_run)
    except EngineError as exc:
        if not dry_run or engine not in ENGINES:
            raise
        resolved, missing = engine, [*missing, str(exc)]
    if missing and not dry_run:
        raise EngineError(missing[0])
    if dry_run and engine == "auto" and backend == "rocm" and resolved == "local":
        resolved = "docker"  # a dry run prints what an AMD host with Docker would run
    if missing:
        return Choice(backend, resolved, "dry run; for a real run: " + "; ".join(missing))
    if backend == "auto":
        if resolved != "local" and amd_gpu_present():
            return Choice("rocm", resolved, f"{resolved} works and /dev/kfd is present: ROCm image")
        if resolved != "local":
            return Choice("cpu", resolved, f"{resolved} works but no AMD GPU (/dev/kfd): CPU image")
        return Choice("cpu", "local", "no working container engine: local CPU run in this Python environment")
    if backend == "rocm" and resolved == "local":
        return Choice("rocm", "local", "local run on this host's ROCm torch")
    return Choice(backend, resolved, f"asked for --backend {backend} --engine {engine}")


def gpu_ids(spec: str | None, check_present: bool = True) -> list[str]:
    """`--gpus 0,1` -> ["0", "1"], checked against /dev/dri/renderD* so a typo fails early."""
    if not spec:
        return []
    ids = [g.strip() for g in spec.split(",") if g.strip()]
    if not all(g.isdigit() for g in ids):
        raise EngineError(f"--gpus must be comma-separated device indices like 0,1, not {spec!r}")
    present = len(list(Path("/dev/dri").glob("renderD*"))) if Path("/dev/dri").exists() else 0
    absent = [g for g in ids if int(g) >= present]
    if absent and check_present:
        raise EngineError(
            f"--gpus {spec}: device(s) {','.join(absent)} absent; this host shows {present} GPU "
            "render node(s) in /dev/dri"
        )
    return ids


def default_mounts(results: Path) -> RunMounts:
    hf = hf_home()
    return RunMounts(results=results, hf_cache=hf if hf.is_dir() else None)
