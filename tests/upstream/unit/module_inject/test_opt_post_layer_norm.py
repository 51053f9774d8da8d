# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

from types import SimpleNamespace

import pytest
import torch

from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.auto_tp import ReplaceWithTensorSlicing
from deepspeed.module_inject.containers import HFOPTLayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container

transformers = pytest.importorskip("transformers")


def tiny_opt(do_layer_norm_before):
    config = transformers.OPTConfig(vocab_size=64,
                                    hidden_size=32,
                                    num_hidden_layers=1,
                                    num_attention_heads=4,
                                    ffn_dim=128,
                                    max_position_embeddings=64,
                                    word_embed_proj_dim=32,
                                    do_layer_norm_before=do_layer_norm_before)
    return transformers.OPTForCausalLM(config).eval()


def build_container(model, model_config):
    layer = model.model.decoder.layers[0]
    container = policy_to_ds_container(policy=HFOPTLayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model_config,
                                       layer_id=0,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    return container


# The injected layer normalises with attn_nw the MLP's input (pre-LayerNorm) or the attention's residual sum
# (post-LayerNorm: opt-350m), and with input_nw the attention's input (pre) or the layer's output (post).
@pytest.mark.parametrize("do_layer_norm_before", [True, False])
def test_each_layer_norm_goes_where_the_layer_applies_it(do_layer_norm_before):
    model = tiny_opt(do_layer_norm_before)
    layer = model.model.decoder.layers[0]

    container = build_container(model, model.config)

    attention_side, mlp_side = layer.self_attn_layer_norm, layer.final_layer_norm
    before_mlp, other = (mlp_side, attention_side) if do_layer_norm_before else (attention_side, mlp_side)
    assert container.attn_nw is before_mlp.weight and container.attn_nb is before_mlp.bias
    assert container.input_nw is other.weight and container.input_nb is other.bias
    assert container.ds_model_config.pre_layer_norm == do_layer_norm_before


# Without a model config to read do_layer_norm_before from, the layer's own placement is used.
@pytest.mark.parametrize("do_layer_norm_before", [True, False])
def test_the_layer_norm_placement_is_read_from_the_layer(do_layer_norm_before):
    model = tiny_opt(do_layer_norm_before)

    assert build_container(model, None).ds_model_config.pre_layer_norm == do_layer_norm_before


# init_inference with a checkpoint (meta tensors) fills the injected layer's LayerNorm slots from the state dict
# through the container's load_params(), with the same placement.
@pytest.mark.parametrize("do_layer_norm_before", [True, False])
def test_a_checkpoint_s_layer_norms_go_where_the_layer_applies_them(do_layer_norm_before):
    model = tiny_opt(do_layer_norm_before)
    container = build_container(model, model.config)
    hidden = model.config.hidden_size
    sd = {
        f"layer.{norm}.{param}": torch.full((hidden, ), float(value))
        for value, (norm, param) in enumerate(
            (norm, param) for norm in ("self_attn_layer_norm", "final_layer_norm") for param in ("weight", "bias"))
    }
    injected = SimpleNamespace(attention=SimpleNamespace(),
                               mlp=SimpleNamespace(attn_nw=torch.empty(hidden), attn_nb=torch.empty(hidden)),
                               norm_w=torch.empty(hidden),
                               norm_b=torch.empty(hidden))

    container.load_params(injected, sd, None, ReplaceWithTensorSlicing(), "layer.")

    before_mlp, other = ("final_layer_norm", "self_attn_layer_norm")[::1 if do_layer_norm_before else -1]
    assert torch.equal(injected.mlp.attn_nw, sd[f"layer.{before_mlp}.weight"])
    assert torch.equal(injected.mlp.attn_nb, sd[f"layer.{before_mlp}.bias"])
    assert torch.equal(injected.norm_w, sd[f"layer.{other}.weight"])
    assert torch.equal(injected.norm_b, sd[f"layer.{other}.bias"])
