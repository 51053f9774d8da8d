# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import GPTNEOXLayerPolicy
from deepspeed.module_inject.utils import policy_to_ds_container
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
from deepspeed.utils.types import ActivationFuncType
from unit.common import DistributedTest

transformers = pytest.importorskip("transformers")


def inference_layers_available():
    # The compiled transformer_inference op, or its PyTorch fallbacks where the op cannot be built.
    if deepspeed.ops.__compatible_ops__[InferenceBuilder.NAME]:
        return True
    try:
        BaseOp(DeepSpeedInferenceConfig())
    except ValueError:
        return False
    return True


def tiny_gpt_neox(hidden_act):
    config = transformers.GPTNeoXConfig(vocab_size=64,
                                        hidden_size=32,
                                        num_hidden_layers=1,
                                        num_attention_heads=4,
                                        intermediate_size=128,
                                        max_position_embeddings=64,
                                        rotary_pct=0.25,
                                        hidden_act=hidden_act)
    return transformers.GPTNeoXForCausalLM(config).eval()


def inference_config_of(model):
    """The config the injected layer is built from, as the Hybrid Engine and init_inference() build it."""
    layer = model.gpt_neox.layers[0]
    container = policy_to_ds_container(policy=GPTNEOXLayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=0,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    return container.ds_model_config


# The injected MLP computes the activation the config names: GELU (its tanh approximation) for GELU variants,
# ReLU for relu; Pythia is gelu.
@pytest.mark.parametrize("hidden_act, mlp_act_func_type", [
    ("gelu", ActivationFuncType.GELU),
    ("gelu_new", ActivationFuncType.GELU),
    ("relu", ActivationFuncType.ReLU),
])
def test_inference_config_uses_the_models_activation(hidden_act, mlp_act_func_type):
    model = tiny_gpt_neox(hidden_act)

    assert inference_config_of(model).mlp_act_func_type == mlp_act_func_type


# The kernel has no other activation: one it cannot compute is refused by name, not replaced by GELU.
@pytest.mark.parametrize("hidden_act", ["silu"])
def test_an_activation_the_kernel_lacks_is_refused_by_name(hidden_act):
    model = tiny_gpt_neox(hidden_act)

    with pytest.raises(ValueError, match=f"hidden_act='{hidden_act}'"):
        inference_config_of(model)


def greedy(model, input_ids):
    output = model.generate(input_ids,
                            attention_mask=torch.ones_like(input_ids),
                            max_new_tokens=4,
                            min_new_tokens=4,
                            do_sample=False,
                            pad_token_id=0,
                            return_dict_in_generate=True,
                            output_logits=True)
    return output.sequences[:, input_ids.shape[1]:], torch.stack(output.logits)


def hybrid_engine(model, stage=2):
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {
            "stage": stage
        },
        "optimizer": {
            "type": "Adam",
            "params": {
                "lr": 1e-3,
                "torch_adam": True
            }
        },
        "hybrid_engine": {
            "enabled": True,
            "max_out_tokens": 256
        },
    }
    engine, *_ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
    return engine


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineGPTNeoXActivationGenerate(DistributedTest):
    world_size = 1

    # End to end: the Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU the
    # PyTorch fallbacks), computes a GPT-NeoX whose MLP applies ReLU, not GELU.
    def test_generate_computes_the_model(self):
        torch.manual_seed(0)
        config = transformers.GPTNeoXConfig(vocab_size=1024,
                                            hidden_size=256,
                                            num_hidden_layers=2,
                                            num_attention_heads=4,
                                            intermediate_size=1024,
                                            max_position_embeddings=256,
                                            initializer_range=0.1,
                                            hidden_act="relu")
        device = get_accelerator().current_device_name()
        model = transformers.GPTNeoXForCausalLM(config).to(device).eval()
        input_ids = torch.arange(10, 74, device=device).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
        engine = hybrid_engine(model)

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
