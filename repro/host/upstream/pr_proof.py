"""Proves each pull request of repro/patches/prs/ alone on the installed DeepSpeed (0.19.8): its tests fail with
only what it requires and what its tests need applied (beneath()), each for its own reason, and pass with the pull
request on top (`python -m repro.host.upstream.pr_proof OUT` writes OUT/prs.json). Run on CPU with DeepSpeed's
PyTorch paths and our kernel stand-ins where a test needs a kernel: CPU evidence."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from ... import findings
from ... import results as result_files
from ...findings.prs import OUTSIDE_SERIES, PRS, PullRequest, directory, required, test_files, tested_with
from ..envs import transformers_env
from . import patched_copy, regression
from .pr_files import PRIMARY, pr_patches


class ProofError(RuntimeError):
    pass


def patched(dest: Path, patches: list[Path]) -> Path:
    """dest/deepspeed: the installed DeepSpeed with `patches` (their deepspeed/ part) applied in order."""
    package_dir, _ = patched_copy.installed_deepspeed()
    shutil.copytree(package_dir, dest / "deepspeed", ignore=shutil.ignore_patterns("__pycache__"))
    for patch in patches:
        done = patched_copy.run_patch([], dest, patch.read_text())
        if done.returncode != 0:
            raise ProofError(f"{patch.parent.name}/{patch.name} does not apply: {(done.stdout + done.stderr)[-400:]}")
    return dest


def transformers_of(pr: PullRequest) -> str | None:
    """The Transformers its findings' tests are proven on (their `tests_on`; None: the pinned one)."""
    on = sorted({findings.by_id(f).tests_on for f in pr.findings} - {None})
    if len(on) > 1:
        raise ProofError(f"{directory(pr)}: its findings' tests are proven on different Transformers ({on})")
    return on[0] if on else None


def beneath(pr: PullRequest) -> list[PullRequest]:
    """What a pull request's proof applies beneath it, in the table's order: what it requires, what only its tests
    need (tested_with), and DeepSpeed's PyTorch fallbacks completed (the pull requests outside the series: 01) even
    where it does not name them, so that a test that builds an injected layer runs on this CPU instead of skipping
    (its guard, inference_layers_available(), skips it where neither the compiled op nor the fallbacks build a
    layer, as on DeepSpeed's CPU runner)."""
    around = {*OUTSIDE_SERIES, *required(pr), *tested_with(pr)} - {pr}
    return [p for p in PRS if p in around]


def prove(pr: PullRequest, timeout_s: float = 900) -> dict:
    tests = test_files(pr)
    errors = tuple(e for f in pr.findings for e in findings.by_id(f).bug_errors) + pr.bug_errors
    environment = [e for e in beneath(pr) if e not in required(pr)]
    before = [p for needed in beneath(pr) for p in pr_patches(needed, PRIMARY)]
    version = transformers_of(pr)
    overlay = transformers_env.overlay(version) if version else None
    with tempfile.TemporaryDirectory() as tmp:
        started = time.time()
        roots = {
            name: transformers_env.joined(patched(Path(tmp) / name, patches), overlay, base=Path(tmp))
            for name, patches in (("without", before), ("with", before + pr_patches(pr, PRIMARY)))
        }
        without = regression.run_upstream_test(roots["without"], timeout_s, tests, errors)
        with_pr = regression.run_upstream_test(roots["with"], timeout_s, tests)
    failing = set(regression.failures(without["tests"]))
    return {
        "pr": directory(pr),
        "requires": [directory(p) for p in required(pr)],
        "environment": [directory(e) for e in environment],
        "tests": list(tests),
        "transformers": version or transformers_env.pinned(),
        "without": {"outcome": without["outcome"], "right_reason": without["failed_for_the_right_reason"],
                    "failed": sorted(failing), "passed": sum(k == "passed" for k in without["tests"].values())},
        "with": {"outcome": with_pr["outcome"], "passed": sum(k == "passed" for k in with_pr["tests"].values()),
                 "tests": len(with_pr["tests"])},
        "proven": without["outcome"] == "fail" and without["failed_for_the_right_reason"]
        and with_pr["outcome"] == "pass",
        "duration_s": round(time.time() - started, 1),
    }  # fmt: skip


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m repro.host.upstream.pr_proof OUT", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if (out / "prs.json").exists():
        print(f"error: {out / 'prs.json'} exists; choose another OUT", file=sys.stderr)
        return 2
    results = []
    for pr in PRS:
        try:
            result = prove(pr)
        except ProofError as exc:
            result = {"pr": directory(pr), "proven": False, "error": str(exc)}
        results.append(result)
        said = result.get("error") or f"{result['without']['outcome']} without, {result['with']['outcome']} with"
        print(f"{result['pr']}: {'proven' if result['proven'] else 'NOT proven'} ({said})")
    out.mkdir(parents=True, exist_ok=True)
    result_files.write(out / "prs.json", {"deepspeed": PRIMARY, "evidence": "CPU", "prs": results})
    return 0 if all(r["proven"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
