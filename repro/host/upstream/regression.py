"""Runs the upstream regression tests (tests/upstream/) against a DeepSpeed and says how they ended.

tests/upstream/ mirrors a DeepSpeed checkout's tests/: each test file sits at the path its patch adds it under
(unit/...), and unit/common.py is our stand-in for DeepSpeed's DistributedTest harness (not in the PyPI
package). Used by our suite and by `invoke test --in-image`: the expected pair is fail (the DeepSpeed without
the patch) then pass (with it), and a failure only counts when it is an assertion of the test itself, or the
bug's own exception where that is the bug (BUG_ERRORS), never an import, collection or harness error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

from ... import findings
from ... import results as result_files
from ...options import EXIT_BROKEN, EXIT_EXPECTATION, EXIT_OK
from ...paths import REPO_ROOT
from .. import launch

UPSTREAM_DIR = REPO_ROOT / "tests" / "upstream"
# The upstream-style tests of each patch (repro/patches/<number>-*.patch), the earlier patches of the series each
# one's tests need beside it, and where the bug is an exception rather than a wrong value, that exception (the
# test's failure): all from the findings registry (repro.findings.registry, which says why for each).
TESTS_BY_PATCH = {f.patch: f.tests for f in findings.FINDINGS}
PREREQUISITES = {p: findings.needs_of(p) for p in findings.SERIES if findings.needs_of(p)}
BUG_ERRORS = {f.patch: f.bug_errors for f in findings.FINDINGS if f.bug_errors}
# The Transformers a patch's tests are proven on, where it is not the pinned one (its model injected only there).
TESTS_ON = {f.patch: f.tests_on for f in findings.FINDINGS if f.tests_on}
SKIPPED = "skipped"  # a test that skipped itself: neither passed nor failed, and never the proof of anything
NOT_FAILED = ("passed", SKIPPED)
# A test's `pytest.raises` that saw nothing raised: the test's own check failed.
DID_NOT_RAISE = "DID NOT RAISE"
# The #8391 test of the layout, run by default (`python -m repro regression`, `invoke test --in-image`); the finding's
# end-to-end test runs the injected layers, which on a CPU image need DeepSpeed's fallbacks completed first.
TESTS_8391 = ("unit/hybrid_engine/test_hybrid_megatron_zero3.py",)


def run_upstream_test(
    deepspeed_root: Path | None = None,
    timeout_s: float = 300,
    tests: tuple[str, ...] = TESTS_8391,
    bug_errors: tuple[str, ...] = (),
) -> dict:
    """Runs `tests` (default: the #8391 ones) in a fresh interpreter; `deepspeed_root` (a dir holding
    `deepspeed/`) goes first on PYTHONPATH. A failure counts as the bug when it is one of the tests' own
    assertions or one of `bug_errors`."""
    ran = _pytest(deepspeed_root, timeout_s, tests)
    if isinstance(ran, dict):
        return ran
    returncode, cases, output = ran
    return _result(returncode, _keyed(cases), output, bug_errors)


def run_batch(deepspeed_root: Path | None, patches: tuple[str, ...], timeout_s: float = 900) -> dict[str, dict]:
    """The upstream tests of several patches in one pytest on one build (one interpreter start, one DeepSpeed
    import), each patch's result as `run_upstream_test` gives it, read from its own test files' cases only: a
    patch whose files ran no test has none, and never passes."""
    tests = tuple(dict.fromkeys(t for p in patches for t in TESTS_BY_PATCH[p]))
    ran = _pytest(deepspeed_root, timeout_s, tests)
    if isinstance(ran, dict):
        return {p: ran for p in patches}
    returncode, cases, output = ran
    results = {}
    for p in patches:
        modules = {_module_of(t) for t in TESTS_BY_PATCH[p]}
        own = _keyed([c for c in cases if c[0] in modules])
        # pytest's own status is the batch's; the patch's is its cases' (1 when one of them did not pass)
        code = 0 if _passed(own) else max(returncode, 1)
        results[p] = _result(code, own, output, BUG_ERRORS.get(p, ()))
    return results


def jobs_by_build() -> dict[tuple[tuple[str, ...], str | None], tuple[str, ...]]:
    """Each (build, Transformers) the per-patch proofs run on -> the patches whose tests run there: a patch's tests
    run on its prerequisites alone (where they must fail) and with the patch (where they must pass), on its
    Transformers (TESTS_ON; None: the pinned one), so one build serves one patch's failure and another's pass, and
    the builds of patches without prerequisites are one per Transformers."""
    jobs: dict[tuple[tuple[str, ...], str | None], list[str]] = {}
    for number in TESTS_BY_PATCH:
        before = tuple(sorted(PREREQUISITES.get(number, ())))
        for build in (before, tuple(sorted((*before, number)))):
            jobs.setdefault((build, TESTS_ON.get(number)), []).append(number)
    order = sorted(jobs.items(), key=lambda kv: (kv[0][1] or "", len(kv[0][0]), kv[0][0]))
    return {job: tuple(numbers) for job, numbers in order}


def _pytest(
    deepspeed_root: Path | None, timeout_s: float, tests: tuple[str, ...]
) -> tuple[int, list[Case], str] | dict:
    """pytest on `tests`: its exit status, its cases (module, name, outcome) and its output; or a broken result."""
    # One OpenMP thread: the ranks are forked from pytest (tests/upstream/unit/common.py), and a rank forked after
    # pytest ran a parallel torch op waits forever in libgomp (gomp_team_barrier_wait_end: seen with the 46 tests
    # in one pytest, two ranks stuck from the 13th second).
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    if deepspeed_root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(deepspeed_root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [
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
    ]
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        try:
            returncode, output = _run_pytest([*cmd, f"--junitxml={xml}", *(str(UPSTREAM_DIR / t) for t in tests)],
                                             env, timeout_s)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            return _broken(f"pytest did not finish within {timeout_s:.0f} s", exc.output or "")
        try:
            cases = _cases(xml)
        except (OSError, ET.ParseError) as exc:
            return _broken(f"pytest's junit result cannot be read ({type(exc).__name__}: {exc})", output)
    return returncode, cases, output


def failures(cases: dict[str, str]) -> dict[str, str]:
    """The cases that failed or errored (a skipped case did neither), with how."""
    return {name: kind for name, kind in cases.items() if kind not in NOT_FAILED}


def _passed(cases: dict[str, str]) -> bool:
    """Every case passed or skipped itself, and at least one passed: tests that all skipped prove nothing."""
    return any(kind == "passed" for kind in cases.values()) and not failures(cases)


def _result(returncode: int, cases: dict[str, str], output: str, bug_errors: tuple[str, ...]) -> dict:
    failed = failures(cases)
    passed = returncode == 0 and _passed(cases)
    return {
        "outcome": "pass" if passed else "fail",
        "exit_code": returncode,
        "tests": cases,
        "failed_for_the_right_reason": bool(failed)
        and all(kind in {"AssertionError", DID_NOT_RAISE, *bug_errors} for kind in failed.values()),
        "output_tail": output[-2000:],
    }


def _run_pytest(argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """pytest's exit status and output, bounded: a timeout (TimeoutExpired, with the output so far) or Ctrl-C
    stops pytest and every rank process it forked, not pytest alone."""
    return launch.run_bounded(argv, env, UPSTREAM_DIR, timeout_s)


def _broken(why: str, output: str) -> dict:
    """A run of the tests that proves nothing either way."""
    return {
        "outcome": "broken",
        "exit_code": None,
        "tests": {},
        "failed_for_the_right_reason": False,
        "error": why,
        "output_tail": output[-2000:],
    }


class Case(NamedTuple):
    """A test case: its module (`unit.hybrid_engine.test_x`), its name, "passed", "skipped" or the failure/error type
    (AssertionError, ImportError, ...), and why it skipped (its skip message)."""

    module: str
    name: str
    outcome: str
    reason: str = ""


def _cases(xml: Path) -> list[Case]:
    cases = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        classname = case.get("classname", "?")
        module = classname.rsplit(".", 1)[0] if classname.rsplit(".", 1)[-1].startswith("Test") else classname
        skipped = case.find("skipped")
        kind = SKIPPED if skipped is not None else "passed"
        reason = "" if skipped is None else _skip_reason(skipped)
        cases.append(Case(module, _case_name(case), kind if problem is None else _exception_type(problem), reason))
    return cases


def _skip_reason(skipped: ET.Element) -> str:
    """A skip's message; for a module skipped whole (junit's "collection skipped"), the reason its text carries:
    `('path', line, 'Skipped: REASON')`."""
    message = skipped.get("message", "")
    found = re.search(r"'Skipped: (.*)'\)$", (skipped.text or "").strip()) if message == "collection skipped" else None
    return found.group(1) if found else message


def run_cases(deepspeed_root: Path | None, timeout_s: float, tests: tuple[str, ...]) -> list[Case] | dict:
    """Every case of `tests` in one pytest on a build, each with its outcome and skip message; or a broken result
    (`run_upstream_test`'s form) when pytest did not run to its end."""
    ran = _pytest(deepspeed_root, timeout_s, tests)
    return ran if isinstance(ran, dict) else ran[1]


def _keyed(cases: list[Case]) -> dict[str, str]:
    """test name -> outcome; the same test name in another file (the series' tests in one run) is kept twice,
    the second under its module's name."""
    keyed: dict[str, str] = {}
    for module, name, kind, _ in cases:
        keyed[f"{module}::{name}" if name in keyed else name] = kind
    return keyed


def _module_of(test: str) -> str:
    """`unit/hybrid_engine/test_x.py` (or `...py::TestX`) -> `unit.hybrid_engine.test_x`, as junit names it."""
    return test.split("::", 1)[0].removesuffix(".py").replace("/", ".")


def _case_name(case: ET.Element) -> str:
    """The test's name, with its class where it has one (`TestX::test_y[p]`): a DistributedTest method may share
    its name with a module-level test of the same file."""
    owner = case.get("classname", "").rsplit(".", 1)[-1]
    name = case.get("name", "?")
    return f"{owner}::{name}" if owner.startswith("Test") else name


def _exception_type(problem: ET.Element) -> str:
    """The exception pytest reported ("E   SomeError: ..." lines), or the junit tag if none. An AssertionError
    raised outside a test file (DeepSpeed's own config checks assert too) is not the test's: it reads
    "AssertionError in <file>"."""
    text = problem.text or ""
    found = re.findall(r"^E\s+(\w+(?:Error|Exception))\b", text, re.MULTILINE)
    if not found:
        if re.search(r"^E\s+Failed: DID NOT RAISE", text, re.MULTILINE):
            return DID_NOT_RAISE
        return "AssertionError" if (problem.get("message") or "").startswith("assert") else problem.tag
    if found[-1] == "AssertionError":
        raised_in = _raising_file(text)
        if raised_in is not None and not Path(raised_in).name.startswith("test_"):
            return f"AssertionError in {Path(raised_in).name}"
    return found[-1]


def _raising_file(text: str) -> str | None:
    """The file the failure was raised in: for a DistributedTest, the last frame of the rank's traceback
    (unit/common.py re-raises it in the parent), else pytest's last "path:line: Error" location."""
    if "raised in rank" in text:
        frames = re.findall(r'File "([^"]+)", line \d+', text)
        return frames[-1] if frames else None
    locations = re.findall(r"^(\S+\.py):\d+: \w+", text, re.MULTILINE)
    return locations[-1] if locations else None


def outcome_code(result: dict) -> int:
    """0 passed; 1 failed on its assertions only (the bug is present); 3 anything else (nothing proven)."""
    if result["outcome"] == "pass":
        return EXIT_OK
    if result["outcome"] == "fail" and result["failed_for_the_right_reason"]:
        return EXIT_EXPECTATION
    return EXIT_BROKEN


def proof(before: dict | None, after: dict | None) -> str | None:
    """None when the pair proves the fix: the same tests ran both ways, every one that failed `before`
    failed on an assertion (at least one did), and all passed `after`. Else why not, in one line."""
    if before is None or after is None:
        return f"no result from {'`before`' if before is None else '`after`'} (the test did not run or wrote nothing)"
    for name, r in (("before", before), ("after", after)):
        if r.get("outcome") == "broken" or not r.get("tests"):
            return f"`{name}` proved nothing: {r.get('error') or 'no test ran'}"
    if set(before["tests"]) != set(after["tests"]):
        return f"different tests ran: before {sorted(before['tests'])}, after {sorted(after['tests'])}"
    if before["outcome"] != "fail" or not before["failed_for_the_right_reason"]:
        return f"`before` did not fail on its assertions: {before['tests']}"
    if after["outcome"] != "pass":
        return f"`after` did not pass: {after['tests']}"
    return None


def main(json_path: Path | None = None) -> int:
    """`python -m repro regression`: run inside an image by `invoke test --in-image`, which reads the JSON
    (each test's result), not only the exit status."""
    result = run_upstream_test(None)
    code = outcome_code(result)
    meaning = {0: "passed", 1: "failed on its assertions (bug present)", 3: "proved nothing"}[code]
    print(f"upstream regression test {meaning}: {result.get('error') or result['tests']}")
    if json_path is not None:
        result_files.write(json_path, {k: v for k, v in result.items() if k != "output_tail"})
    if code == EXIT_BROKEN:
        print(result["output_tail"], file=sys.stderr)
    return code
