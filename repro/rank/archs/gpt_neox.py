"""GPT-NeoX (Pythia): the reproduction's architecture. Its fused QKV is head-interleaved, which is what
the Hybrid Engine converts in place (#8391 and the three findings beside it)."""

from __future__ import annotations

import copy

import torch

from ...model_registry import TINY
from .. import rope
from .adapter import Adapter, changed_layers, outer_norm_twins

LAYERS = "gpt_neox.layers"
QKV = ("attention.query_key_value",)
OTHERS = ("attention.dense", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h")  # DS_GPTNEOXContainer.set_lora_params


def parallel_residual_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights computed as a parallel-residual GPT-NeoX (x + attn(ln1 x) + mlp(ln2 x)): what the
    Hybrid Engine computes when it ignores `use_parallel_residual=False` (#3453)."""
    return changed_layers(model, LAYERS, lambda layer: setattr(layer, "use_parallel_residual", True))


def _rotary_twin(model: torch.nn.Module, **changes) -> torch.nn.Module:
    """The same weights with the rotary embedding built from the config with `changes` (repro.rank.rope.changed),
    on the model's device."""
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

    twin = copy.deepcopy(model)
    config = rope.changed(twin.config, **changes)
    twin.gpt_neox.rotary_emb = GPTNeoXRotaryEmbedding(config=config).to(next(model.parameters()).device)
    return twin


def default_rotary_base_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights rotated with base 10000: what the Hybrid Engine computes when the container does not
    pass the model's rotary_emb_base to the inference config (patch `rotary-base`)."""
    return _rotary_twin(model, new_base=rope.DEFAULT_BASE)


def unscaled_rotary_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights rotated without the model's rope_scaling: what the Hybrid Engine computes when the
    inference config, which has no field for a scaled rotary, drops it."""
    return _rotary_twin(model, unscaled=True)


def gelu_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights with exact GELU in every MLP: what the Hybrid Engine computes when the policy does not
    read `hidden_act` (GPTNEOXLayerPolicy leaves TransformerPolicy's GELU)."""
    from transformers.activations import ACT2FN

    return changed_layers(model, LAYERS, lambda layer: setattr(layer.mlp, "act", ACT2FN["gelu"]))


def twins(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    found = outer_norm_twins(LAYERS)(model)
    if model.config.use_parallel_residual is False:  # #3453: did the HE run the parallel-residual math?
        found["parallel_residual"] = parallel_residual_twin(model)
    if rope.base(model.config) != rope.DEFAULT_BASE:  # did the HE rotate with the default base?
        found["rotary_base_10000"] = default_rotary_base_twin(model)
    if rope.scaled(model.config):  # did the HE rotate without the scaling?
        found["unscaled_rotary"] = unscaled_rotary_twin(model)
    if model.config.hidden_act != "gelu":  # did the HE compute its one GELU?
        found["gelu_activation"] = gelu_twin(model)
    return found


ADAPTER = Adapter(
    name="gpt-neox",
    config_class="GPTNeoXConfig",
    model_class="GPTNeoXForCausalLM",
    tiny=TINY,  # the reproduction's tiny Pythia (repro.model_registry)
    layers=LAYERS,
    row_parallel=("attention.dense", "mlp.dense_4h_to_h"),
    # "qkv" and "others": the family table's LoRA sweeps; "all": DeepSpeed-Chat's.
    lora_targets={"none": (), "qkv": QKV, "others": OTHERS, "all": QKV + OTHERS},
    fused_qkv="attention.query_key_value.weight",
    twins=twins,
)
