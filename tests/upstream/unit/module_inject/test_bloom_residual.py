# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team

import pytest
import torch
from packaging import version

import deepspeed
from deepspeed.accelerator import get_accelerator
from deepspeed.inference.config import DeepSpeedInferenceConfig
from deepspeed.module_inject.containers import BLOOMLayerPolicy
from deepspeed.ops.op_builder import InferenceBuilder
from deepspeed.ops.transformer.inference.op_binding.base import BaseOp
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


def tiny_bloom_layer(residual_post_layernorm):
    config = transformers.BloomConfig(vocab_size=64,
                                      hidden_size=32,
                                      n_layer=1,
                                      n_head=4,
                                      apply_residual_connection_post_layernorm=residual_post_layernorm)
    return transformers.BloomForCausalLM(config).eval().transformer.h[0]


def test_the_residual_before_the_layer_norm_is_served():
    layer = tiny_bloom_layer(False)

    qkvw, *_ = BLOOMLayerPolicy(layer, inference=True).attention()

    assert qkvw is layer.self_attention.query_key_value.weight


# The injected layer adds each residual from before its LayerNorm: a model that takes it from the LayerNorm's
# output is refused by name instead of computed wrong.
def test_the_residual_after_the_layer_norm_is_refused_by_name():
    layer = tiny_bloom_layer(True)

    with pytest.raises(ValueError, match="apply_residual_connection_post_layernorm=True"):
        BLOOMLayerPolicy(layer, inference=True)


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


def hybrid_engine(model):
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
    return engine


def bloom(residual_post_layernorm):
    torch.manual_seed(0)
    config = transformers.BloomConfig(vocab_size=1024,
                                      hidden_size=256,
                                      n_layer=2,
                                      n_head=4,
                                      apply_residual_connection_post_layernorm=residual_post_layernorm)
    return transformers.BloomForCausalLM(config).to(get_accelerator().current_device_name()).eval()


@pytest.mark.skipif(version.parse(transformers.__version__) > version.parse("4.43.4"),
                    reason="DeepSpeed injects BLOOM on transformers <= 4.43.4 only")
class TestHybridEngineBloomResidual(DistributedTest):
    world_size = 1

    # End to end: the Hybrid Engine's generate(), through the injected layers (their kernels, or on CPU the PyTorch
    # fallbacks), computes a BLOOM whose residual comes from before the LayerNorm.
    @pytest.mark.skipif(not inference_layers_available(), reason="This op had not been implemented on this system.")
    def test_generate_computes_the_served_model(self):
        model = bloom(False)
        input_ids = torch.arange(10, 74, device=model.device).unsqueeze(0)
        with torch.no_grad():
            expected_tokens, expected_logits = greedy(model, input_ids)
        engine = hybrid_engine(model)

        engine.eval()
        with torch.no_grad():
            tokens, logits = greedy(engine, input_ids)

        assert engine._inference_containers, "no layer was injected"
        assert torch.equal(tokens, expected_tokens)
        assert torch.allclose(logits, expected_logits, atol=1e-3)

    # The model the layer cannot compute is refused where the user sets the Hybrid Engine up, by name.
    def test_the_residual_after_the_layer_norm_is_refused_at_initialize(self):
        model = bloom(True)

        with pytest.raises(ValueError, match="apply_residual_connection_post_layernorm=True"):
            hybrid_engine(model)
