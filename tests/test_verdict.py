from repro import verdict


def _result(qkv, patched, same_tokens=True, restored=True):
    native = [1, 2, 3]
    return {
        "qkv": {"max_abs": qkv},
        "patched": patched,
        "native_tokens": native,
        "he_tokens": native if same_tokens else [9, 2, 3],
        "native_first_token": 1,
        "he_first_token": 1 if same_tokens else 9,
        "first_mismatch": None if qkv == 0 else {"layer": 0, "module": "attention", "max_abs": 1.0},
        "cycles": {"requested": 2, "completed": 2, "restored_exactly": restored, "he_matches_native_after": True},
    }


def _with_verdict(r):
    r["verdict"] = verdict.of_variant(r)
    return r


def test_expected_pair_holds():
    s = verdict.summarize(_with_verdict(_result(0.5, False, False)), _with_verdict(_result(0.0, True)))
    assert s == {
        "bug_reproduced_before": True,
        "fixed_after": True,
        "expectation_held": True,
        "reason": "every variant that ran met its expectation",
    }


def test_installed_deepspeed_with_the_fix_is_named_as_the_reason():
    s = verdict.summarize(_with_verdict(_result(0.0, True)), None)
    assert not s["expectation_held"] and "already has the fix" in s["reason"]


def test_after_not_restoring_exactly_is_not_fixed():
    s = verdict.summarize(None, _with_verdict(_result(0.0, True, restored=False)))
    assert s["fixed_after"] is False and not s["expectation_held"]
    assert verdict.of_variant(_result(0.0, True, restored=False)).startswith("INCONCLUSIVE")


def test_after_without_the_fix_loaded_is_refused():
    s = verdict.summarize(None, _with_verdict(_result(0.0, False)))
    assert "did not load a fixed" in s["reason"]
