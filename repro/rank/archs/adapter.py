"""What the cell probe needs to know about one architecture, in one place: adding an architecture to the
conformance suite is one adapter (a module of this package) plus its configurations in the host's plan."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

Twins = Callable[[torch.nn.Module], dict[str, torch.nn.Module]]
# deepspeed.module_inject.layers.Normalize's default: the HE's final norm (patch `layer-norm-eps`)
NORMALIZE_EPS = 1e-5


def no_twins(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    return {}


@dataclass(frozen=True)
class Adapter:
    """One architecture as the Hybrid Engine's container for it sees it.

    `lora_targets`: per LoRA setting ("none" and "all" always: DeepSpeed-Chat's LoRA on every Linear of a
    layer, the modules the container's `set_lora_params` looks at), the Linear modules within a layer.
    `fused_qkv`: the layer's head-interleaved fused QKV weight, whose layout the Hybrid Engine converts in
    place (GPT-NeoX's `attention.query_key_value.weight`); None where Q, K and V are separate Linears. Only
    a fused QKV has layout evidence (repro.rank.qkv_states).
    `row_parallel`: the Linears of a layer whose input features Megatron-style tensor parallelism splits
    (the attention output, the MLP's last projection); every other Linear of `lora_targets["all"]` is split
    on its output features (repro.rank.tp_slices).
    `twins(model)`: native copies of `model` with one setting the Hybrid Engine may ignore put back to what
    DeepSpeed computes, by name; the Hybrid Engine matching one of them is positive evidence of that bug.
    """

    name: str
    config_class: str
    model_class: str
    tiny: dict
    layers: str
    lora_targets: dict[str, tuple[str, ...]]
    row_parallel: tuple[str, ...]
    fused_qkv: str | None = None
    twins: Twins = field(default=no_twins)

    def column_parallel(self) -> tuple[str, ...]:
        return tuple(p for p in self.lora_targets["all"] if p not in self.row_parallel)

    def config(self, overrides: dict | None = None):
        import transformers

        return getattr(transformers, self.config_class)(**{**self.tiny, **(overrides or {})})

    def build(self, seed: int, overrides: dict | None = None) -> torch.nn.Module:
        """The tiny seeded model; `overrides` replace fields of the tiny default. Transformers initialises
        biases to 0 and norm weights to 1, where a Hybrid Engine that dropped them would still match: they
        are drawn at random too, from the same seed."""
        import transformers

        torch.manual_seed(seed)
        model = getattr(transformers, self.model_class)(self.config(overrides)).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(".bias"):
                    p.normal_(0.0, 0.02)
                elif "norm" in name or ".ln_" in name:
                    p.normal_(1.0, 0.1)
        return model

    def load(self, weights: str, overrides: dict, allow_pickle: bool = False) -> torch.nn.Module:
        """A user's own model ("check my model" --weights): its config's fields over the tiny default, its
        weights from safetensors (a pickle only with `allow_pickle`, read with torch's weights-only loader).
        Every weight of the model must come from the file, but weights tied to another (lm_head)."""
        import transformers

        if weights.endswith(".safetensors"):
            from safetensors.torch import load_file

            state = load_file(weights)
        elif allow_pickle:
            state = torch.load(weights, map_location="cpu", weights_only=True)
        else:
            raise ValueError(f"{weights}: only safetensors load without allow_pickle")
        model = getattr(transformers, self.model_class)(self.config(overrides))
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = set(getattr(model, "_tied_weights_keys", None) or ())
        untied = [k for k in missing if k not in tied]
        if untied or unexpected:
            raise ValueError(f"{weights} does not fit the config: missing {untied[:3]}, unexpected {unexpected[:3]}")
        if missing:
            model.tie_weights()
        return model.float().eval()

    def layer_list(self, model: torch.nn.Module) -> torch.nn.ModuleList:
        return model.get_submodule(self.layers)


def changed_layers(model: torch.nn.Module, layers: str, change: Callable[[torch.nn.Module], None]) -> torch.nn.Module:
    """A deep copy of `model` with `change` applied to each decoder layer (the modules of the list at `layers`):
    the shape of most twins, one setting put back layer by layer."""
    twin = copy.deepcopy(model)
    for layer in twin.get_submodule(layers):
        change(layer)
    return twin


def outer_norm_default_eps_twin(model: torch.nn.Module, layers: str) -> torch.nn.Module | None:
    """The same weights with every LayerNorm outside the decoder layers (the modules under `layers`) at eps
    1e-5: what the Hybrid Engine computes when it replaces them by Normalize without the model's epsilon
    (patch `layer-norm-eps`). None when they already use it (nothing to tell apart)."""
    prefix = layers + "."
    outer = [n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm) and not n.startswith(prefix)]
    if all(model.get_submodule(n).eps == NORMALIZE_EPS for n in outer):
        return None
    twin = copy.deepcopy(model)
    for n in outer:
        twin.get_submodule(n).eps = NORMALIZE_EPS
    return twin


OUTER_NORM_TWIN = "outer_layer_norm_at_eps_1e-5"


def outer_norm_twins(layers: str) -> Twins:
    """The twin every architecture with LayerNorms outside its layers has (`layer-norm-eps`)."""

    def twins(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
        twin = outer_norm_default_eps_twin(model, layers)
        return {} if twin is None else {OUTER_NORM_TWIN: twin}

    return twins
