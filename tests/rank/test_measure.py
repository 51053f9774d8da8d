import math

import pytest
import torch

from repro.rank import layout, measure


def test_qkv_report_is_zero_for_identical_and_positive_otherwise():
    w, b = torch.randn(12, 4), torch.randn(12)
    assert measure.qkv_report([(w, b)], [(w.clone(), b.clone())], [(w + 1, b)])["max_abs"] == 0
    report = measure.qkv_report([(w, b)], [(w + 1, b)], [(w, b)])
    assert report["max_abs"] == pytest.approx(1, abs=1e-5)
    assert report["per_layer"][0]["weight_max_abs"] == report["max_abs"]
    assert report["per_layer"][0]["bias_max_abs"] == 0
    assert report["mean_abs"] == pytest.approx(48 / 60, abs=1e-5)


def test_qkv_report_says_which_layout_is_held_bitwise():
    training = (torch.randn(12, 4), torch.randn(12))
    inference = (layout.to_inference(training[0], 2), layout.to_inference(training[1], 2))
    held_training = measure.qkv_report([training], [inference], [training])
    assert held_training["equals_training_layout"] and not held_training["equals_inference_layout"]
    assert held_training["layouts_differ"] and held_training["training_max_abs"] == 0 and held_training["finite"]
    held_inference = measure.qkv_report([inference], [inference], [training])
    assert held_inference["equals_inference_layout"] and not held_inference["equals_training_layout"]
    garbage = (training[0] * 1e28, training[1])
    neither = measure.qkv_report([garbage], [inference], [training])
    assert not neither["equals_inference_layout"] and not neither["equals_training_layout"]


def test_nan_in_qkv_is_never_exact():
    w, b = torch.randn(12, 4), torch.randn(12)
    nan_w = w.clone()
    nan_w[3, 1] = float("nan")
    report = measure.qkv_report([(nan_w, b)], [(w, b)], [(w, b)])
    assert math.isnan(report["max_abs"]) and not report["finite"]
    assert not report["equals_inference_layout"] and not report["equals_training_layout"]


def test_worst_propagates_nan_where_max_would_hide_it():
    assert max(0.0, math.nan) == 0.0  # why `worst` exists
    assert math.isnan(measure.worst([0.0, math.nan, 1.0])) and measure.worst([0.5, 2.0]) == 2.0


def test_digest_tracks_bits_not_values():
    x = torch.tensor([0.0, 1.0])
    assert measure.digest(x) == measure.digest(x.clone())
    assert measure.digest(x) != measure.digest(torch.tensor([-0.0, 1.0]))


def test_first_mismatch_attributes_module_and_respects_dtype_tolerance():
    native, he = measure.Trace(), measure.Trace()
    for i in range(3):
        native.attention[i] = native.layer[i] = torch.ones(2, 4)
        he.attention[i] = he.layer[i] = torch.ones(2, 4)
    assert measure.first_mismatch(native, he, "fp32") is None
    he.layer[1] = torch.ones(2, 4) + 0.01
    assert measure.first_mismatch(native, he, "bf16") is None
    found = measure.first_mismatch(native, he, "fp32")
    assert (found["layer"], found["module"]) == (1, "mlp") and found["max_abs"] == pytest.approx(0.01, abs=1e-6)
    he.attention[0] = torch.zeros(2, 4)
    assert measure.first_mismatch(native, he, "fp32")["layer"] == 0
    assert measure.first_mismatch(native, he, "fp32")["module"] == "attention"


def test_first_divergent_index():
    assert measure.first_divergent_index([1, 2, 3], [1, 2, 3]) is None
    assert measure.first_divergent_index([1, 2, 3], [1, 5, 3]) == 1


def test_spilled_tensors_come_back_bitwise_and_keep_no_copy_in_memory():
    originals = {"a": torch.randn(4, 3), "b": torch.arange(5.0)}
    spilled = measure.SpilledTensors(originals.items())
    assert set(spilled) == {"a", "b"} and len(spilled) == 2
    for name, t in originals.items():
        assert torch.equal(spilled[name], t)
    assert not hasattr(spilled, "_tensors")  # what it holds is file names, not tensors
