"""LoRA on a Transformers model (GPT-NeoX; GPT-Neo and Llama for the conformance suite), laid out the way
DeepSpeed's Hybrid Engine discovers it.

How DeepSpeed finds LoRA (0.19.8, read from the source):
- `DS_GPTNEOXContainer.set_lora_params` calls `policy.maybe_get_lora(m)` on the four Linear MODULES
  `mlp.dense_h_to_4h`, `mlp.dense_4h_to_h`, `attention.query_key_value`, `attention.dense`.
- `maybe_get_lora(m)` returns `[m.lora_right_weight, m.lora_left_weight, m.lora_scaling]` when the
  module has `lora_right_weight`, else `[]`.
- `HybridEngineContainer.fuse_lora` adds `lora_scaling * left.t() @ right.t()` to the matched base
  weight (`get_lora_matched_pair`), `unfuse_lora` subtracts it.

GPT-Neo's container passes its Linear modules too; Llama's passes their `.weight` tensors (read, and
measured by the conformance suite).

So the LoRA module is DeepSpeed-Chat's `LinearLayer_LoRA`: it keeps the base Linear's `weight` and
`bias` Parameters (the same objects), adds `lora_right_weight` [in, r], `lora_left_weight` [r, out],
a float `lora_scaling`, and computes base(x) + (x @ right @ left) * scaling. The merged weight is
W + scaling * (right @ left).T, which is exactly the fused weight DeepSpeed computes.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from .archs import adapter


class LinearLayer_LoRA(torch.nn.Module):  # DeepSpeed-Chat's class name, kept for recognition
    """DeepSpeed-Chat's LoRA linear (dropout 0), on top of an existing nn.Linear's parameters."""

    def __init__(
        self, base: torch.nn.Linear, lora_dim: int, lora_scaling: float, generator: torch.Generator, std: float
    ) -> None:
        super().__init__()
        # The same Parameter objects as the base Linear: ZeRO-3 and the Hybrid Engine see one weight.
        self.weight = base.weight
        self.bias = base.bias
        # No in_features / out_features: DeepSpeed-Chat's LinearLayer_LoRA has neither, and code that reads them
        # (DeepSpeed's Llama policy) must meet what users run.
        rows, columns = base.weight.shape  # [out, in]
        dtype = base.weight.dtype
        self.lora_right_weight = torch.nn.Parameter(
            (torch.randn(columns, lora_dim, generator=generator) * std).to(dtype)
        )
        self.lora_left_weight = torch.nn.Parameter((torch.randn(lora_dim, rows, generator=generator) * std).to(dtype))
        self.lora_scaling = lora_scaling / lora_dim
        self.weight.requires_grad = False  # as DeepSpeed-Chat: only the LoRA factors train

    def delta(self) -> torch.Tensor:
        """The [out, in] update LoRA makes to `weight` (same formula as DeepSpeed's fuse_lora)."""
        return self.lora_scaling * torch.matmul(self.lora_left_weight.t(), self.lora_right_weight.t())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lora = (x @ self.lora_right_weight @ self.lora_left_weight) * self.lora_scaling
        return F.linear(x, self.weight, self.bias) + lora


def _get(root: torch.nn.Module, dotted: str) -> tuple[torch.nn.Module, str]:
    *parents, leaf = dotted.split(".")
    for name in parents:
        root = getattr(root, name)
    return root, leaf


def attach(
    model: torch.nn.Module,
    targets: str,
    seed: int = 4321,
    lora_dim: int = 8,
    lora_alpha: float = 8.0,
    std: float = 0.1,
    arch: str = "gpt-neox",
) -> list[str]:
    """Replaces the Linear modules `targets` names in the architecture's adapter (repro.rank.archs), in every
    decoder layer, by LinearLayer_LoRA; returns their names.

    With the tiny model's init (std 0.02) the defaults give a delta of ~0.03 per element, so greedy
    tokens change (the probe records it as `lora_changes_native_tokens`): a lost delta is visible.
    """
    generator = torch.Generator().manual_seed(seed)
    names = []
    arch_adapter = adapter(arch)
    for i, layer in enumerate(arch_adapter.layer_list(model)):
        for dotted in arch_adapter.lora_targets[targets]:
            parent, leaf = _get(layer, dotted)
            base = getattr(parent, leaf)
            if not isinstance(base, torch.nn.Linear):
                raise TypeError(f"{dotted} is {type(base).__name__}, not nn.Linear")
            setattr(parent, leaf, LinearLayer_LoRA(base, lora_dim, lora_alpha, generator, std))
            names.append(f"{arch_adapter.layers}.{i}.{dotted}")
    return names


def lora_modules(model: torch.nn.Module) -> dict[str, LinearLayer_LoRA]:
    """Every LoRA module of `model` by its dotted name (the names DeepSpeed's parameters carry)."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LinearLayer_LoRA)}


def _replace_lora(model: torch.nn.Module, merge: bool) -> torch.nn.Module:
    """A deep copy in which every LoRA module is a plain nn.Linear, with (merge) or without LoRA."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, m in lora_modules(out).items():
            out_features, in_features = m.weight.shape
            linear = torch.nn.Linear(
                in_features, out_features, bias=m.bias is not None, dtype=m.weight.dtype, device=m.weight.device
            )
            linear.weight.copy_(m.weight + m.delta() if merge else m.weight)
            if m.bias is not None:
                linear.bias.copy_(m.bias)
            parent, leaf = _get(out, name)
            setattr(parent, leaf, linear)
    return out.eval()


def merged_reference(model: torch.nn.Module) -> torch.nn.Module:
    """Native reference: a copy whose LoRA Linears are nn.Linear(W + scaling * (right @ left).T)."""
    return _replace_lora(model, merge=True)


def base_reference(model: torch.nn.Module) -> torch.nn.Module:
    """The same model without LoRA (what a rollout that lost the fused delta computes)."""
    return _replace_lora(model, merge=False)
