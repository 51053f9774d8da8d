"""Runs the upstream regression tests (tests/upstream/) against a DeepSpeed and says how they ended.

Used by our suite and by `invoke test --in-image`: the expected pair is fail (installed DeepSpeed)
then pass (patched copy), and a failure only counts when it is an assertion about the layout or
the modifier rank, not an import or collection error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from ..paths import REPO_ROOT

UPSTREAM_DIR = REPO_ROOT / "tests" / "upstream"
# The upstream-style tests of each patch (repro/patches/<number>-*.patch): each fails on released
# DeepSpeed on its assertions and passes with its patch.
TESTS_BY_PATCH = {
    "0001": ("test_hybrid_megatron_zero3.py", "test_hybrid_megatron_zero3_partitions.py"),
    "0002": ("test_hybrid_megatron_lora.py",),
    "0003": ("test_hybrid_engine_lora_non_pinned.py",),
}


def run_upstream_test(
    deepspeed_root: Path | None = None, timeout_s: float = 300, tests: tuple[str, ...] = TESTS_BY_PATCH["0001"]
) -> dict:
    """Runs `tests` (default: the #8391 ones) in a fresh interpreter; `deepspeed_root` (a dir holding
    `deepspeed/`) goes first on PYTHONPATH."""
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    if deepspeed_root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(deepspeed_root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "repro.rank.lifecycle",  # skips DeepSpeed's JIT-built CPU comm op (no compile at container start)
                "--rootdir",
                str(UPSTREAM_DIR),
                f"--junitxml={xml}",
                *(str(UPSTREAM_DIR / t) for t in tests),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=UPSTREAM_DIR,
        )
        cases = _cases(xml) if xml.exists() else {}
    failed = {name: kind for name, kind in cases.items() if kind != "passed"}
    return {
        "outcome": "pass" if proc.returncode == 0 else "fail",
        "exit_code": proc.returncode,
        "tests": cases,
        "failed_for_the_right_reason": bool(failed) and all(kind == "AssertionError" for kind in failed.values()),
        "output_tail": proc.stdout[-2000:],
    }


def _cases(xml: Path) -> dict[str, str]:
    """test name -> "passed", or the failure/error type (AssertionError, ImportError, ...)."""
    cases = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        cases[case.get("name", "?")] = "passed" if problem is None else _exception_type(problem)
    return cases


def _exception_type(problem: ET.Element) -> str:
    """The exception pytest reported ("E   SomeError: ..." lines), or the junit tag if none."""
    found = re.findall(r"^E\s+(\w+(?:Error|Exception))\b", problem.text or "", re.MULTILINE)
    if found:
        return found[-1]
    return "AssertionError" if (problem.get("message") or "").startswith("assert") else problem.tag


def outcome_code(result: dict) -> int:
    """0 passed; 1 failed on its assertions only (the bug is present); 3 failed for another reason."""
    if result["outcome"] == "pass":
        return 0
    return 1 if result["failed_for_the_right_reason"] else 3


def main() -> int:
    """`python -m repro regression`: run inside an image by `invoke test --in-image`."""
    result = run_upstream_test(None)
    code = outcome_code(result)
    meaning = {0: "passed", 1: "failed on its assertions (bug present)", 3: "failed for another reason"}[code]
    print(f"upstream regression test {meaning}: {result['tests']}")
    if code == 3:
        print(result["output_tail"], file=sys.stderr)
    return code
