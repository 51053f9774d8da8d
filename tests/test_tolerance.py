"""Tolerances per dtype: one table for the probe and the diagnosis, fp32 by default (older results)."""

import pytest

from repro import tolerance


def test_every_dtype_has_both_tolerances_and_fp32_is_the_default():
    assert set(tolerance.LOGITS) == set(tolerance.WEIGHTS) == set(tolerance.DTYPES)
    assert tolerance.logits(None) == tolerance.logits("fp32") == 1e-3
    assert tolerance.weights(None) == tolerance.weights("fp32") == 1e-5


def test_a_lower_precision_is_never_held_to_less_than_fp32():
    for dtype in tolerance.DTYPES:
        assert tolerance.logits(dtype) >= tolerance.logits("fp32")
        assert tolerance.weights(dtype) >= tolerance.weights("fp32")


def test_an_unknown_dtype_is_an_error_not_a_default():
    with pytest.raises(KeyError):
        tolerance.logits("fp8")
