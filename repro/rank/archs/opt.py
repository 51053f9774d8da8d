"""OPT, DeepSpeed-Chat's main model family: separate Q, K and V Linears with biases, learned positions, ReLU.
opt-350m is post-LayerNorm (`do_layer_norm_before=False`), where DeepSpeed's policy hands the layer's two
LayerNorms to the injected layer's slots in the pre-LayerNorm order (`opt-post-layer-norm`): the swapped-LayerNorms
twin is what it would compute. DeepSpeed 0.19.8 keeps OPT on the native path when the decoder layer takes a Cache
(`cache_position` or `past_key_values` in its signature: Transformers 4.57 does), so whether the Hybrid Engine
engaged is measured per cell (repro.rank.cell_probe: `injected_layer_calls`)."""

from __future__ import annotations

import torch

from .adapter import Adapter, changed_layers

LAYERS = "model.decoder.layers"


def twins(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The same weights computed the way the injected layer may compute them instead: a post-LayerNorm model with
    each layer's self_attn_layer_norm and final_layer_norm in each other's place (`HFOPTLayerPolicy.layernorm()`
    returns them in the pre-LayerNorm order whatever the placement) or without its q/k/v biases (under ZeRO-3 the
    post-LayerNorm linear is told there is none: `post-layer-norm-qkv-bias`), and with ReLU when the model's
    activation is another (`HFOPTLayerPolicy` reads the activation from `TransformerPolicy.hf_model_config`, which only
    `deepspeed.init_inference` sets, and defaults to ReLU)."""
    from transformers.activations import ACT2FN

    found = {}
    if not model.config.do_layer_norm_before:
        found["swapped_layer_norms"] = changed_layers(model, LAYERS, _swap_layer_norms)
        found["no_qkv_bias"] = changed_layers(model, LAYERS, _drop_qkv_bias)
    if model.config.activation_function != "relu":
        found["relu_activation"] = changed_layers(
            model, LAYERS, lambda layer: setattr(layer, "activation_fn", ACT2FN["relu"])
        )
    return found


def _swap_layer_norms(layer: torch.nn.Module) -> None:
    layer.self_attn_layer_norm, layer.final_layer_norm = layer.final_layer_norm, layer.self_attn_layer_norm


def _drop_qkv_bias(layer: torch.nn.Module) -> None:
    with torch.no_grad():
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
            if proj.bias is not None:
                proj.bias.zero_()


ADAPTER = Adapter(
    name="opt",
    config_class="OPTConfig",
    model_class="OPTForCausalLM",
    # The same sizes as the other tiny defaults; no dropout, so train() and eval() compute the same function.
    tiny=dict(vocab_size=1024, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, ffn_dim=1024,
              max_position_embeddings=256, word_embed_proj_dim=256, dropout=0.0, attention_dropout=0.0),
    layers=LAYERS,
    row_parallel=("self_attn.out_proj", "fc2"),
    lora_targets={  # DS_OPTContainer.set_lora_params: fc1, fc2, q/k/v_proj, out_proj
        "none": (),
        "all": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj", "fc1", "fc2"),
    },
    twins=twins,
)  # fmt: skip
