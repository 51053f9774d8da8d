"""`python -m repro run`: the before/after reproduction, from arguments to `DIR/*.json`."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

from .. import fixstatus, verdict
from ..model_registry import ARCHITECTURES, DTYPE_NAMES, ModelUnavailable, check_available
from ..options import EXIT_EXPECTATION, EXIT_OK, EXIT_USAGE, RunOptions, UsageError, variants_of
from ..paths import RUNS_DIR
from . import patched_copy
from .launch import LaunchError, LaunchSpec, run_variant


def detect_backend() -> str:
    """cpu unless torch sees a GPU; ROCm builds of torch report HIP."""
    import torch

    if torch.cuda.is_available():
        return "rocm" if torch.version.hip else "cuda"
    return "cpu"


def validate(opts: RunOptions) -> RunOptions:
    if opts.variant not in ("before", "after", "both"):
        raise UsageError(f"--variant must be before, after or both, not {opts.variant!r}")
    if opts.ranks < 1:
        raise UsageError("--ranks must be at least 2")
    if opts.ranks == 1 and not opts.allow_single_rank:
        raise UsageError(
            "--ranks 1 hides the bug: with one rank ZeRO-3's gather returns the partition itself, "
            "so the in-place change survives; use --ranks 2 (or --allow-single-rank to run anyway)"
        )
    if opts.backend not in ("auto", "cpu", "rocm", "cuda"):
        raise UsageError(f"--backend must be auto, cpu, rocm or cuda, not {opts.backend!r}")
    backend = detect_backend() if opts.backend == "auto" else opts.backend
    if backend != "cpu" and detect_backend() != backend:
        raise UsageError(f"--backend {backend}: torch sees no {backend.upper()} GPU here; use --backend cpu")
    dtype = opts.dtype or ("fp32" if backend == "cpu" else "bf16")
    if dtype not in DTYPE_NAMES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPE_NAMES)}, not {dtype!r}")
    if opts.new_tokens < 1 or opts.cycles < 1:
        raise UsageError("--new-tokens and --cycles must be at least 1")
    if opts.model not in ARCHITECTURES and not opts.model.strip():
        raise UsageError("--model must be pythia-410m, tiny, a hub id or a local directory")
    try:
        check_available(opts.model)
    except ModelUnavailable as exc:
        raise UsageError(str(exc)) from exc
    if opts.out is not None:
        clash = [f"{v}.json" for v in variants_of(opts.variant) if (opts.out / f"{v}.json").exists()]
        if clash:
            raise UsageError(
                f"--out {opts.out} already holds {', '.join(clash)}; choose a new directory (nothing is overwritten)"
            )
    opts.backend, opts.dtype = backend, dtype
    return opts


def new_run_dir(model: str, backend: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    slug = "".join(c if c.isalnum() or c in "-." else "-" for c in Path(model).name)
    for n in range(1000):
        candidate = RUNS_DIR / (f"{stamp}-{backend}-{slug}" + ("" if n == 0 else f"-{n}"))
        if not candidate.exists():
            return candidate
    raise UsageError(f"cannot find a free run directory under {RUNS_DIR}")


def _spec(opts: RunOptions, variant: str) -> LaunchSpec:
    return LaunchSpec(
        variant=variant,
        model=opts.model,
        dtype=opts.dtype,
        ranks=opts.ranks,
        backend=opts.backend,
        new_tokens=opts.new_tokens,
        cycles=opts.cycles,
        pin=opts.pin,
        seed=opts.seed,
        prompt=opts.prompt,
        timeout_s=opts.timeout_s,
    )


def execute(opts: RunOptions, argv: list[str], log=print) -> int:
    """Runs the requested variants; returns the exit status the CLI documents."""
    package_dir, ds_version = fixstatus.installed_deepspeed()
    installed_fixed = fixstatus.is_fixed(fixstatus.fix_status_of_package(package_dir))
    if installed_fixed and opts.variant != "after":
        log(
            f"note: DeepSpeed {ds_version} at {package_dir} already passes modifier_rank=0 in both transforms; "
            "`before` cannot reproduce the bug with it"
        )
    variants = variants_of(opts.variant)
    out = opts.out or new_run_dir(opts.model, opts.backend)
    out.mkdir(parents=True, exist_ok=True)
    log(f"run directory: {out}")
    results: dict[str, dict] = {}
    started = time.time()
    try:
        for variant in variants:
            log(
                f"[{variant}] {opts.ranks} ranks, {opts.model}, {opts.dtype}, {opts.backend}, "
                f"pin_parameters={opts.pin} ..."
            )
            if variant == "before":
                results[variant] = run_variant(_spec(opts, variant), out, None)
            else:
                # An installed DeepSpeed that has the fix (the `after` image) is its own `after`.
                root = None if installed_fixed else patched_copy.prepare_patched_copy()
                results[variant] = run_variant(_spec(opts, variant), out, root)
            log(f"[{variant}] {results[variant]['verdict']} ({results[variant]['duration_s']} s)")
    except (LaunchError, fixstatus.PatchError) as exc:
        log(f"error: {exc}")
        _write_summary(out, opts, argv, results, started, error=str(exc))
        return EXIT_EXPECTATION if isinstance(exc, LaunchError) else EXIT_USAGE
    if opts.with_checks:
        from . import checks

        checks.write_all(out, log=log)
    summary = _write_summary(out, opts, argv, results, started)
    log(("OK: " if summary["expectation_held"] else "EXPECTATION FAILED: ") + summary["reason"])
    return EXIT_OK if summary["expectation_held"] else EXIT_EXPECTATION


def _write_summary(
    out: Path, opts: RunOptions, argv: list[str], results: dict, started: float, error: str | None = None
) -> dict:
    # A variant run earlier into the same directory (one per image) counts too: read, never rewritten.
    for name in ("before", "after"):
        if name not in results and (out / f"{name}.json").exists():
            results[name] = json.loads((out / f"{name}.json").read_text())
    summary = verdict.summarize(results.get("before"), results.get("after"))
    if error:
        summary.update(expectation_held=False, reason=error)
    summary.update(
        command="python -m repro " + shlex.join(argv),
        variants=sorted(results),
        error=error,
        options={k: (str(v) if isinstance(v, Path) else v) for k, v in opts.__dict__.items()},
        wall_s=round(time.time() - started, 2),
        patch=patched_copy.patch_file().name,
        patch_text=patched_copy.patch_file().read_text(),
        environment=next((r["environment"] for r in results.values()), None),
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
