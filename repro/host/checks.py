"""Optional evidence a run adds to its directory (`repro run --with-checks`), after its summary is
written: the upstream regression test both ways, the bug-class audit, and DeepSpeed's own detector,
each as JSON. A check that breaks records its error in its own file; it never costs the run its summary."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from .. import fixstatus, results
from . import launch
from .upstream import audit, patched_copy, regression


def after_root() -> Path | None:
    """The `after` DeepSpeed: the patched copy, or the installed one when it already has the fix."""
    package_dir, _ = fixstatus.installed_deepspeed()
    return (
        None
        if fixstatus.is_fixed(fixstatus.fix_status_of_package(package_dir))
        else patched_copy.prepare_patched_copy()
    )


def _regression(after: Path | None) -> dict:
    reg = {"before": regression.run_upstream_test(None), "after": regression.run_upstream_test(after)}
    return {v: {k: r[k] for k in r if k != "output_tail"} for v, r in reg.items()}


def _audit() -> dict:
    package_dir, version = fixstatus.installed_deepspeed()
    return {"deepspeed": version, "findings": [asdict(f) for f in audit.scan(package_dir)]}


def _sanity(out: Path, after: Path | None) -> dict:
    sanity = {}
    for variant, root in (("before", None), ("after", after)):
        try:
            sanity[variant] = launch.run_probe("repro.rank.sanity", out / f".sanity-{variant}.json", root)
        except launch.LaunchError as exc:
            sanity[variant] = {"error": str(exc)}
        (out / f".sanity-{variant}.json").unlink(missing_ok=True)
    return sanity


def _step(out: Path, name: str, what: str, fn: Callable[[], dict], log) -> str:
    """One check: its JSON (or its error, recorded), two log lines, and its status for the summary."""
    log(f"[checks] {time.strftime('%H:%M:%S')} {what} ...")
    started = time.monotonic()
    try:
        data = fn()
        status = "ok"
    except Exception as exc:  # one broken check is recorded; the others still run
        data = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
        status = f"error: {data['error']}"
    results.write(out / f"{name}.json", data)
    log(f"[checks] {time.strftime('%H:%M:%S')} {name} {status} in {time.monotonic() - started:.1f} s")
    if name == "regression" and "error" not in data:
        log(f"[checks] regression test: before={data['before']['outcome']} after={data['after']['outcome']}")
    return status


def write_all(out: Path, log=print) -> dict[str, str]:
    """Runs every check; returns {check: "ok" | "error: ..."} for the summary. The audit (this process,
    parsing DeepSpeed: ~10 s of one core) runs in a thread beside the regression test's pytest processes;
    it starts no process, so a Ctrl-C need not wait for it (daemon thread)."""
    try:
        after = patched_copy.after_root()
    except fixstatus.PatchError as exc:
        return {name: f"error: {exc}" for name in ("regression", "audit", "sanity")}
    status: dict[str, str] = {}

    def audit_step() -> None:
        status["audit"] = _step(out, "audit", "bug-class audit of the installed DeepSpeed", _audit, log)

    audit_thread = threading.Thread(target=audit_step, daemon=True)
    audit_thread.start()
    regression_what = "upstream regression test, installed and patched DeepSpeed"
    status["regression"] = _step(out, "regression", regression_what, lambda: _regression(after), log)
    audit_thread.join()
    status["sanity"] = _step(out, "sanity", "enable_sanity_checks probe, 2 ranks", lambda: _sanity(out, after), log)
    return {name: status[name] for name in ("regression", "audit", "sanity")}
