"""Llama: separate Q, K and V Linears, RMSNorm, gated MLP. DeepSpeed's injected layer computes SiLU gating
without biases whatever the config says (`llama-unservable-config`), so those two are its twins."""

from __future__ import annotations

import copy

import torch

from .adapter import Adapter, changed_layers

LAYERS = "model.layers"


def twins(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """SiLU gating and no layer biases put back: what the injected layer computes (`llama-unservable-config`)."""
    from transformers.activations import ACT2FN

    found = {}
    if model.config.hidden_act != "silu":
        found["silu_gating"] = changed_layers(
            model, LAYERS, lambda layer: setattr(layer.mlp, "act_fn", ACT2FN["silu"])
        )
    # Transformers adds attention_bias in 4.34 and mlp_bias in 4.42: absent, there is no bias
    if getattr(model.config, "attention_bias", False) or getattr(model.config, "mlp_bias", False):
        biasless = copy.deepcopy(model)
        with torch.no_grad():
            for name, p in biasless.model.layers.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
        found["no_layer_biases"] = biasless
    return found


ADAPTER = Adapter(
    name="llama",
    config_class="LlamaConfig",
    model_class="LlamaForCausalLM",
    tiny=dict(vocab_size=1024, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
              intermediate_size=512, max_position_embeddings=256),
    layers=LAYERS,
    row_parallel=("self_attn.o_proj", "mlp.down_proj"),
    lora_targets={
        "none": (),
        "all": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                "mlp.up_proj", "mlp.down_proj"),
    },
    twins=twins,
)  # fmt: skip
