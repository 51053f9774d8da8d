"""Each rank's Megatron slice of the decoder layers' Linears, cut from a whole model: the training weights
DeepSpeed's Hybrid Engine takes from a caller that hands it an mpu. Its tensor-parallel path copies them to
the injected layers as they are (each rank computes its heads, and the injected layers all-reduce), so
whole Hugging Face weights under an mpu are outside its contract; these slices are inside it.

Column-parallel Linears (Q, K, V or a fused QKV, the MLP's first projections) keep this rank's block of
output features and of their bias; row-parallel ones (the attention output, the MLP's last projection) keep
its block of input features and the whole bias, added once after the all-reduce. A fused QKV in GPT-NeoX's
head-interleaved layout keeps this rank's heads that way."""

from __future__ import annotations

import torch


def slice_layers(
    layers: torch.nn.ModuleList, columns: tuple[str, ...], rows: tuple[str, ...], rank: int, world: int
) -> list[str]:
    """Replaces, in every layer, each Linear named in `columns` / `rows` (paths within a layer) by this
    rank's slice; returns the sliced modules' paths. A module that is not a plain Linear is refused: a LoRA
    wrapper's factors would need slicing too, which Megatron-style training defines per library."""
    sliced = []
    for index, layer in enumerate(layers):
        for path, dim in [(p, 0) for p in columns] + [(p, 1) for p in rows]:
            whole = layer.get_submodule(path)
            if type(whole) is not torch.nn.Linear:
                raise TypeError(f"layer {index} {path}: {type(whole).__name__} is not a torch.nn.Linear to slice")
            parent, _, name = path.rpartition(".")
            setattr(layer.get_submodule(parent) if parent else layer, name, _slice(whole, dim, rank, world))
            sliced.append(f"{index}.{path}")
    return sliced


def _slice(whole: torch.nn.Linear, dim: int, rank: int, world: int) -> torch.nn.Linear:
    weight = whole.weight.detach()
    if weight.shape[dim] % world:
        raise ValueError(f"{tuple(weight.shape)} does not split into {world} slices along dim {dim}")
    part = weight.chunk(world, dim=dim)[rank]
    bias = whole.bias
    if bias is not None and dim == 0:  # a column-parallel bias is sliced with its rows
        bias = bias.detach().chunk(world)[rank]
    out = torch.nn.Linear(
        part.shape[1], part.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype
    )
    with torch.no_grad():
        out.weight.copy_(part)
        if bias is not None:
            out.bias.copy_(bias)
    return out
