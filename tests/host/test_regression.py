"""Each upstream-style regression test proves its patch both ways: it fails on the installed DeepSpeed
on its assertions (the bug), and passes with that patch alone; all pass with every patch applied."""

import pytest

from repro.host import patched_copy, regression

EXPECTED_FAILURES = {
    "0001": {
        "test_transform_for_inference_persists_layout",
        "test_transform_for_inference_persists_layout_on_partitions",
    },
    "0002": {"test_fuse_lora_after_transform_for_inference"},
    "0003": {"test_every_forward_sees_fused_lora", "test_unfuse_after_generate_restores_weights"},
}


@pytest.mark.parametrize("number", sorted(regression.TESTS_BY_PATCH))
def test_fails_on_installed_deepspeed_for_the_right_reason(number):
    result = regression.run_upstream_test(tests=regression.TESTS_BY_PATCH[number])
    assert result["outcome"] == "fail", result["output_tail"]
    assert result["failed_for_the_right_reason"], result["tests"]
    failed = {name for name, kind in result["tests"].items() if kind != "passed"}
    assert failed == EXPECTED_FAILURES[number], result["tests"]


@pytest.mark.parametrize("number", sorted(regression.TESTS_BY_PATCH))
def test_passes_with_its_own_patch_alone(number):
    root = patched_copy.prepare_patched_copy(patches=(number,))
    result = regression.run_upstream_test(root, tests=regression.TESTS_BY_PATCH[number])
    assert result["outcome"] == "pass", result["output_tail"]
    assert set(result["tests"].values()) == {"passed"}


def test_every_test_passes_with_all_patches_together():
    root = patched_copy.prepare_patched_copy(patches=tuple(sorted(regression.TESTS_BY_PATCH)))
    every = tuple(t for tests in regression.TESTS_BY_PATCH.values() for t in tests)
    result = regression.run_upstream_test(root, tests=every)
    assert result["outcome"] == "pass", result["output_tail"]
    assert len(result["tests"]) >= 8 and set(result["tests"].values()) == {"passed"}


def test_an_import_error_is_not_counted_as_reproducing_the_bug(tmp_path):
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text("raise ImportError('broken deepspeed')\n")
    result = regression.run_upstream_test(tmp_path)
    assert result["outcome"] == "fail"
    assert not result["failed_for_the_right_reason"], result["tests"]
    assert regression.outcome_code(result) == 3
