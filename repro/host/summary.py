"""`summary.json`: the pair judged once, from the variants' JSONs in a run directory.

Written by `python -m repro run` after its variants, and again on the host after a container run, whose
variants ran in one container each and could each see only their own half: the host is the one place
that sees both, so its judgement is the one the report and the exit status use.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .. import results as result_files
from .. import verdict
from ..options import VARIANTS
from .upstream import patched_copy


def read_variants(out: Path) -> dict[str, dict]:
    """The variants' JSONs present in `out` (an unreadable one counts as absent: never as a pass)."""
    results = {}
    for name in VARIANTS:
        path = out / f"{name}.json"
        if path.exists():
            try:
                results[name] = result_files.load(path)
            except (OSError, json.JSONDecodeError):
                continue
    return results


def write(
    out: Path,
    requested: list[str],
    *,
    command: str,
    options: dict,
    started: float | None = None,
    broken: str | None = None,
    interrupted: str | None = None,
    environment: str | None = None,
    keep: dict | None = None,
) -> dict:
    """Judges the pair from what `out` holds and writes `summary.json`; `keep`: fields of an earlier
    summary to carry over (its checks, say)."""
    results = read_variants(out)
    summary = {
        **(keep or {}),
        **verdict.judge(results, requested, broken=broken, interrupted=interrupted, environment=environment),
    }
    summary.update(
        command=command,
        requested_variants=requested,
        variants=sorted(results),
        error=broken or interrupted or environment,
        interrupted=interrupted is not None,
        options=options,
        wall_s=None if started is None else round(time.time() - started, 2),
        # the fix as a maintainer reads it (its pull request's commit): the series is derived from a DeepSpeed as
        # released, and the `after` image's DeepSpeed already carries it
        patch=patched_copy.patch_file(patched_copy.FIX_8391, patched_copy.COMMITTED).name,
        patch_text=patched_copy.patch_file(patched_copy.FIX_8391, patched_copy.COMMITTED).read_text(),
        environment=next((r.get("environment") for r in results.values()), None),
    )
    result_files.write(out / "summary.json", summary)
    return summary


def one_line(summary: dict) -> str:
    """What the user sees last: the outcome in capitals, then why."""
    return f"{summary['outcome'].upper()}: {summary['reason']}"
