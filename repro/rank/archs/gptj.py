"""GPT-J: separate Q, K and V Linears without bias, one LayerNorm feeding attention and MLP in parallel, and a
partial rotary that rotates interleaved pairs of dims (`rotate_every_two`, where GPT-NeoX and Llama rotate
halves); GPT-J 6B rotates 64 of each head's 256 dims, the tiny default 16 of 64."""

from __future__ import annotations

import torch

from .adapter import Adapter, changed_layers, outer_norm_twins

LAYERS = "transformer.h"
OUTER = outer_norm_twins(LAYERS)


def twins(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The final norm's (`layer-norm-eps`), and, for an activation other than GPT-J's own gelu_new, the same
    weights with gelu_new: DeepSpeed's GPT-J MLP reads the attention's LayerNorm, so it takes `fused_gemm_gelu`,
    whose GELU is fixed, whatever `mlp_act_func_type` says."""
    from transformers.activations import ACT2FN

    found = OUTER(model)
    if model.config.activation_function != "gelu_new":
        found["tanh_gelu_activation"] = changed_layers(
            model, LAYERS, lambda layer: setattr(layer.mlp, "act", ACT2FN["gelu_new"])
        )
    return found


ADAPTER = Adapter(
    name="gpt-j",
    config_class="GPTJConfig",
    model_class="GPTJForCausalLM",
    # The same sizes as the other tiny defaults (hidden 256, 2 layers, 4 heads of 64); GPT-J 6B's rotary ratio.
    tiny=dict(vocab_size=1024, n_embd=256, n_layer=2, n_head=4, n_inner=None, n_positions=256, rotary_dim=16,
              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    layers=LAYERS,
    row_parallel=("attn.out_proj", "mlp.fc_out"),
    lora_targets={  # DS_GPTJContainer.set_lora_params: fc_in, fc_out, q/k/v_proj, out_proj
        "none": (),
        "all": ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj", "mlp.fc_in", "mlp.fc_out"),
    },
    twins=twins,
)  # fmt: skip
