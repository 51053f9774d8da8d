"""`python -m repro run` after its checks (repro.host.preflight): runs the requested variants, each under
its own launcher, then has the pair judged (repro.host.summary) and returns the exit status."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from .. import fixstatus, results
from ..options import EXIT_INTERRUPTED, RunOptions, variants_of
from . import summary
from .launch import Interrupted, LaunchError, LaunchSpec, interrupt_on_sigterm, run_variant
from .rundir import new_run_dir
from .upstream import patched_copy


def _spec(opts: RunOptions, variant: str) -> LaunchSpec:
    return LaunchSpec(
        variant=variant,
        model=opts.model,
        dtype=opts.dtype,
        ranks=opts.ranks,
        backend=opts.backend,
        new_tokens=opts.new_tokens,
        cycles=opts.cycles,
        soak=opts.soak,
        pin=opts.pin,
        seed=opts.seed,
        prompt=opts.prompt,
        timeout_s=opts.timeout_s,
        launcher=opts.launcher,
    )


def run_pair(opts: RunOptions, argv: list[str], log=print) -> int:
    """Runs the requested variants, judges the pair from what the directory holds, and returns the exit
    status the CLI documents (repro.options.EXIT_MEANING)."""
    package_dir, ds_version = fixstatus.installed_deepspeed()
    installed_fixed = fixstatus.is_fixed(fixstatus.fix_status_of_package(package_dir))
    if installed_fixed and opts.variant != "after":
        log(
            f"note: DeepSpeed {ds_version} at {package_dir} already passes modifier_rank=0 in both transforms; "
            "`before` cannot reproduce the bug with it"
        )
    out = opts.out or new_run_dir(opts.model, opts.backend, opts.dtype)
    out.mkdir(parents=True, exist_ok=True)
    log(f"run directory: {out}")
    requested = variants_of(opts.variant)
    record = {
        "command": "python -m repro " + shlex.join(argv),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in opts.__dict__.items()},
        "started": time.time(),
    }
    interrupt_on_sigterm()
    try:
        for variant in requested:
            log(
                f"[{variant}] {opts.ranks} ranks, {opts.model}, {opts.dtype}, {opts.backend}, "
                f"pin_parameters={opts.pin} ..."
            )
            root = None if variant == "before" else patched_copy.after_root()
            result = run_variant(_spec(opts, variant), out, root, progress=log)
            log(f"[{variant}] {result['verdict']} ({result['duration_s']} s)")
    except (KeyboardInterrupt, Interrupted) as exc:
        why = "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc)
        summary.write(out, requested, interrupted=f"interrupted by {why}", **record)
        log(f"interrupted ({why}): every rank was stopped; partial results in {out}")
        return EXIT_INTERRUPTED
    except fixstatus.PatchError as exc:
        log(f"error: {exc}")
        return summary.write(out, requested, environment=str(exc), **record)["exit_status"]
    except LaunchError as exc:
        log(f"error: {exc}")
        return summary.write(out, requested, broken=str(exc), **record)["exit_status"]
    judged = summary.write(out, requested, **record)
    if opts.with_checks:
        from . import checks

        judged["checks"] = checks.write_all(out, log=log)
        results.write(out / "summary.json", judged)
    log(summary.one_line(judged))
    return judged["exit_status"]


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
