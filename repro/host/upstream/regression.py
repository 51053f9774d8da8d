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

from ...options import EXIT_BROKEN, EXIT_EXPECTATION, EXIT_OK
from ...paths import REPO_ROOT, write_json
from .. import launch

UPSTREAM_DIR = REPO_ROOT / "tests" / "upstream"
# The upstream-style tests of each patch (repro/patches/<number>-*.patch): each fails on released
# DeepSpeed on its assertions and passes with its patch.
TESTS_BY_PATCH = {
    "0000": ("unit/module_inject/test_gptneox_hidden_heads.py",),
    "0001": ("unit/hybrid_engine/test_hybrid_megatron_zero3.py",),
    "0002": ("unit/hybrid_engine/test_hybrid_megatron_lora.py",),
    "0003": ("unit/hybrid_engine/test_hybrid_engine_lora_non_pinned.py",),
    "0004": ("unit/hybrid_engine/test_hybrid_megatron_call_order.py",),
    "0005": ("unit/module_inject/test_gptneox_sequential_residual.py",),
    "0006": ("unit/module_inject/test_gptneox_rotary_base.py",),
    "0007": ("unit/hybrid_engine/test_ds_attention_merge_qkv.py",),
    "0008": ("unit/module_inject/test_llama_layer_return.py",),
    "0009": ("unit/hybrid_engine/test_llama_internlm_lora.py",),
    "0010": ("unit/module_inject/test_llama_unservable_config.py",),
    "0011": ("unit/hybrid_engine/test_hybrid_engine_layer_norm_eps.py",),
    "0012": ("unit/hybrid_engine/test_hybrid_engine_tensor_parallel.py",),
    "0013": ("unit/hybrid_engine/test_hybrid_engine_without_containers.py",),
    "0014": ("unit/module_inject/test_gptneox_activation.py",),
    "0015": ("unit/module_inject/test_gptneox_attention_bias.py",),
    "0016": ("unit/module_inject/test_opt_activation.py",),
    "0017": ("unit/module_inject/test_opt_bias.py",),
    "0018": ("unit/ops/transformer/inference/test_ds_attention_is_prompt.py",),
    "0019": ("unit/module_inject/test_opt_post_layer_norm.py",),
    "0020": ("unit/ops/transformer/inference/test_ds_attention_post_layer_norm_bias.py",),
    "0021": ("unit/module_inject/test_gptneox_layer_class.py",),
    "0022": ("unit/hybrid_engine/test_hybrid_engine_layer_norm_without_weights.py",),
    "0023": ("unit/module_inject/test_opt_layer_norm_affine.py",),
    "0024": ("unit/module_inject/test_injected_layer_cache.py",),
    "0025": ("unit/hybrid_engine/test_hybrid_engine_tensor_parallel_copies.py",),
    "0026": ("unit/hybrid_engine/test_hybrid_engine_tensor_parallel_generate.py",),
    "0027": ("unit/hybrid_engine/test_hybrid_megatron_tensor_parallel.py",),
    "0028": ("unit/ops/transformer/inference/test_ds_attention_bool_mask.py",),
    "0029": ("unit/ops/transformer/inference/test_ds_attention_bloom_alibi.py",),
    "0030": ("unit/module_inject/test_gptj_activation.py",),
    "0031": ("unit/module_inject/test_bloom_residual.py",),
    "0032": ("unit/module_inject/test_bloom_tensor_parallel.py",),
    "0033": ("unit/hybrid_engine/test_hybrid_engine_tensor_parallel_mask.py",),
}
# Earlier patches of the series a patch's tests need beside it: 0004 reads the QKV layout record 0002 adds,
# and its ZeRO-3 cases show only once 0001 makes transforms persist; 0005/0006/0014/0015 build a GPT-NeoX
# container, which needs 0000 on current Transformers (0014/0015 edit gptneox.py beside 0006's lines); 0010's and
# 0024's hunks sit next to 0008's lines, 0017's next to 0016's and 0023's next to 0017's; 0020 relies on 0007's
# merge, which leaves no bias for a model without one; 0027 edits the HybridMegatron transforms 0001, 0002 and 0004
# rewrote.
PREREQUISITES = {
    "0004": ("0001", "0002"),
    "0005": ("0000",),
    "0006": ("0000",),
    "0010": ("0008",),
    "0014": ("0000", "0006"),
    "0015": ("0000", "0006", "0014"),
    "0017": ("0016",),
    "0020": ("0007",),
    "0023": ("0016", "0017"),
    "0024": ("0008",),
    "0027": ("0001", "0002", "0004"),
}
# A test's `pytest.raises` that saw nothing raised: the test's own check failed.
DID_NOT_RAISE = "DID NOT RAISE"
# Where the bug is an exception rather than a wrong value, that exception is the test's failure:
# GPTNeoXAttention has no hidden_size (0000), LlamaModel hands the next layer a tuple (0008), Llama's policy
# reads in_features, which DeepSpeed-Chat's LoRA modules lack (0009), engine.generate() finds no _generate (0013),
# the QKV layout transform reads the shape of a GPT-NeoX's missing QKV bias (0015), the OPT policy concatenates
# missing q/k/v biases (0017), the Hybrid Engine builds a LayerNorm of dim None for one without weights (0022),
# BLOOM's tensor-parallel QKV copy slices the wrong dimension, onto itself or off the shapes (0032).
BUG_ERRORS = {
    "0000": ("AttributeError",),
    "0008": ("AttributeError",),
    "0009": ("AttributeError",),
    "0013": ("AttributeError",),
    "0015": ("AttributeError",),
    "0017": ("TypeError",),
    "0022": ("TypeError",),
    "0032": ("RuntimeError",),
}


def run_upstream_test(
    deepspeed_root: Path | None = None,
    timeout_s: float = 300,
    tests: tuple[str, ...] = TESTS_BY_PATCH["0001"],
    bug_errors: tuple[str, ...] = (),
) -> dict:
    """Runs `tests` (default: the #8391 ones) in a fresh interpreter; `deepspeed_root` (a dir holding
    `deepspeed/`) goes first on PYTHONPATH. A failure counts as the bug when it is one of the tests' own
    assertions or one of `bug_errors`."""
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
    failed = {name: kind for name, kind in cases.items() if kind != "passed"}
    passed = returncode == 0 and bool(cases) and not failed
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


def _cases(xml: Path) -> dict[str, str]:
    """test name -> "passed", or the failure/error type (AssertionError, ImportError, ...)."""
    cases = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        name = _case_name(case)
        if name in cases:  # the same test name in another file (the series' tests in one run): keep both
            name = f"{case.get('classname', '?')}::{name}"
        cases[name] = "passed" if problem is None else _exception_type(problem)
    return cases


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
        write_json(json_path, {k: v for k, v in result.items() if k != "output_tail"})
    if code == EXIT_BROKEN:
        print(result["output_tail"], file=sys.stderr)
    return code
