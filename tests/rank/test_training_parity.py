"""The training-parity probe's comparisons on plain tensors: each kind of difference found, none where there is
none (repro.rank.training_parity)."""

import torch

from repro.rank import training_parity as tp


def state(grad=True, value=1.0, dtype=torch.float32, shape=(2, 2)) -> dict:
    return {"w": (grad, str(dtype), shape, torch.full(shape, value, dtype=dtype))}


def test_equal_states_differ_nowhere_and_each_difference_is_found():
    assert tp.differences(state(), state()) == []
    assert tp.differences(state(grad=False), state()) == [{"name": "w", "what": "requires_grad", "on": False,
                                                          "off": True}]  # fmt: skip
    assert tp.differences(state(value=1.5), state())[0] == {"name": "w", "what": "data", "max_abs": 0.5}
    assert tp.differences(state(shape=(4,)), state())[0]["what"] == "dtype/shape"
    assert tp.differences({}, state()) == [{"name": "w", "what": "missing"}]


def test_a_parameter_the_reference_step_moved_and_the_hybrid_engines_did_not_is_named():
    before = state()
    moved, kept = state(value=0.999), state()
    assert tp.step_differences(before, moved, before, moved) == {"moved_differently": [], "not_moved": []}
    found = tp.step_differences(before, kept, before, moved)
    assert found["not_moved"] == ["w"] and found["moved_differently"][0]["name"] == "w"
