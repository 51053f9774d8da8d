"""The Hybrid Engine failure records (repro.rank.he_faults), on plain modules: each must be able to fail."""

import math
import types

import pytest
import torch

from repro.rank import he_faults


class Gemm(torch.nn.Module):
    def forward(self, input=None, weight=None, bias=None):
        return input


def container(qkvb=None, qb=None) -> types.SimpleNamespace:
    attention = torch.nn.Module()
    attention.qkv_func = Gemm()
    attention.attn_qkvb, attention.attn_qb = qkvb, qb
    return types.SimpleNamespace(module=types.SimpleNamespace(attention=attention))


def call(c, bias):
    c.module.attention.qkv_func(input=torch.ones(1), weight=torch.ones(1), bias=bias)


def test_a_bias_handed_to_a_bias_free_models_qkv_gemm_is_recorded_nan_included():
    c = container()
    probe = he_faults.QkvBiasProbe([c])
    call(c, torch.tensor([1.0, -3.0]))
    call(c, torch.tensor([math.nan]))
    assert probe.remove()["calls"] == 2 and math.isnan(probe.remove()["max_abs"])
    assert probe.shapes() == {"qkv_weight_shapes": [[1]], "split_qkv_weight_shapes": []}
    call(c, torch.tensor([5.0]))  # removed: no longer recorded
    assert probe.calls == 2


@pytest.mark.parametrize("held", ["qkvb", "qb"])
def test_a_model_with_qkv_bias_or_no_bias_handed_is_not_recorded(held):
    c = container(**{held: torch.zeros(3)})
    probe = he_faults.QkvBiasProbe([c])
    call(c, torch.zeros(3))
    free = container()
    probe2 = he_faults.QkvBiasProbe([free])
    call(free, None)
    assert probe.remove() == {"calls": 0, "max_abs": None} and probe2.remove()["calls"] == 0


def test_where_names_the_innermost_deepspeed_or_transformers_frame():
    def fail():
        raise ValueError("x")

    try:
        fail()
    except ValueError as exc:
        assert he_faults.crash_site(exc) == ""  # only our own frames: nothing to name
    exc = AttributeError("'tuple' object has no attribute 'size'")
    tb = types.SimpleNamespace()  # traceback.extract_tb needs a real traceback: build one from a fake file
    code = compile("raise exc", "/x/site-packages/deepspeed/model_implementations/transformers/ds_transformer.py",
                   "exec")  # fmt: skip
    try:
        exec(code, {"exc": exc})
    except AttributeError as raised:
        tb = raised
    assert he_faults.crash_site(tb) == "deepspeed/model_implementations/transformers/ds_transformer.py:1"


def test_crash_keeps_the_first_line_and_survives_an_empty_message():
    try:
        raise RuntimeError("first line\nsecond line")
    except RuntimeError as exc:
        assert he_faults.crash(exc) == {"type": "RuntimeError", "message": "first line", "at": ""}
    assert he_faults.crash(KeyError())["message"] == ""


class Attention(torch.nn.Module):
    """DeepSpeedSelfAttention's shape: forward computes is_prompt and hands it to compute_attention."""

    def forward(self, input, is_prompt, input_mask=None):
        return self.compute_attention(qkv_out=input, input_mask=input_mask, is_prompt=is_prompt)

    def compute_attention(self, qkv_out, input_mask, is_prompt):
        return qkv_out


def injected(n: int = 2) -> list:
    return [types.SimpleNamespace(module=types.SimpleNamespace(attention=Attention())) for _ in range(n)]


def test_layer_calls_count_the_injected_attention_and_zero_means_not_engaged():
    containers = injected()
    calls = he_faults.LayerCalls(containers)
    for c in containers:
        c.module.attention(torch.ones(1, 3, 4), True)
    assert calls.remove() == 2
    containers[0].module.attention(torch.ones(1, 1, 4), False)
    assert calls.calls == 2  # removed
    assert he_faults.LayerCalls([]).remove() == 0  # no container: generate cannot have run one


def test_prompt_flags_name_decode_steps_taken_for_prompts_and_restore_the_method():
    containers = injected()
    flags = he_faults.PromptFlags(containers)
    for tokens, prompt in ((3, True), (1, False), (1, True)):
        for c in containers:
            c.module.attention(torch.ones(1, tokens, 4), prompt)
    found = flags.remove()
    assert {k: v for k, v in found.items() if k != "first_layer_masks"} == {
        "calls": 6,
        "decode_calls": 4,
        "decode_calls_as_prompt": 2,
    }
    assert [(m["tokens"], m["keys"], m["dtype"]) for m in found["first_layer_masks"]] == [
        (3, 3, None),
        (1, 4, None),
        (1, 5, None),
    ]
    assert "compute_attention" not in vars(containers[0].module.attention)
    right = he_faults.PromptFlags(containers)
    containers[0].module.attention(torch.ones(1, 5, 4), True)
    containers[0].module.attention(torch.ones(1, 1, 4), False)
    assert right.remove()["decode_calls_as_prompt"] == 0


def test_prompt_flags_record_the_first_layers_masks_against_the_keys_it_attends_to():
    """Positive evidence for a mask the attention cannot use: a bool one, and a decode step's mask built for
    fewer keys than the layer's KV cache holds (as Transformers >= 4.53 builds it when its Cache stays empty)."""
    containers = injected()
    flags = he_faults.PromptFlags(containers)
    for tokens, mask in ((4, torch.zeros(2, 1, 4, 4)), (1, torch.ones(2, 1, 1, 1, dtype=torch.bool)), (1, None)):
        for c in containers:
            c.module.attention(torch.ones(2, tokens, 4), tokens > 1, mask)
    assert flags.remove()["first_layer_masks"] == [
        {"tokens": 4, "dtype": "float32", "mask_keys": 4, "keys": 4},
        {"tokens": 1, "dtype": "bool", "mask_keys": 1, "keys": 5},
        {"tokens": 1, "dtype": None, "mask_keys": None, "keys": 6},
    ]
    assert he_faults.mask_record(1, torch.empty(1)) == {"tokens": 1, "dtype": None, "mask_keys": None}  # no mask


class _Cache:
    def __init__(self, length: int) -> None:
        self.length = length

    def get_seq_length(self) -> int:
        return self.length


class _Model(torch.nn.Module):
    def forward(self, input_ids=None, attention_mask=None, past_key_values=None):
        return input_ids


def test_cache_steps_record_the_cache_against_what_the_model_has_seen():
    model = _Model()
    steps = he_faults.CacheSteps(model)
    model(input_ids=torch.ones(1, 8), attention_mask=torch.ones(1, 8), past_key_values=None)  # prefill: no Cache yet
    model(input_ids=torch.ones(1, 1), attention_mask=torch.ones(1, 9), past_key_values=_Cache(0))  # left behind
    model(input_ids=torch.ones(1, 1), past_key_values=_Cache(9))  # no mask: the tokens fed before are what it saw
    assert steps.remove() == [{"cache_length": 0, "seen": 8}, {"cache_length": 9, "seen": 9}]
    model(input_ids=torch.ones(1, 1), past_key_values=_Cache(0))
    assert len(steps.steps) == 2  # removed: records nothing more
