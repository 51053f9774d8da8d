"""Which of each pull request's tests DeepSpeed's CPU workflow would run, and which it would skip and why
(`python -m repro.host.upstream.ci_coverage OUT`). DeepSpeed's `cpu-torch-latest` job runs `pytest --forked -n 4
unit/` on a CPU runner with Transformers from git main. Here: every pull request's tests in one pytest on DeepSpeed
0.19.8 with the whole series, on the newest Transformers release (git main cannot be installed here), twice: with the
pull requests outside the series (the PyTorch fallbacks completed: the CPU runner once they are merged) and without
them (the runner as DeepSpeed is today, where a test of the injected layers must skip on its guard, not fail). Writes
OUT/ci-coverage.json; each PR.md renders its part. CPU evidence: nothing here says what a GPU runner does."""

from __future__ import annotations

import sys
import time

from ... import findings
from ...findings.prs import OUTSIDE_SERIES, PRS, directory, test_files
from ..envs import transformers_env
from . import cost_run, patched_copy, regression
from .ci_coverage_report import UNATTRIBUTED, WITH, WITHOUT, section

NEWEST = "5.25.0"  # the newest Transformers release the suite pins (constraints/transformers-5.25.0.txt)


def measure(timeout_s: float = 1800) -> dict:
    tests = tuple(dict.fromkeys(t for pr in PRS for t in test_files(pr)))
    overlay = transformers_env.overlay(NEWEST)
    builds = {}
    for build, environment in ((WITH, True), (WITHOUT, False)):
        root = patched_copy.prepare_patched_copy(patches=findings.SERIES, environment=environment)
        started = time.time()
        cases = regression.run_cases(transformers_env.joined(root, overlay), timeout_s, tests)
        if isinstance(cases, dict):
            raise RuntimeError(f"{build}: {cases.get('error')}: {cases.get('output_tail', '')[-800:]}")
        files: dict[str, dict[str, list[str]]] = {t: {} for t in tests}
        by_module = {regression._module_of(t): t for t in tests}
        for case in cases:  # a file pytest could not collect comes back under its module's name, no class
            test = by_module.get(case.module) or by_module.get(case.name) or UNATTRIBUTED
            files.setdefault(test, {})[case.name] = [case.outcome, case.reason]
        builds[build] = {"duration_s": round(time.time() - started, 1), "tests": files}
    return {
        "deepspeed": "0.19.8",
        "transformers": NEWEST,
        "evidence": "CPU (gloo, 2 cores); DeepSpeed's CI installs Transformers from git main, not run here",
        "outside_series": [directory(pr) for pr in OUTSIDE_SERIES],
        "builds": builds,
    }


def render(result: dict) -> str:
    return "\n\n".join(f"{directory(pr)}: {section(result, pr)}" for pr in PRS)


def main(argv: list[str]) -> int:
    return cost_run.main(argv, "repro.host.upstream.ci_coverage", "ci-coverage", measure, render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
