"""DeepSpeed-Chat LoRA on the tiny GPT-NeoX: what the family probe's references rely on."""

import pytest
import torch

from repro.rank import lora, models
from repro.rank.archs import gpt_neox

TARGETS = gpt_neox.ADAPTER.lora_targets


@pytest.fixture()
def tiny():
    loaded = models.build("tiny", "fp32", 1234)
    return loaded.model, models.prompt_ids(loaded, None)


@pytest.mark.parametrize("targets", sorted(TARGETS))
def test_attach_keeps_the_base_parameter_objects(tiny, targets):
    """ZeRO-3 and the Hybrid Engine must see the base Linear's own weight and bias, not copies."""
    model, _ = tiny
    layers = model.gpt_neox.layers
    base_params = {}
    for i, layer in enumerate(layers):
        for dotted in TARGETS[targets]:
            parent, leaf = lora._get(layer, dotted)
            base_params[(i, dotted)] = (getattr(parent, leaf).weight, getattr(parent, leaf).bias)
    names = lora.attach(model, targets)
    assert names == [f"gpt_neox.layers.{i}.{d}" for i in range(len(layers)) for d in TARGETS[targets]]
    modules = lora.lora_modules(model)
    assert list(modules) == names
    for (i, dotted), (weight, bias) in base_params.items():
        m = modules[f"gpt_neox.layers.{i}.{dotted}"]
        assert m.weight is weight and m.bias is bias
        assert not m.weight.requires_grad and m.lora_left_weight.requires_grad
    # Only the LoRA factors are new parameters.
    new = [n for n, _ in model.named_parameters() if ".lora_" in n]
    assert len(new) == 2 * len(names)


def test_delta_is_deepspeeds_fuse_formula_and_the_merged_weight_difference(tiny):
    model, _ = tiny
    lora.attach(model, "all")
    merged = dict(lora.merged_reference(model).named_parameters())
    for name, m in lora.lora_modules(model).items():
        expected = m.lora_scaling * (m.lora_right_weight @ m.lora_left_weight).t()
        torch.testing.assert_close(m.delta(), expected, rtol=0, atol=1e-7)
        assert m.delta().abs().max() > 1e-3  # large enough for a lost delta to show
        assert torch.equal(merged[f"{name}.weight"], m.weight + m.delta())
        torch.testing.assert_close(merged[f"{name}.weight"] - m.weight, m.delta(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("targets", sorted(TARGETS))
def test_merged_reference_computes_what_the_lora_model_computes(tiny, targets):
    model, ids = tiny
    without = model(ids).logits
    lora.attach(model, targets)
    with torch.no_grad():
        got = model(ids).logits
        merged = lora.merged_reference(model)(ids).logits
        base = lora.base_reference(model)(ids).logits
    torch.testing.assert_close(merged, got, rtol=0, atol=1e-5)
    torch.testing.assert_close(base, without, rtol=0, atol=1e-6)
    if targets == "none":  # the call-order cells without LoRA: nothing attached, nothing changed
        assert torch.equal(got, without)
    else:
        assert (got - without).abs().max() > 1e-2  # LoRA really changes the model


def test_references_are_copies(tiny):
    model, _ = tiny
    lora.attach(model, "qkv")
    merged = lora.merged_reference(model)
    assert not lora.lora_modules(merged)
    ours = {id(p) for p in model.parameters()}
    assert not any(id(p) in ours for p in merged.parameters())


@pytest.mark.parametrize("arch", ["gpt-neo", "llama"])
def test_attach_reaches_every_linear_of_the_other_architectures_and_merges_exactly(arch):
    """The conformance suite's GPT-Neo and Llama LoRA: every Linear of each layer, the DeepSpeed container's
    targets; the merged reference computes what the LoRA model computes."""
    from repro.rank.archs import adapter

    spec = adapter(arch)
    model = spec.build(1234)
    names = lora.attach(model, "all", arch=arch)
    assert len(names) == len(spec.layer_list(model)) * len(spec.lora_targets["all"])
    assert not [n for n, m in spec.layer_list(model).named_modules() if type(m) is torch.nn.Linear]
    ids = torch.tensor([[12, 13, 309, 353, 253, 921, 310, 247]])
    with torch.no_grad():
        lora_logits = model(ids).logits
        merged_logits = lora.merged_reference(model)(ids).logits
        base_logits = lora.base_reference(model)(ids).logits
    assert (lora_logits - merged_logits).abs().max() < 1e-4
    assert (lora_logits - base_logits).abs().max() > 0.1  # the delta is visible: a lost LoRA cannot pass


def test_references_live_on_the_models_device(tiny):
    """On a GPU run the native references must sit on the rank's GPU; the meta device stands in for it here."""
    model, _ = tiny
    lora.attach(model, "qkv", seed=1)
    model.to("meta")
    for reference in (lora.merged_reference(model), lora.base_reference(model)):
        assert {p.device.type for p in reference.parameters()} == {"meta"}
