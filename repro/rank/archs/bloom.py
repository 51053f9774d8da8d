"""BLOOM: a head-interleaved fused QKV ([heads, 3, head_dim] rows, read as such by DeepSpeed's BloomSelfAttention:
no layout transform), ALiBi instead of positions, a LayerNorm on the word embeddings, tanh GELU. DeepSpeed 0.19.8's
container refuses Transformers from 4.44 (its own RuntimeError), so BLOOM runs on 4.43.4 (plan.ENGAGED_ON)."""

from __future__ import annotations

import torch

from .adapter import Adapter, changed_layers, outer_norm_twins

LAYERS = "transformer.h"
OUTER = outer_norm_twins(LAYERS)


def twins(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The final norms' (`layer-norm-eps`), and for a model whose residual is the LayerNorm's output
    (`apply_residual_connection_post_layernorm`), the same weights with the residual taken before it, as
    DeepSpeed's residual add takes it."""
    found = OUTER(model)
    if model.config.apply_residual_connection_post_layernorm:
        found["residual_before_layer_norm"] = changed_layers(model, LAYERS, _residual_before_layer_norm)
    return found


def _residual_before_layer_norm(layer: torch.nn.Module) -> None:
    layer.apply_residual_connection_post_layernorm = False


ADAPTER = Adapter(
    name="bloom",
    config_class="BloomConfig",
    model_class="BloomForCausalLM",
    # The same sizes as the other tiny defaults (hidden 256, 2 layers, 4 heads of 64); no dropout.
    tiny=dict(vocab_size=1024, hidden_size=256, n_layer=2, n_head=4, hidden_dropout=0.0, attention_dropout=0.0),
    layers=LAYERS,
    row_parallel=("self_attention.dense", "mlp.dense_4h_to_h"),
    lora_targets={  # DS_BloomContainer.set_lora_params: dense_h_to_4h, dense_4h_to_h, query_key_value, dense
        "none": (),
        "all": ("self_attention.query_key_value", "self_attention.dense", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"),
    },
    twins=twins,
)  # fmt: skip
