"""The architecture probe's own measurements, on plain modules: each must be able to fail."""

import math
import types

import pytest
import torch

from repro.rank import arch_probe


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
    probe = arch_probe.QkvBiasProbe([c])
    call(c, torch.tensor([1.0, -3.0]))
    call(c, torch.tensor([math.nan]))
    assert probe.remove()["calls"] == 2 and math.isnan(probe.remove()["max_abs"])
    call(c, torch.tensor([5.0]))  # removed: no longer recorded
    assert probe.calls == 2


@pytest.mark.parametrize("held", ["qkvb", "qb"])
def test_a_model_with_qkv_bias_or_no_bias_handed_is_not_recorded(held):
    c = container(**{held: torch.zeros(3)})
    probe = arch_probe.QkvBiasProbe([c])
    call(c, torch.zeros(3))
    free = container()
    probe2 = arch_probe.QkvBiasProbe([free])
    call(free, None)
    assert probe.remove() == {"calls": 0, "max_abs": None} and probe2.remove()["calls"] == 0


def test_where_names_the_innermost_deepspeed_or_transformers_frame():
    def fail():
        raise ValueError("x")

    try:
        fail()
    except ValueError as exc:
        assert arch_probe._where(exc) == ""  # only our own frames: nothing to name
    exc = AttributeError("'tuple' object has no attribute 'size'")
    tb = types.SimpleNamespace()  # traceback.extract_tb needs a real traceback: build one from a fake file
    code = compile("raise exc", "/x/site-packages/deepspeed/model_implementations/transformers/ds_transformer.py",
                   "exec")  # fmt: skip
    try:
        exec(code, {"exc": exc})
    except AttributeError as raised:
        tb = raised
    assert arch_probe._where(tb) == "deepspeed/model_implementations/transformers/ds_transformer.py:1"


@pytest.mark.parametrize("arch", sorted(arch_probe.ARCHS))
def test_build_is_seeded_and_tiny(arch):
    a, b = arch_probe.build(arch, 7), arch_probe.build(arch, 7)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert sum(p.numel() for p in a.parameters()) < 3_000_000


def test_restored_names_every_changed_weight_and_the_largest_change():
    module = torch.nn.Linear(3, 2)
    originals = {n: p.detach().clone() for n, p in module.named_parameters()}
    engine = types.SimpleNamespace(module=module)
    assert arch_probe.restored(engine, originals) == {"changed": [], "max_abs_change": 0.0}
    with torch.no_grad():
        module.weight[0, 0] += 0.25
    assert arch_probe.restored(engine, originals) == {"changed": ["weight"], "max_abs_change": 0.25}
    with torch.no_grad():
        module.bias[0] = math.nan
    assert math.isnan(arch_probe.restored(engine, originals)["max_abs_change"])


def test_the_final_norm_twin_changes_only_layer_norms_outside_the_layers():
    from repro.rank.lora_probe import outer_norm_default_eps_twin

    model = arch_probe.build("gpt-neo", 1, {"layer_norm_epsilon": 1e-3})
    twin = outer_norm_default_eps_twin(model, "transformer.h.")
    assert twin.transformer.ln_f.eps == 1e-5 and twin.transformer.h[0].ln_1.eps == 1e-3
    assert model.transformer.ln_f.eps == 1e-3  # the model itself is untouched
    assert outer_norm_default_eps_twin(arch_probe.build("gpt-neo", 1), "transformer.h.") is None
