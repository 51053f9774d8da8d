"""Verdicts: decisive evidence (QKV exact, bitwise restore, first token) and the near-tie rule, both ways."""

import pytest

from repro import verdict


def _result(qkv=0.0, patched=True, he=(1, 2, 3), dtype="fp32", margins=(5.0, 5.0, 5.0), top1=(10.0, 10.0, 10.0)):
    native = [1, 2, 3]
    he = list(he)
    first = next((i for i, (a, b) in enumerate(zip(native, he, strict=True)) if a != b), None)
    return {
        "qkv": {"max_abs": qkv},
        "patched": patched,
        "dtype": dtype,
        "backend": "cpu",
        "native_tokens": native,
        "he_tokens": he,
        "native_first_token": native[0],
        "he_first_token": he[0],
        "first_divergent_token": first,
        "native_margins": list(margins),
        "native_top1_logits": list(top1),
        "first_mismatch": None if qkv == 0 else {"layer": 0, "module": "attention", "max_abs": 1.0},
        "kernel_paths": {"compiled_op": "missing", "compiled_op_error": "cpu"},
        "cycles": {
            "requested": 2,
            "completed": 2,
            "stopped_early": None,
            "restored_exactly": True,
            "he_matches_native_after": True,
            "first_divergent_token_after": None,
        },
    }


def _with_verdict(r):
    r["verdict"] = verdict.of_variant(r)
    return r


def test_expected_pair_holds():
    s = verdict.summarize(_with_verdict(_result(0.5, False, he=(9, 2, 3))), _with_verdict(_result()))
    assert s == {
        "bug_reproduced_before": True,
        "fixed_after": True,
        "expectation_held": True,
        "reason": "every variant that ran met its expectation",
    }


def test_installed_deepspeed_with_the_fix_is_named_as_the_reason():
    s = verdict.summarize(_with_verdict(_result()), None)
    assert not s["expectation_held"] and "already has the fix" in s["reason"]


def test_after_not_restoring_exactly_is_not_fixed():
    r = _result()
    r["cycles"]["restored_exactly"] = False
    s = verdict.summarize(None, _with_verdict(r))
    assert s["fixed_after"] is False and not s["expectation_held"]
    assert r["verdict"].startswith("INCONCLUSIVE") and "not restored bitwise" in r["verdict"]


def test_after_without_the_fix_loaded_is_refused():
    s = verdict.summarize(None, _with_verdict(_result(patched=False)))
    assert "did not load a fixed" in s["reason"]


def test_cycles_that_stopped_early_are_not_fixed():
    r = _result()
    r["cycles"].update(completed=1, stopped_early="cycle 2: RuntimeError: boom")
    assert "1/2 cycles (cycle 2: RuntimeError: boom)" in verdict.of_variant(r)
    assert not verdict.fixed(r)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_later_near_tie_flip_in_low_precision_is_accepted_and_named(dtype):
    r = _result(he=(1, 7, 8), dtype=dtype, margins=(5.0, 0.01, 3.0), top1=(12.0, 12.0, 12.0))
    assert verdict.fixed(r)
    assert "near-tie" in verdict.of_variant(r) and verdict.of_variant(r).startswith("CORRECT")


def test_a_later_flip_with_a_clear_margin_fails():
    r = _result(he=(1, 7, 8), dtype="bf16", margins=(5.0, 2.0, 3.0), top1=(12.0, 12.0, 12.0))
    assert not verdict.fixed(r)
    assert "token 1 differs with native margin 2" in verdict.of_variant(r)


def test_a_first_token_flip_is_never_a_near_tie():
    r = _result(he=(9, 2, 3), dtype="bf16", margins=(1e-6, 5.0, 5.0))
    assert not verdict.fixed(r) and "first token differs" in verdict.of_variant(r)


def test_a_layout_error_never_passes_as_a_near_tie():
    r = _result(qkv=0.125, patched=False, he=(1, 7, 8), dtype="bf16", margins=(5.0, 0.001, 5.0))
    assert verdict.bug_reproduced(r) and not verdict.fixed(r)
    assert verdict.of_variant(r).startswith("BUG REPRODUCED")


def test_fp32_leaves_no_room_for_near_ties():
    r = _result(he=(1, 7, 8), dtype="fp32", margins=(5.0, 0.01, 3.0))
    assert not verdict.fixed(r)


def test_compiled_op_missing_on_a_gpu_in_fp16_invalidates_the_run():
    r = _result(dtype="fp16")
    r["backend"] = "rocm"
    assert verdict.of_variant(r).startswith("INVALID") and not verdict.fixed(r)
    s = verdict.summarize(None, _with_verdict(r))
    assert "`after` is invalid: compiled transformer_inference op failed to load" in s["reason"]
    r["dtype"] = "bf16"  # DeepSpeed >= 0.18.4 has no bf16 kernels on ROCm: fallbacks are expected
    assert verdict.fixed(r)
