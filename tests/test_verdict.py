"""The verdict rule: each outcome from positive evidence, each proven by a case that must not pass."""

import math

import pytest

from repro import verdict

_result = None


@pytest.fixture(autouse=True)
def _variant_factory(variant_json):
    """`_result(...)`: a variant's JSON (tests/conftest.py), the input every case below varies."""
    global _result
    _result = variant_json


def _with_verdict(r):
    r["verdict"] = verdict.of_variant(r)
    return r


def _pair(before=None, after=None):
    before = _with_verdict(before or _result("training", patched=False, he=(9, 2, 3)))
    after = _with_verdict(after or _result())
    return {"before": before, "after": after}


def test_expected_pair_holds():
    s = verdict.judge(_pair(), ["before", "after"])
    assert s["outcome"] == "held" and s["expectation_held"] and s["exit_status"] == 0
    assert s["variant_outcomes"] == {"before": "reproduced", "after": "correct"}
    assert s["bug_reproduced_before"] and s["fixed_after"] and s["world_size"] == [2]


def test_reproduced_needs_bitwise_the_training_layout():
    r = _result("training", patched=False, he=(9, 2, 3))
    assert verdict.outcome(r) == "reproduced"
    assert verdict.of_variant(r).startswith("BUG REPRODUCED") and "bitwise the training layout" in verdict.of_variant(
        r
    )


def test_qkv_that_is_neither_layout_is_corrupt_and_never_a_reproduction():
    """The race's unfilled gather buffers (QKV max abs 7.9e28) used to count as reproductions."""
    r = _result("neither", patched=False, he=(9, 2, 3))
    assert verdict.outcome(r) == "corrupt" and not verdict.bug_reproduced(r)
    assert "neither the training nor the inference layout" in verdict.of_variant(r)
    s = verdict.judge(_pair(before=r), ["before", "after"])
    assert s["outcome"] == "failed" and s["exit_status"] == 1 and s["bug_reproduced_before"] is False


def test_a_layout_identical_in_both_layouts_cannot_show_the_signature():
    r = _result("training", patched=False)
    r["qkv"]["layouts_differ"] = False  # e.g. one head: the permutation is the identity
    assert verdict.outcome(r) != "reproduced"


@pytest.mark.parametrize("variant_patched", [False, True])
def test_nan_qkv_is_corrupt_never_exact(variant_patched):
    r = _result("nan", patched=variant_patched)
    assert verdict.outcome(r) == "corrupt" and "QKV not finite" in verdict.of_variant(r)
    assert not verdict.fixed(r)


def test_nan_logits_are_corrupt_even_with_exact_qkv():
    r = _result()
    r["logits_max_abs"] = math.nan
    assert verdict.outcome(r) == "corrupt"


def test_a_json_without_the_layout_fields_is_invalid_not_judged():
    r = _result("training", patched=False)
    del r["qkv"]["equals_training_layout"]
    assert verdict.outcome(r) == "invalid" and "rerun" in verdict.of_variant(r)


def test_a_missing_variant_is_never_held():
    pair = _pair()
    s = verdict.judge({"after": pair["after"]}, ["before", "after"])
    assert s["outcome"] == "incomplete" and not s["expectation_held"] and s["exit_status"] == 1
    broken = verdict.judge({"after": pair["after"]}, ["before", "after"], broken="`before` container ended with 3")
    assert broken["outcome"] == "broken" and broken["exit_status"] == 3 and not broken["expectation_held"]


def test_one_variant_asked_for_answers_for_itself_but_the_pair_stays_unjudged():
    s = verdict.judge({"before": _pair()["before"]}, ["before"])
    assert s["outcome"] == "incomplete" and not s["expectation_held"] and s["exit_status"] == 0


def test_variants_that_are_not_a_pair_are_refused_with_the_field():
    pair = _pair()
    pair["after"]["dtype"] = "bf16"
    s = verdict.judge(pair, ["before", "after"])
    assert s["outcome"] == "mismatched" and s["exit_status"] == 2 and "--dtype ('fp32' vs 'bf16')" in s["reason"]
    pair = _pair()
    pair["after"]["weights_sha256"] = "other"
    assert "the model's weights" in verdict.judge(pair, ["before", "after"])["reason"]


def test_world_size_one_proves_nothing_about_the_bug():
    after = _result()
    after["world_size"] = 1
    s = verdict.judge({"after": _with_verdict(after)}, ["after"])
    assert s["outcome"] == "failed" and s["exit_status"] == 1 and "world size 1" in s["reason"]


def test_installed_deepspeed_with_the_fix_is_named_as_the_reason():
    s = verdict.judge({"before": _with_verdict(_result())}, ["before"])
    assert not s["expectation_held"] and "already has the fix" in s["reason"]


def test_after_not_restoring_exactly_is_wrong_not_fixed():
    r = _result()
    r["cycles"]["restored_exactly"] = False
    s = verdict.judge({"after": _with_verdict(r)}, ["after"])
    assert s["fixed_after"] is False and s["exit_status"] == 1
    assert r["verdict"].startswith("WRONG") and "not restored bitwise" in r["verdict"]


def test_after_without_the_fix_loaded_is_refused():
    s = verdict.judge({"after": _with_verdict(_result(patched=False))}, ["after"])
    assert "did not load a fixed" in s["reason"]


def test_cycles_that_stopped_early_are_not_fixed():
    r = _result()
    r["cycles"].update(completed=1, stopped_early="cycle 2: RuntimeError: boom")
    assert "1/2 cycles (cycle 2: RuntimeError: boom)" in verdict.of_variant(r)
    assert not verdict.fixed(r)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_later_near_tie_flip_in_low_precision_is_accepted_and_named(dtype):
    r = _result(he=(1, 7, 8), dtype=dtype, margins=(5.0, 0.01, 3.0), top1=(12.0, 12.0, 12.0))
    assert verdict.fixed(r) and verdict.outcome(r) == "near_tie"
    assert "near-tie" in verdict.of_variant(r) and verdict.of_variant(r).startswith("CORRECT UP TO NEAR-TIES")


def test_a_later_flip_with_a_clear_margin_fails():
    r = _result(he=(1, 7, 8), dtype="bf16", margins=(5.0, 2.0, 3.0), top1=(12.0, 12.0, 12.0))
    assert not verdict.fixed(r)
    assert "token 1 differs with native margin 2" in verdict.of_variant(r)


def test_a_first_token_flip_is_never_a_near_tie():
    r = _result(he=(9, 2, 3), dtype="bf16", margins=(1e-6, 5.0, 5.0))
    assert not verdict.fixed(r) and "first token differs" in verdict.of_variant(r)


def test_a_layout_error_never_passes_as_a_near_tie():
    r = _result("training", patched=False, he=(1, 7, 8), dtype="bf16", margins=(5.0, 0.001, 5.0))
    assert verdict.bug_reproduced(r) and not verdict.fixed(r)
    assert verdict.of_variant(r).startswith("BUG REPRODUCED")


def test_fp32_leaves_no_room_for_near_ties():
    r = _result(he=(1, 7, 8), dtype="fp32", margins=(5.0, 0.01, 3.0))
    assert not verdict.fixed(r)


def test_compiled_op_missing_on_a_gpu_in_fp16_invalidates_the_run():
    r = _result(dtype="fp16")
    r["backend"] = "rocm"
    assert verdict.of_variant(r).startswith("INVALID") and not verdict.fixed(r)
    s = verdict.judge({"after": _with_verdict(r)}, ["after"])
    assert "`after` is invalid" in s["reason"] and "compiled transformer_inference op failed to load" in s["reason"]
    r["dtype"] = "bf16"  # DeepSpeed >= 0.18.4 has no bf16 kernels on ROCm: fallbacks are expected
    assert verdict.fixed(r)


def test_interrupted_and_broken_take_precedence_over_any_judgement():
    assert verdict.judge(_pair(), ["before", "after"], interrupted="SIGTERM")["exit_status"] == 130
    assert verdict.judge(_pair(), ["before", "after"], broken="rank 1 hung")["exit_status"] == 3


def test_an_environment_error_mid_run_is_exit_2_and_never_judged():
    s = verdict.judge(_pair(), ["before", "after"], environment="0001 does not apply to DeepSpeed 9.9")
    assert s["outcome"] == "environment" and s["exit_status"] == 2 and not s["expectation_held"]
    assert verdict.judge({}, ["after"], interrupted="SIGINT", environment="x")["exit_status"] == 130
