"""GPT-Neo: separate Q, K and V Linears without bias, global and local attention layers."""

from __future__ import annotations

from .adapter import Adapter, outer_norm_twins

LAYERS = "transformer.h"

ADAPTER = Adapter(
    name="gpt-neo",
    config_class="GPTNeoConfig",
    model_class="GPTNeoForCausalLM",
    # The same sizes as GPT-NeoX's tiny default (hidden 256, 2 layers, 4 heads); one global, one local layer.
    tiny=dict(vocab_size=1024, hidden_size=256, num_layers=2, num_heads=4, intermediate_size=1024,
              max_position_embeddings=256, attention_types=[[["global", "local"], 1]], window_size=256),
    layers=LAYERS,
    row_parallel=("attn.attention.out_proj", "mlp.c_proj"),
    lora_targets={
        "none": (),
        "all": ("attn.attention.q_proj", "attn.attention.k_proj", "attn.attention.v_proj", "attn.attention.out_proj",
                "mlp.c_fc", "mlp.c_proj"),
    },
    twins=outer_norm_twins(LAYERS),
)  # fmt: skip
