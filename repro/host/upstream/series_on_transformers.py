"""The whole series' upstream tests on other Transformers: `python -m repro.host.upstream.series_on_transformers
5.25.0 5.0.0` runs every patch's tests, in one pytest per version, on DeepSpeed 0.19.8 with the whole series and that
Transformers as an overlay (constraints/transformers-VERSION.txt). Exit 0 when every test passed on every version, 1
when one did not, 2 for a version the suite does not pin. The per-patch proofs (fails without, passes with) run on the
pinned Transformers, or where a finding's `tests_on` names another: `invoke test --proofs`."""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Callable

from ... import findings
from ...options import EXIT_USAGE
from ..envs import transformers_env
from . import patched_copy, regression


def tests_of_series() -> tuple[str, ...]:
    """Every patch's upstream test files, once, in the series' order."""
    return tuple(dict.fromkeys(t for p in findings.SERIES for t in regression.TESTS_BY_PATCH[p]))


def main(argv: list[str] | None = None, log: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro.host.upstream.series_on_transformers")
    parser.add_argument("versions", nargs="+", help="Transformers versions (the pinned one or a pinned overlay)")
    args = parser.parse_args(argv)
    try:
        overlays = {v: transformers_env.overlay(v) for v in args.versions}
    except transformers_env.OverlayError as exc:
        log(f"error: {exc}")
        return EXIT_USAGE
    # The pull requests outside the series first (DeepSpeed's PyTorch fallbacks completed): the end-to-end tests run
    # the injected layers on CPU, as the proofs do.
    root = patched_copy.prepare_patched_copy(patches=findings.SERIES, environment=True)
    tests, failed = tests_of_series(), 0
    for version, overlay in overlays.items():
        started = time.time()
        result = regression.run_upstream_test(transformers_env.joined(root, overlay), 1200, tests)
        counts = collections.Counter(result.get("tests", {}).values())
        patches, took = len(findings.SERIES), time.time() - started
        log(f"Transformers {version}: the {len(tests)} upstream test files of the whole series ({patches} patches on "
            f"the installed DeepSpeed): {dict(counts) or result.get('error')} ({took:.0f} s)")  # fmt: skip
        bad = regression.failures(result.get("tests", {}))
        failed += bool(bad) or not counts
        for name, status in bad.items():
            log(f"  {name}: {status}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
