"""The upstream regression test proves the fix both ways: it fails on the installed DeepSpeed
for the right reason, and passes on the patched copy."""

from repro.host import patched_copy, regression


def test_upstream_test_fails_on_installed_deepspeed_for_the_right_reason():
    result = regression.run_upstream_test()
    assert result["outcome"] == "fail", result["output_tail"]
    assert result["failed_for_the_right_reason"], result["tests"]
    assert result["tests"]["test_transform_for_inference_persists_layout"] == "AssertionError"
    assert result["tests"]["test_gathered_parameters_use_modifier_rank"] == "AssertionError"


def test_upstream_test_passes_on_patched_deepspeed():
    result = regression.run_upstream_test(patched_copy.prepare_patched_copy())
    assert result["outcome"] == "pass", result["output_tail"]
    assert set(result["tests"].values()) == {"passed"} and len(result["tests"]) == 4


def test_an_import_error_is_not_counted_as_reproducing_the_bug(tmp_path):
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text("raise ImportError('broken deepspeed')\n")
    result = regression.run_upstream_test(tmp_path)
    assert result["outcome"] == "fail"
    assert not result["failed_for_the_right_reason"], result["tests"]
