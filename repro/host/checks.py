"""Optional evidence a run can add to its directory (`repro run --with-checks`): the upstream
regression test both ways, the bug-class audit, and DeepSpeed's own detector, each as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .. import fixstatus
from . import audit, launch, patched_copy, regression


def _after_root() -> Path | None:
    """The `after` DeepSpeed: the patched copy, or the installed one when it already has the fix."""
    package_dir, _ = fixstatus.installed_deepspeed()
    return (
        None
        if fixstatus.is_fixed(fixstatus.fix_status_of_package(package_dir))
        else patched_copy.prepare_patched_copy()
    )


def write_all(out: Path, log=print) -> None:
    package_dir, version = fixstatus.installed_deepspeed()
    after = _after_root()
    log("[checks] upstream regression test, installed and patched DeepSpeed ...")
    reg = {"before": regression.run_upstream_test(None), "after": regression.run_upstream_test(after)}
    _write(out / "regression.json", {v: {k: r[k] for k in r if k != "output_tail"} for v, r in reg.items()})
    log(f"[checks] regression test: before={reg['before']['outcome']} after={reg['after']['outcome']}")

    log("[checks] bug-class audit of the installed DeepSpeed ...")
    findings = audit.scan(package_dir)
    _write(out / "audit.json", {"deepspeed": version, "findings": [asdict(f) for f in findings]})

    log("[checks] enable_sanity_checks probe, 2 ranks ...")
    sanity = {}
    for variant, root in (("before", None), ("after", after)):
        try:
            sanity[variant] = launch.run_probe("repro.rank.sanity", out / f".sanity-{variant}.json", root)
        except launch.LaunchError as exc:
            sanity[variant] = {"error": str(exc)}
        (out / f".sanity-{variant}.json").unlink(missing_ok=True)
    _write(out / "sanity.json", sanity)


def _write(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
