# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch
from packaging import version

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import HFOPTLayerPolicy
from deepspeed.module_inject.policy import TransformerPolicy
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


def tiny_opt(activation_function):
    config = transformers.OPTConfig(vocab_size=64,
                                    hidden_size=32,
                                    num_hidden_layers=1,
                                    num_attention_heads=4,
                                    ffn_dim=128,
                                    max_position_embeddings=64,
                                    word_embed_proj_dim=32,
                                    activation_function=activation_function)
    return transformers.OPTForCausalLM(config).eval()


def inference_config_of(model):
    """The config the injected layer is built from, as the Hybrid Engine builds it: without init_inference(),
    which is what sets TransformerPolicy.hf_model_config."""
    layer = model.model.decoder.layers[0]
    container = policy_to_ds_container(policy=HFOPTLayerPolicy(layer, inference=True),
                                       config=DeepSpeedInferenceConfig(set_empty_params=True,
                                                                       dtype=torch.float32,
                                                                       transposed_mode=True),
                                       model_config=model.config,
                                       layer_id=0,
                                       child=layer)
    container.initialize_tensors(enable_training=True)
    container.create_ds_model_config()
    return container.ds_model_config


@pytest.mark.parametrize("activation_function, mlp_act_func_type", [
    ("relu", ActivationFuncType.ReLU),
    ("gelu", ActivationFuncType.GELU),
])
def test_inference_config_uses_the_models_activation(activation_function, mlp_act_func_type, monkeypatch):
    monkeypatch.delattr(TransformerPolicy, "hf_model_config", raising=False)
    model = tiny_opt(activation_function)

    assert inference_config_of(model).mlp_act_func_type == mlp_act_func_type


# TransformerPolicy.hf_model_config is class-wide: an earlier init_inference() leaves another model's config there.
def test_the_layers_own_activation_wins_over_another_models_config(monkeypatch):
    monkeypatch.setattr(TransformerPolicy, "hf_model_config", tiny_opt("gelu").config, raising=False)
    model = tiny_opt("relu")

    assert inference_config_of(model).mlp_act_func_type == ActivationFuncType.ReLU


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


@pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
class TestHybridEngineOPTActivationGenerate(DistributedTest):
    world_size = 1

    # End to end: the Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU the PyTorch
    # fallbacks), computes an OPT whose activation is GELU. DeepSpeed injects OPT on transformers < 4.49 and >= 5.24.
    def test_generate_computes_the_model(self):
        if version.parse("4.49") <= version.parse(transformers.__version__) < version.parse("5.24"):
            pytest.skip("DeepSpeed leaves OPT to transformers from 4.49 to 5.23")
        torch.manual_seed(0)
        config = transformers.OPTConfig(vocab_size=1024,
                                        hidden_size=256,
                                        num_hidden_layers=2,
                                        num_attention_heads=4,
                                        ffn_dim=1024,
                                        max_position_embeddings=256,
                                        word_embed_proj_dim=256,
                                        activation_function="gelu")
        device = get_accelerator().current_device_name()
        model = transformers.OPTForCausalLM(config).to(device).eval()
        input_ids = torch.arange(10, 74, device=device).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
        ds_config = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {
                "stage": 2
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
        engine, *_ = deepspeed.initialize(model=model, config=ds_config, model_parameters=model.parameters())

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)
