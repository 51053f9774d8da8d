"""What every adapter must hold (repro.rank.archs): a seeded tiny model with drawn biases and norms, LoRA
targets that are the Linears of each layer, and the host's plan naming exactly the adapters there are."""

import pytest
import torch

from repro.host.conformance import plan
from repro.rank.archs import ADAPTERS, adapter
from repro.rank.archs.adapter import OUTER_NORM_TWIN, outer_norm_default_eps_twin


def test_the_plan_runs_exactly_the_architectures_with_an_adapter():
    assert set(plan.ARCHS) == set(ADAPTERS)
    with pytest.raises(KeyError, match="the adapters are gpt-neox"):
        adapter("opt-9000")


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_build_is_seeded_tiny_and_draws_biases_and_norms(name):
    arch = adapter(name)
    a, b, other = arch.build(7), arch.build(7), arch.build(8)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a.parameters(), other.parameters(), strict=True))
    assert sum(p.numel() for p in a.parameters()) < 3_000_000
    for n, p in a.named_parameters():
        if n.endswith(".bias"):
            assert p.abs().max() > 0, f"{n}: a dropped bias would go unseen"
        elif "norm" in n or ".ln_" in n:
            assert (p - 1).abs().max() > 0, f"{n}: a dropped norm weight would go unseen"


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_overrides_replace_fields_of_the_tiny_default(name):
    arch = adapter(name)
    config = arch.config({"vocab_size": 512})
    assert config.vocab_size == 512 and arch.config().vocab_size == arch.tiny["vocab_size"]


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_lora_targets_are_every_linear_of_a_layer(name):
    """DeepSpeed-Chat's LoRA covers every Linear of the decoder layers ("all"); "none" covers nothing."""
    arch = adapter(name)
    model = arch.build(1)
    layers = arch.layer_list(model)
    assert len(layers) == model.config.num_hidden_layers
    linears = {n for n, m in layers[0].named_modules() if isinstance(m, torch.nn.Linear)}
    assert set(arch.lora_targets["all"]) == linears and arch.lora_targets["none"] == ()
    for targets in arch.lora_targets.values():
        assert set(targets) <= linears


def test_the_final_norm_twin_changes_only_layer_norms_outside_the_layers():
    neo = adapter("gpt-neo")
    model = neo.build(1, {"layer_norm_epsilon": 1e-3})
    twin = outer_norm_default_eps_twin(model, neo.layers)
    assert twin.transformer.ln_f.eps == 1e-5 and twin.transformer.h[0].ln_1.eps == 1e-3
    assert model.transformer.ln_f.eps == 1e-3  # the model itself is untouched
    assert outer_norm_default_eps_twin(neo.build(1), neo.layers) is None
    assert list(neo.twins(model)) == [OUTER_NORM_TWIN] and neo.twins(neo.build(1)) == {}
